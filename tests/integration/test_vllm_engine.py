"""The vLLM backend against known answers on the real (CPU) engine, plus its pure helpers.

Engine starts are the cost here (tens of seconds each on 2 cores), so each test starts at most
one engine and checks everything it can on it. Until autotune.testing ships tiny models, the
target is a random Llama built by the ``tiny_llama`` fixture.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune.engine._base import EngineConfig, MeasureSettings, PreparedWorkload, Prompt
from autotune.engine.vllm import (
    CPU_KV_CACHE_BYTES,
    VLLMEngine,
    build_engine_kwargs,
    one_line_reason,
)
from autotune.errors import EngineError

needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vllm is not installed"
)

CHAT_TEMPLATE = (
    "{% for message in messages %}<s>{{ message['role'] }}: {{ message['content'] }}</s>"
    "{% endfor %}{% if add_generation_prompt %}<s>assistant: {% endif %}"
)


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
    model.to(torch.bfloat16)  # type: ignore[arg-type]  # transformers' typing of .to is off
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_llama(tmp_path_factory.mktemp("models") / "tiny-llama", vocab_size=1024)


@pytest.fixture(scope="session")
def tiny_llama_other_vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_llama(tmp_path_factory.mktemp("models") / "tiny-llama-512", vocab_size=512)


def _workload(
    name: str, texts: list[str], max_tokens: int, chat_template: bool
) -> PreparedWorkload:
    return PreparedWorkload(
        name=name,
        digest=f"{name}-{max_tokens}-{chat_template}",
        prompts=[Prompt(text, max_tokens) for text in texts],
        chat_template=chat_template,
    )


def _code_prompts(n: int) -> list[str]:
    source = (Path(json.__file__).parent / "decoder.py").read_text()
    return [source[i * 97 : i * 97 + 300] for i in range(n)]


@contextmanager
def _started(config: EngineConfig) -> Iterator[VLLMEngine]:
    engine = VLLMEngine()
    info = engine.start(config)
    assert info.engine_start_s > 0
    assert info.platform == "cpu" and info.device_arch == "cpu"
    assert info.vllm_version
    try:
        yield engine
    finally:
        engine.stop()
        engine.stop()  # idempotent


def _prompt_tokens(model: Path, texts: list[str], chat_template: bool) -> int:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    if chat_template:
        rendered = [
            tok.apply_chat_template(
                [{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True
            )
            for t in texts
        ]
        return sum(len(tok.encode(r, add_special_tokens=False)) for r in rendered)
    return sum(len(tok.encode(t)) for t in texts)


# --- with the engine -----------------------------------------------------------------------


@pytest.mark.integration
@needs_vllm
def test_baseline_has_no_spec_counters(tiny_llama: Path) -> None:
    texts = _code_prompts(6)
    workload = _workload("code", texts, max_tokens=24, chat_template=True)
    with _started(EngineConfig(model=str(tiny_llama))) as engine:
        engine.warmup(workload, 2)
        m = engine.measure(workload, concurrency=3, repeat=1, settings=MeasureSettings(2))

        assert m.num_requests == 6  # max(6 prompts, 2 per concurrency * 3)
        assert m.max_inflight == 3
        assert m.num_output_tokens == 6 * 24  # ignore_eos: every request runs to max_tokens
        assert m.seed == 1
        # The chat template was applied, exactly once per prompt.
        assert m.num_prompt_tokens == _prompt_tokens(tiny_llama, texts, chat_template=True)
        assert (m.num_drafts, m.num_draft_tokens, m.num_accepted_tokens) == (0, 0, 0)
        assert m.accepted_per_pos == ()
        assert m.mean_acceptance_length is None
        assert m.output_throughput_tok_s == pytest.approx(m.num_output_tokens / m.measure_s)
        for p50, p99 in [
            (m.median_ttft_ms, m.p99_ttft_ms),
            (m.median_tpot_ms, m.p99_tpot_ms),
            (m.median_itl_ms, m.p99_itl_ms),
        ]:
            assert p50 is not None and p99 is not None and 0 < p50 <= p99
        # Per request (TTFT, TPOT), kept so goodput can be recomputed: they are the very
        # values the run's percentiles were taken over.
        assert len(m.request_latencies_ms) == m.num_requests
        ttfts = [t for t, _ in m.request_latencies_ms if t is not None]
        tpots = [t for _, t in m.request_latencies_ms if t is not None]
        assert m.p99_ttft_ms == pytest.approx(float(np.percentile(ttfts, 99)))
        assert m.p99_tpot_ms == pytest.approx(float(np.percentile(tpots, 99)))

        # A run that cannot finish in time is an EngineError; the engine stays usable.
        long = _workload("long", texts, max_tokens=1000, chat_template=True)
        with pytest.raises(EngineError, match="did not finish within"):
            engine.measure(long, concurrency=2, repeat=0, settings=MeasureSettings(timeout_s=0.5))
        again = engine.measure(workload, concurrency=1, repeat=0, settings=MeasureSettings(1))
        assert again.max_inflight == 1
        assert again.num_output_tokens == 6 * 24


@pytest.mark.integration
@needs_vllm
def test_draft_model_drafting_with_the_target_itself_is_accepted(tiny_llama: Path) -> None:
    n = 3
    config = EngineConfig(
        model=str(tiny_llama), method="draft_model", num_speculative_tokens=n, draft=str(tiny_llama)
    )
    workload = _workload("code", _code_prompts(4), max_tokens=48, chat_template=False)
    with _started(config) as engine:
        m = engine.measure(workload, concurrency=2, repeat=0, settings=MeasureSettings(2))

    assert m.max_inflight == 2
    assert m.num_drafts > 0
    assert m.num_draft_tokens == n * m.num_drafts
    assert len(m.accepted_per_pos) == n
    assert sum(m.accepted_per_pos) == m.num_accepted_tokens
    # Greedy, same weights: the draft is the target, up to bf16 batch-shape noise.
    assert all(a >= 0.95 for a in m.acceptance_per_pos), m.acceptance_per_pos
    assert m.mean_acceptance_length is not None and m.mean_acceptance_length > 3.8


@pytest.mark.integration
@needs_vllm
def test_ngram_finds_a_prompt_that_repeats_itself(tiny_llama: Path) -> None:
    n = 3
    config = EngineConfig(
        model=str(tiny_llama),
        method="ngram",
        num_speculative_tokens=n,
        method_params={"prompt_lookup_min": 2, "prompt_lookup_max": 4},
    )
    texts = ["for key, value in items: total += value; " * 12, "abc = abc + 1\n" * 20]
    workload = _workload("repeat", texts, max_tokens=48, chat_template=False)
    with _started(config) as engine:
        m = engine.measure(workload, concurrency=2, repeat=0, settings=MeasureSettings(2))

    assert m.max_inflight == 2
    assert m.num_prompt_tokens == 2 * _prompt_tokens(tiny_llama, texts, chat_template=False)
    assert m.num_drafts > 0
    assert m.num_accepted_tokens > 0
    assert sum(m.accepted_per_pos) == m.num_accepted_tokens
    assert len(m.accepted_per_pos) <= n
    assert m.num_draft_tokens <= n * m.num_drafts  # ngram may propose fewer than N


@pytest.mark.integration
@needs_vllm
def test_start_failures_are_one_line_reasons(
    tiny_llama: Path, tiny_llama_other_vocab: Path, tmp_path: Path
) -> None:
    def start_error(config: EngineConfig) -> str:
        engine = VLLMEngine()
        with pytest.raises(EngineError) as caught:
            engine.start(config)
        engine.stop()
        message = str(caught.value)
        assert "\n" not in message and "Traceback" not in message
        return message

    def draft_model(draft: Path) -> EngineConfig:
        return EngineConfig(
            model=str(tiny_llama), method="draft_model", num_speculative_tokens=2, draft=str(draft)
        )

    missing = tmp_path / "no-such-draft"
    message = start_error(draft_model(missing))
    assert str(missing) in message and "directory" in message

    message = start_error(draft_model(tiny_llama_other_vocab))
    assert "vocab" in message and "512" in message

    # A failure inside vLLM's EngineCore process: its reason reaches us through its stderr.
    huge_kv = {"VLLM_CPU_KVCACHE_SPACE": "1000000"}
    message = start_error(EngineConfig(model=str(tiny_llama), env=huge_kv))
    assert "kv" in message.lower() and "initialization failed" not in message


# --- pure helpers (no engine) ---------------------------------------------------------------


def test_engine_kwargs_are_the_speculative_config_plus_the_protocol() -> None:
    config = EngineConfig(
        model="m",
        method="eagle3",
        num_speculative_tokens=4,
        draft="d",
        engine_args={"max_model_len": 4096},
    )
    kwargs = build_engine_kwargs(config, platform="rocm", seed=7, environ={})
    assert kwargs == {
        "model": "m",
        "speculative_config": {"method": "eagle3", "model": "d", "num_speculative_tokens": 4},
        "tensor_parallel_size": 1,
        "seed": 7,
        "enable_prefix_caching": False,
        "disable_log_stats": False,
        "max_model_len": 4096,
    }


def test_cpu_defaults_only_where_the_user_gave_none() -> None:
    user = EngineConfig(model="m", engine_args={"enforce_eager": False, "dtype": "float32"})
    kwargs = build_engine_kwargs(user, platform="cpu", environ={})
    assert kwargs["enforce_eager"] is False and kwargs["dtype"] == "float32"
    assert kwargs["kv_cache_memory_bytes"] == CPU_KV_CACHE_BYTES
    assert kwargs["speculative_config"] is None
    env_sized = build_engine_kwargs(user, platform="cpu", environ={"VLLM_CPU_KVCACHE_SPACE": "4"})
    assert "kv_cache_memory_bytes" not in env_sized


def test_tiny_references_are_resolved_for_model_and_draft() -> None:
    config = EngineConfig(
        model="tiny:llama", method="draft_model", num_speculative_tokens=2, draft="tiny:draft"
    )
    kwargs = build_engine_kwargs(
        config, platform="cuda", environ={}, resolve=lambda ref: "/models/" + ref
    )
    assert kwargs["model"] == "/models/tiny:llama"
    assert kwargs["speculative_config"]["model"] == "/models/tiny:draft"


@pytest.mark.parametrize("key", ["model", "speculative_config", "enable_prefix_caching"])
def test_protocol_engine_args_cannot_be_overridden(key: str) -> None:
    config = EngineConfig(model="m", engine_args={key: True})
    with pytest.raises(EngineError, match=f"engine_args.{key}"):
        build_engine_kwargs(config, platform="cpu", environ={})


def _raised(exc: BaseException, cause: BaseException | None = None) -> BaseException:
    try:
        raise exc from cause
    except BaseException as caught:
        return caught


@pytest.mark.parametrize(
    ("exc", "captured", "expected"),
    [
        (ValueError("first line\n\nthe reason"), [], "ValueError: the reason"),
        (
            RuntimeError("Engine core initialization failed. See root cause above."),
            [
                "Traceback (most recent call last):",
                '  File "x.py", line 1, in f',
                "RuntimeError: Worker failed with error 'out of memory: 3 GiB', please check "
                "the stack trace above for the root cause",
            ],
            "worker: out of memory: 3 GiB",
        ),
        (
            RuntimeError("Engine core initialization failed. See root cause above."),
            ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"],
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ),
        (
            _raised(RuntimeError(), ValueError("prompt is longer than max_model_len")),
            [],
            "ValueError: prompt is longer than max_model_len",
        ),
        (KeyError(), [], "KeyError"),
    ],
)
def test_one_line_reason(exc: BaseException, captured: list[str], expected: str) -> None:
    assert one_line_reason(exc, captured) == expected


def test_one_line_reason_of_a_pydantic_error() -> None:
    from pydantic import BaseModel, field_validator

    class SpeculativeConfig(BaseModel):
        model: str

        @field_validator("model")
        @classmethod
        def _check(cls, value: Any) -> Any:
            raise ValueError("Invalid repository ID or local directory specified: 'x'.\nMore.")

    with pytest.raises(ValueError) as caught:
        SpeculativeConfig(model="x")
    assert one_line_reason(caught.value) == (
        "SpeculativeConfig: Invalid repository ID or local directory specified: 'x'."
    )


@pytest.mark.integration
@needs_vllm
def test_a_conversation_log_is_replayed_with_its_history_and_the_guard_reads_the_outputs(
    tiny_llama: Path, tmp_path: Path
) -> None:
    """A ShareGPT-style log replayed turn by turn on the real engine: every request is sent as
    the target's chat template renders its whole history (as ``vllm serve`` renders a chat
    request), each at its logged reply's length; and the degeneracy guard reads the output
    token ids. The random-weight target's greedy replies fall into loops: the guard trips."""
    from transformers import AutoTokenizer

    from autotune.datasets import prepare
    from autotune.engine.degeneracy import LOOP_SHARE_LIMIT, degeneracy, loop_period
    from autotune.spec.workload import WorkloadSpec

    turns = [
        ("human", "How do I decode a JSON string in Python?"),
        ("gpt", "Use json.loads(text); it returns dicts, lists, strings and numbers." * 2),
        ("human", "And when the text is not valid JSON?"),
        ("gpt", "json.loads raises json.JSONDecodeError with the line and column."),
        ("human", "Can I get the position of the error?"),
        ("gpt", "Yes: the exception has lineno, colno and pos attributes."),
    ]
    log = [{"conversations": [{"from": f, "value": v} for f, v in turns]}]
    (tmp_path / "log.json").write_text(json.dumps(log))
    spec = WorkloadSpec.model_validate(
        {"name": "log", "source": {"kind": "conversations", "path": "log.json"}, "max_tokens": 48}
    )
    workload = prepare(spec, tmp_path)
    assert [p.turn for p in workload.prompts] == [1, 2, 3]
    assert [p.max_tokens for p in workload.prompts] == [33, 16, 14]  # logged replies, 4 ch/tok

    tok = AutoTokenizer.from_pretrained(tiny_llama)
    expected = sum(
        len(
            tok.encode(
                tok.apply_chat_template(p.chat(), tokenize=False, add_generation_prompt=True),
                add_special_tokens=False,
            )
        )
        for p in workload.prompts
    )
    with _started(EngineConfig(model=str(tiny_llama))) as engine:
        m = engine.measure(workload, concurrency=1, repeat=0, settings=MeasureSettings(1))
        assert m.num_requests == 3
        assert m.num_prompt_tokens == expected  # the whole history, templated once each
        assert m.num_output_tokens == 33 + 16 + 14
        assert m.loop_share is not None and m.distinct_4gram_ratio is not None

        # Long greedy replies of the random-weight target: the guard's figures are those of
        # the output token ids themselves, and most replies end in a loop.
        texts = _code_prompts(4)
        long = _workload("long", texts, max_tokens=96, chat_template=True)
        run = engine._run_sync(long, 2, 4, 0, 300)
        ids = [(t.token_ids, t.max_tokens) for t in run.timings]
        assert [len(i) for i, _ in ids] == [96] * 4
        guard = degeneracy(ids)
        loops = sum(loop_period(i) is not None for i, _ in ids)
        assert guard.loop_share == loops / 4
        degenerate = engine.measure(long, concurrency=2, repeat=0, settings=MeasureSettings(2))
        assert degenerate.loop_share is not None
        assert degenerate.loop_share > LOOP_SHARE_LIMIT and degenerate.degenerate
        assert degenerate.loop_at_max_tokens_share == degenerate.loop_share  # ignore_eos
