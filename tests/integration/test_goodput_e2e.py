"""``objective: goodput`` end to end on the real vLLM CPU engine in Ray actors: every measurement
stores its requests' (TTFT, TPOT) (schema 4), the trial value and the Optuna mirror are vLLM's
goodput under the study's SLO, and ``recommend`` and ``report`` rank and show goodput."""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest

from autotune import api
from autotune.evidence.objectives import goodput_value, measurement_goodput
from autotune.recommend.slo import choose_goodput
from autotune.search.objective import GOODPUT_METRIC
from autotune.spec.loader import ResolvedStudy
from autotune.spec.slo import SLO

pytestmark = pytest.mark.integration

SLO_TPOT_MS = 50.0
"""The bucket study's SLO (tests/integration/conftest.py)."""


def test_a_goodput_study_on_real_engines(bucket_study: Any) -> None:
    """On the session's bucket study (a goodput study with two context buckets of ``code``:
    tests/integration/conftest.py); every bucket is a workload of its own here."""
    import optuna

    store, summary = bucket_study.store, bucket_study.summary
    assert summary.trials_run == 2 and summary.trials_failed == 0, summary
    # progress lines give the trial value in the objective's unit
    done = [line for line in bucket_study.progress.splitlines() if "] done " in line]
    assert len(done) == 2 and all("good req/s (geometric mean" in line for line in done)

    study = store.get_study("ctx")
    spec = ResolvedStudy.from_json(study.resolved_json).spec
    rows = store.measurements(study="ctx")
    slo = SLO(p99_tpot_ms=SLO_TPOT_MS)
    for r in rows:
        assert len(r.request_latencies_ms) == r.num_requests
        tpots = [tpot for _, tpot in r.request_latencies_ms if tpot is not None]
        assert r.p99_tpot_ms is not None and max(tpots) >= r.p99_tpot_ms * 0.999
        g = measurement_goodput(r, slo)
        assert g is not None and 0 < g <= r.num_requests / r.measure_s + 1e-9

    # The Optuna mirror records goodput under its own name, as the tuner scored each trial.
    optuna_study = optuna.load_study(
        study_name=study.optuna_study_name, storage=store.optuna_storage()
    )
    assert optuna_study.metric_names == [GOODPUT_METRIC]
    by_trial = {t.id: [r for r in rows if r.trial_id == t.id] for t in store.trials(study)}
    values = sorted(goodput_value(v, spec) for v in by_trial.values())
    mirrored = sorted(t.value for t in optuna_study.trials if t.value is not None)
    assert mirrored == pytest.approx(values) and all(v > 0 for v in values)

    # recommend ranks each level by median goodput (vLLM's definition), not throughput.
    workloads = sorted({r.workload for r in rows})
    assert len(workloads) == 2
    for workload in workloads:
        for level in (1, 4):
            rec = api.recommend(store, "tiny", workload, level)
            expected = choose_goodput(rows, workload, level, slo)
            assert expected is not None
            assert rec.choice.best.speculative_config == expected.best.speculative_config
            per_config: dict[str, list[float]] = {}
            for r in rows:
                if r.concurrency == level and r.workload == workload:
                    g = measurement_goodput(r, slo)
                    assert g is not None
                    per_config.setdefault(str(r.speculative_config), []).append(g)
            best = statistics.median(per_config[str(rec.choice.best.speculative_config)])
            assert all(best >= statistics.median(v) * 0.99 for v in per_config.values())

    # report shows each level's goodput beside throughput and p99 TPOT.
    rep = api.report_study(store, "ctx")
    assert not rep.trade_off.empty
    assert all(not math.isnan(g) and g > 0 for g in rep.trade_off["goodput_req_s"])
