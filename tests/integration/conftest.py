"""Session fixtures of the real-engine tests, started once and shared, since starting a vLLM
engine or server is what costs (tens of seconds each on two cores):

- ``tiny_llama`` (and a 512-token-vocabulary twin): a random Llama with a byte-level BPE, built
  locally without downloads;
- ``vllm_engine``: one started in-process vLLM engine (``VLLMEngine``) of ``tiny_llama``,
  the baseline, for every test that only needs a warm engine to measure on;
- ``deploy_study``: one tiny real study (baseline + n-gram N=2 on vLLM's CPU build,
  concurrency 1 and 2) for ``check --measure``, ``observe`` and ``verify``;
- ``serve_engine`` / ``ngram_server``: one loopback ``vllm serve`` (``VLLMServeEngine``) of
  exactly the study's n-gram engine, as ``autotune verify`` starts it.

Each shared engine is checked against the engine contract's teardown when the session ends
(:func:`autotune.testing.engine_contract.check_stopped`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CHAT_TEMPLATE = (
    "{% for message in messages %}<s>{{ message['role'] }}: {{ message['content'] }}</s>"
    "{% endfor %}{% if add_generation_prompt %}<s>assistant: {% endif %}"
)

NGRAM = {
    "method": "ngram",
    "num_speculative_tokens": {"min": 2, "max": 2},
    "params": {"prompt_lookup_min": 2, "prompt_lookup_max": 4},
}
"""The deploy study's drafting config."""


def _build_llama(out: Path, vocab_size: int) -> Path:
    """A random Llama with a byte-level BPE trained on Python's json package (no downloads)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(sorted(str(p) for p in Path(json.__file__).parent.glob("*.py")), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        bos_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.to(torch.bfloat16)
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_llama(tmp_path_factory.mktemp("models") / "tiny-llama", vocab_size=1024)


@pytest.fixture(scope="session")
def tiny_llama_other_vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_llama(tmp_path_factory.mktemp("models") / "tiny-llama-512", vocab_size=512)


@dataclass(frozen=True)
class Started:
    """A shared, started engine and what its start returned."""

    engine: Any
    config: Any
    info: Any


def _uses_vllm_engine(item: pytest.Item) -> bool:
    return "vllm_engine" in getattr(item, "fixturenames", ()) or item.nodeid.endswith(
        "test_engine_contract[vllm]"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests on the shared ``vllm_engine`` run first among the integration tests, one after
    the other: an in-process vLLM engine started (and stopped) after it leaves its Prometheus
    counters behind (vLLM's metrics are the process's), so none may start in between."""
    here = Path(__file__).parent
    block = [i for i, item in enumerate(items) if here in Path(str(item.path)).parents]
    if not block:
        return
    ours = [items[i] for i in block]
    ordered = [i for i in ours if _uses_vllm_engine(i)] + [
        i for i in ours if not _uses_vllm_engine(i)
    ]
    for i, item in zip(block, ordered, strict=True):
        items[i] = item


_SHARED: list[Any] = []
"""The started shared ``vllm_engine`` (stopped after its last test: see below)."""


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the shared engine after its last test, so it holds no memory (or counters) while
    the rest of the session runs; its fixture checks the teardown at the end."""
    if (
        _SHARED
        and _uses_vllm_engine(item)
        and (nextitem is None or not _uses_vllm_engine(nextitem))
    ):
        _SHARED.pop().stop()


@pytest.fixture(scope="session")
def vllm_engine(tiny_llama: Path) -> Iterator[Started]:
    """The baseline of ``tiny_llama`` in this process, warm, shared by the tests that use it
    (run one after the other, first: :func:`pytest_collection_modifyitems`)."""
    from autotune.engine import EngineConfig
    from autotune.engine.vllm.engine import VLLMEngine
    from autotune.testing.engine_contract import check_started, check_stopped
    from autotune.testing.workloads import code_prompts, prepared

    engine = VLLMEngine()
    config = EngineConfig(model=str(tiny_llama))
    info = engine.start(config)
    check_started(info)
    _SHARED.append(engine)
    try:
        yield Started(engine, config, info)
    finally:
        _SHARED.clear()
        check_stopped(engine, prepared("code", code_prompts(1), 4, chat_template=False))


@dataclass(frozen=True)
class DeployStudy:
    store: Any
    db: Path
    ngram: dict[str, Any]
    """The exact --speculative-config the study measured for n-gram N=2."""


@pytest.fixture(scope="session")
def deploy_study(tmp_path_factory: pytest.TempPathFactory) -> DeployStudy:
    from autotune import api
    from autotune.store import Store
    from autotune.testing.studies import tiny_real_study, write_study

    tmp = tmp_path_factory.mktemp("deploy")
    db = tmp / "deploy.db"
    store = Store(str(db))
    data = tiny_real_study("deploy", [NGRAM])
    # The drift check's second baseline start measures the study's start-to-start noise, which
    # `check --measure` puts into its interval (a gate on a study that never measured it falls
    # back on its own baseline's drift, which a loaded runner inflates).
    data["measurement"].update(drift_check=True, confirm_starts=False)
    api.create_study(store, write_study(tmp / "deploy.yaml", data))
    summary = api.run_study(store, "deploy")
    assert summary.trials_failed == 0, summary.failures
    trial = next(t for t in store.trials(store.get_study("deploy")) if t.method == "ngram")
    assert trial.speculative_config is not None
    return DeployStudy(store, db, dict(trial.speculative_config))


@pytest.fixture(scope="session")
def serve_engine(
    deploy_study: DeployStudy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Started]:
    """`vllm serve` (loopback) of the deploy study's n-gram N=2 engine, started by the
    ``vllm-serve`` backend exactly as ``autotune verify`` and a served study start it."""
    from autotune.engine.server.engine import VLLMServeEngine
    from autotune.testing.engine_contract import check_started, check_stopped
    from autotune.testing.workloads import code_prompts, prepared
    from autotune.verify.run import engine_config

    store = deploy_study.store
    record = store.get_study("deploy")
    trial = next(t for t in store.trials(record) if t.method == "ngram")
    config = engine_config(record.model, trial)
    engine = VLLMServeEngine(workdir=str(tmp_path_factory.mktemp("serve")))
    info = engine.start(config)
    check_started(info)
    try:
        yield Started(engine, config, info)
    finally:
        server = engine._server
        check_stopped(engine, prepared("code", code_prompts(1), 4, chat_template=False))
        assert server is not None and server.proc is None, "vllm serve outlived its engine"


@pytest.fixture(scope="session")
def ngram_server(serve_engine: Started) -> Any:
    """The :class:`autotune.engine.server.process.Server` of ``serve_engine``."""
    server = serve_engine.engine._server
    assert server is not None
    return server


SLO_TPOT_MS = 50.0
CONTEXT_LENGTHS = [128, 512]
"""What fits the tiny model's max_model_len of 1024 with 32 output tokens."""


@dataclass(frozen=True)
class BucketStudy:
    store: Any
    created: Any
    """What ``api.create_study`` returned (the resolved buckets)."""
    summary: Any
    progress: str
    """The run's progress lines."""


@pytest.fixture(scope="session")
def bucket_study(tmp_path_factory: pytest.TempPathFactory) -> BucketStudy:
    """One tiny real study for two axes at once (each engine start serves both): two
    context-length buckets of ``code`` and ``objective: goodput`` under a p99 TPOT SLO;
    baseline + n-gram N=2 at concurrency 1 and 4."""
    import io

    from autotune import api
    from autotune.cli.progress import LineReporter
    from autotune.store import Store
    from autotune.testing.studies import ngram, tiny_real_study, write_study

    tmp = tmp_path_factory.mktemp("ctx")
    data = tiny_real_study(
        "ctx",
        [ngram(2, 2)],
        concurrency=(1, 4),
        context_lengths=CONTEXT_LENGTHS,
        objective="goodput",
        slo={"p99_tpot_ms": SLO_TPOT_MS},
    )
    store = Store(str(tmp / "ctx.db"))
    created = api.create_study(store, write_study(tmp / "ctx.yaml", data))
    lines = io.StringIO()
    summary = api.run_study(store, "ctx", reporter=LineReporter(lines))
    return BucketStudy(store, created, summary, lines.getvalue())
