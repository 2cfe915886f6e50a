"""Confirmation judges a level by the objective its answer uses (autotune.search.confirm.plan):
under ``objective: goodput`` the close calls, their margins and the start-to-start spread are
in requests/s that met the SLO (``recommend`` answers such a level by goodput,
autotune.recommend.slo.choose_level), not in throughput. The measurements are written to a real
store trial by trial, as the tuner writes them (the replay engine records no per-request
latencies, so goodput cannot be replayed); each request's (TTFT, TPOT) is chosen here."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import api
from autotune.engine import EngineInfo, Measurement
from autotune.recommend.slo import NoConfigMeetsSLO
from autotune.search.confirm import plan
from autotune.search.space import SearchSpace
from autotune.spec.loader import resolve_study, validate
from autotune.spec.study import StudySpec
from autotune.store import Store

REQUESTS = 40
MEASURE_S = 10.0
TPOT_LIMIT_MS = 10.0

# (config: N, 0 = off), purpose, tok/s of its two repeats, requests that met p99 TPOT <= 10 ms.
# By throughput: the baseline's starts differ by 3% (the spread), N=1 beats N=2 by 33%: clear.
# By goodput: the baseline's starts differ by 5% (2.0 then 2.1 good req/s), N=2 beats N=1 by
# 3.3% (3.1 vs 3.0): inside the spread, a close call.
TRIALS = [
    (0, None, (100.0, 100.0), 20),
    (1, None, (200.0, 200.0), 30),
    (2, None, (150.0, 150.0), 31),
    (0, "drift", (103.0, 103.0), 21),
]


def _study(name: str, **extra) -> dict:
    return {
        "name": name,
        "model": {"name": "tiny"},
        "workloads": ["code"],
        "concurrency": [1],
        "methods": [{"method": "ngram", "num_speculative_tokens": {"min": 1, "max": 2}}],
        "repeats": 2,
        "measurement": {"drift_check": True, "confirm_starts": True},
        **extra,
    }


def _stored(store: Store, data: dict):
    """The study created and its trials written to ``store``; (resolved study, its rows)."""
    resolved = resolve_study(validate(StudySpec, data, "s.yaml"), "s.yaml", platform="cpu")
    record = store.create_study(
        name=data["name"],
        description="",
        model_alias="tiny",
        model=resolved.model,
        source="s.yaml",
        resolved_json=resolved.to_json(),
    )
    space = SearchSpace(resolved)
    configs = {c.num_speculative_tokens: c for c in space.configs()}
    info = EngineInfo(10.0, "0.32.0", "cpu", "cpu", "cpu")
    for n, purpose, tok_s, good in TRIALS:
        config = configs[n]
        trial = store.start_trial(record, config, None, purpose)
        store.record_engine(trial, info)
        for repeat, t in enumerate(tok_s):
            latencies = tuple(
                (50.0, 5.0 if i < good else 20.0) for i in range(REQUESTS)
            )  # (TTFT, TPOT) ms: the first `good` requests meet the TPOT limit
            m = Measurement(
                workload="code",
                workload_digest="d",
                concurrency=1,
                repeat=repeat,
                seed=repeat,
                num_requests=REQUESTS,
                num_prompt_tokens=REQUESTS * 10,
                num_output_tokens=int(t * MEASURE_S),
                measure_s=MEASURE_S,
                output_throughput_tok_s=t,
                request_throughput_req_s=REQUESTS / MEASURE_S,
                p99_tpot_ms=20.0,
                request_latencies_ms=latencies,
            )
            store.add_measurement(trial, m, info, config)
        store.finish_trial(trial, state="complete", engine_seconds=20.0)
    store.set_study_status(data["name"], "done")
    return resolved, store.measurements(study=data["name"])


@pytest.fixture
def store(db_path: Path) -> Store:
    return Store(str(db_path))


def test_under_goodput_the_close_call_is_the_goodput_one(store):
    slo = {"p99_tpot_ms": TPOT_LIMIT_MS}
    resolved, rows = _stored(store, _study("good", objective="goodput", slo=slo))
    found = plan(resolved, SearchSpace(resolved), rows)
    assert found.objective == "goodput"
    assert found.noise_pct == pytest.approx(5.0)  # 2.0 then 2.1 good req/s
    (call,) = found.close
    assert call.winner.num_speculative_tokens == 2 and call.rival.num_speculative_tokens == 1
    assert call.margin_pct == pytest.approx(100 * (3.1 / 3.0 - 1))
    # The winner confirmation judged is the answer recommend gives.
    answer = api.recommend(store, "tiny", "code", 1).choice.best
    assert answer.speculative_config == call.winner.speculative_config


def test_by_throughput_the_same_starts_are_a_clear_win(store):
    resolved, rows = _stored(store, _study("plain"))
    found = plan(resolved, SearchSpace(resolved), rows)
    assert found.objective == "throughput"
    assert found.noise_pct == pytest.approx(3.0)
    assert found.close == ()  # N=1 by 33%


def test_a_level_no_config_meets_is_not_confirmed(store):
    # Under an SLO judged by throughput no config's p99 TPOT (20 ms) meets 10 ms: no answer
    # there, so nothing to confirm (recommend says no config meets the SLO).
    resolved, rows = _stored(store, _study("strict", slo={"p99_tpot_ms": TPOT_LIMIT_MS}))
    assert plan(resolved, SearchSpace(resolved), rows).close == ()
    with pytest.raises(NoConfigMeetsSLO):
        api.recommend(store, "tiny", "code", 1)
