"""``measurement.min_measure_s`` on the real (CPU) engine: the closed loop keeps issuing
requests, cycling the prompts, until the time has passed, and the measurement counts what ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.engine._base import EngineConfig, MeasureSettings
from tests.integration.test_vllm_engine import (
    _code_prompts,
    _started,
    _workload,
    needs_vllm,
    tiny_llama,  # noqa: F401  (the session fixture, used by name)
)


@pytest.mark.integration
@needs_vllm
def test_min_measure_s_keeps_the_loop_busy(tiny_llama: Path) -> None:  # noqa: F811
    workload = _workload("code", _code_prompts(2), max_tokens=16, chat_template=False)
    with _started(EngineConfig(model=str(tiny_llama))) as engine:
        plain = engine.measure(workload, 2, 0, MeasureSettings(1))
        timed = engine.measure(workload, 2, 1, MeasureSettings(1, min_measure_s=3.0))
    assert plain.num_requests == 2 and plain.num_output_tokens == 2 * 16
    assert timed.measure_s >= 3.0
    # Every request it sent ran to its 16 tokens (EOS ignored), and all of them are counted.
    assert timed.num_requests > 2
    assert timed.num_output_tokens == 16 * timed.num_requests
    assert timed.output_throughput_tok_s == pytest.approx(timed.num_output_tokens / timed.measure_s)
    assert timed.max_inflight == 2
