"""The engine contract (:mod:`autotune.testing.engine_contract`) against every backend: the
replay engine on a test landscape, the in-process vLLM engine and ``vllm serve`` through the
``vllm-serve`` backend. The real engines are the session's shared ones (started once, their
teardown checked when the session ends: tests/integration/conftest.py), so the contract costs a
few measurements each, not an engine start."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from autotune.engine import EngineConfig, MeasureSettings
from autotune.testing import engine_contract as contract
from autotune.testing.landscapes import write_rows
from autotune.testing.workloads import code_prompts, prepared

needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vllm is not installed"
)
REAL = [pytest.mark.integration, needs_vllm]

SMALL = prepared("code", code_prompts(2), max_tokens=16, chat_template=False)
EMPTY = prepared("empty", [], max_tokens=16, chat_template=False)


def _replay(request: pytest.FixtureRequest) -> contract.Backend:
    from autotune.engine.replay import ReplayEngine

    land = write_rows(request.getfixturevalue("tmp_path") / "l.csv")
    engine = ReplayEngine(land)
    config = EngineConfig(model="org/tiny", method="ngram", num_speculative_tokens=2)
    info = engine.start(config)
    request.addfinalizer(lambda: contract.check_stopped(engine, SMALL))
    return contract.Backend(
        name="replay",
        engine=engine,
        config=config,
        info=info,
        workload=SMALL,
        settings=MeasureSettings(1),
        failing=(prepared("chat", ["hi"], 4, False), MeasureSettings(1)),  # not recorded
        unstartable=EngineConfig(model="org/tiny", method="ngram", num_speculative_tokens=5),
        fresh=lambda: ReplayEngine(land),
        levels=(1, 4),  # the landscape's levels
    )


def _vllm(request: pytest.FixtureRequest) -> contract.Backend:
    from autotune.engine.vllm.engine import VLLMEngine

    shared = request.getfixturevalue("vllm_engine")
    tiny_llama: Path = request.getfixturevalue("tiny_llama")
    missing = request.getfixturevalue("tmp_path") / "no-such-draft"
    return contract.Backend(
        name="vllm",
        engine=shared.engine,
        config=shared.config,
        info=shared.info,
        workload=SMALL,
        settings=MeasureSettings(1),
        # a run that cannot finish in its time: cancelled on the engine, reported
        failing=(
            prepared("long", code_prompts(2), 1000, False),
            MeasureSettings(1, timeout_s=0.5),
        ),
        unstartable=EngineConfig(
            model=str(tiny_llama),
            method="draft_model",
            num_speculative_tokens=2,
            draft=str(missing),
        ),
        fresh=VLLMEngine,
    )


def _vllm_serve(request: pytest.FixtureRequest) -> contract.Backend:
    from autotune.engine.server.engine import VLLMServeEngine

    shared = request.getfixturevalue("serve_engine")
    # `vllm serve` is refused before it starts: a protocol engine arg the study may not set
    reserved = EngineConfig(model=shared.config.model, engine_args={"enable_prefix_caching": True})
    return contract.Backend(
        name="vllm-serve",
        engine=shared.engine,
        config=shared.config,
        info=shared.info,
        workload=SMALL,
        settings=MeasureSettings(1),
        failing=(EMPTY, MeasureSettings(1)),
        unstartable=reserved,
        fresh=VLLMServeEngine,
    )


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param(_replay, id="replay"),
        pytest.param(_vllm, id="vllm", marks=REAL),
        pytest.param(_vllm_serve, id="vllm-serve", marks=REAL),
    ],
)
def test_engine_contract(backend: Any, request: pytest.FixtureRequest) -> None:
    under = backend(request)
    measured = contract.check_backend(under)
    drafts = [m.num_drafts for m in measured]
    print(f"\n  {under.name}: {under.config.label()}, drafts per level {drafts}")


def test_the_contract_catches_a_broken_engine() -> None:
    """The checks fail on what they are there to catch: counters that do not add up, a
    baseline that drafts, a multi-line reason."""
    from autotune.engine import Measurement

    good = Measurement(
        workload="code", workload_digest="d", concurrency=2, repeat=0, seed=0, num_requests=2,
        num_prompt_tokens=10, num_output_tokens=100, measure_s=1.0, output_throughput_tok_s=100.0,
        request_throughput_req_s=2.0, num_drafts=10, num_draft_tokens=20, num_accepted_tokens=9,
        accepted_per_pos=(6, 3), max_inflight=2,
    )  # fmt: skip
    ngram2 = EngineConfig(model="m", method="ngram", num_speculative_tokens=2)
    contract.check_measurement(good, ngram2, SMALL, 2, 0)
    from dataclasses import replace

    broken = [
        (replace(good, accepted_per_pos=(6, 2)), "do not add up"),
        (replace(good, accepted_per_pos=(3, 6)), "grows with the position"),
        (replace(good, num_accepted_tokens=25, accepted_per_pos=(15, 10)), "does not hold"),
        (replace(good, max_inflight=3), "max_inflight"),
        (replace(good, output_throughput_tok_s=150.0), "is not 100 tokens"),
        (replace(good, concurrency=1), "for cell"),
    ]
    for m, message in broken:
        with pytest.raises(contract.ContractError, match=message):
            contract.check_measurement(m, ngram2, SMALL, 2, 0)
    with pytest.raises(contract.ContractError, match="the baseline drafted"):
        contract.check_measurement(good, EngineConfig(model="m"), SMALL, 2, 0)
    with pytest.raises(contract.ContractError, match="more than one line"):
        contract.one_line("first\nsecond")
