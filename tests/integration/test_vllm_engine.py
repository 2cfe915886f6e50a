"""The vLLM backend against known answers on the real (CPU) engine, plus its pure helpers.

Engine starts are the cost here (tens of seconds each on 2 cores): the baseline runs on the
session's shared engine (``vllm_engine``, tests/integration/conftest.py), and each drafting test
starts one engine and checks everything it can on it. The target is a random Llama built by the
``tiny_llama`` fixture.
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

from autotune.engine._base import EngineConfig, MeasureSettings
from autotune.engine.vllm.args import CPU_KV_CACHE_BYTES, build_engine_kwargs
from autotune.engine.vllm.engine import VLLMEngine
from autotune.engine.vllm.failures import one_line_reason
from autotune.errors import EngineError
from autotune.testing.workloads import code_prompts, prepared

needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vllm is not installed"
)


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
def test_baseline_has_no_spec_counters(tiny_llama: Path, vllm_engine: Any) -> None:
    texts = code_prompts(6)
    workload = prepared("code", texts, max_tokens=24, chat_template=True)
    engine = vllm_engine.engine
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
    long = prepared("long", texts, max_tokens=1000, chat_template=True)
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
    workload = prepared("code", code_prompts(4), max_tokens=48, chat_template=False)
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
    workload = prepared("repeat", texts, max_tokens=48, chat_template=False)
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
    tiny_llama: Path, vllm_engine: Any, tmp_path: Path
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
    engine = vllm_engine.engine
    m = engine.measure(workload, concurrency=1, repeat=0, settings=MeasureSettings(1))
    assert m.num_requests == 3
    assert m.num_prompt_tokens == expected  # the whole history, templated once each
    assert m.num_output_tokens == 33 + 16 + 14
    assert m.loop_share is not None and m.distinct_4gram_ratio is not None

    # Long greedy replies of the random-weight target: the guard's figures are those of
    # the output token ids themselves, and most replies end in a loop.
    texts = code_prompts(4)
    long = prepared("long", texts, max_tokens=96, chat_template=True)
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


@pytest.mark.integration
@needs_vllm
def test_min_measure_s_keeps_the_loop_busy(vllm_engine: Any) -> None:
    """``measurement.min_measure_s``: the closed loop keeps issuing requests, cycling the
    prompts, until the time has passed, and the measurement counts what ran."""
    workload = prepared("code", code_prompts(2), max_tokens=16, chat_template=False)
    engine = vllm_engine.engine
    plain = engine.measure(workload, 2, 0, MeasureSettings(1))
    timed = engine.measure(workload, 2, 1, MeasureSettings(1, min_measure_s=3.0))
    assert plain.num_requests == 2 and plain.num_output_tokens == 2 * 16
    assert timed.measure_s >= 3.0
    # Every request it sent ran to its 16 tokens (EOS ignored), and all of them are counted.
    assert timed.num_requests > 2
    assert timed.num_output_tokens == 16 * timed.num_requests
    assert timed.output_throughput_tok_s == pytest.approx(timed.num_output_tokens / timed.measure_s)
    assert timed.max_inflight == 2
