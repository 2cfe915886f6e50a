"""The measurement protocol (issue #12, item 5): sequential stopping to a stated precision, the
drift check's second baseline run (through the real tuner loop and store, resumed in the middle),
and the drift and tie it reports.

The sequential rule is checked by hand on known numbers: the t quantiles are the textbook ones
(t_{0.975} = 12.706 at 1 degree of freedom, 4.303 at 2, 2.571 at 5).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from autotune import api
from autotune.engine import EngineConfig, EngineInfo, Measurement
from autotune.search.strategy import (
    median_ci_halfwidth_pct,
    noisy_cell,
    precise_enough,
    protocol_cell,
)
from autotune.spec.loader import ResolvedStudy
from autotune.store import Store
from autotune.testing.landscapes import NGRAM_TWO_LEVELS, write_rows
from autotune.testing.studies import replay_study


def _by_hand(values: list[float], t: float) -> float:
    logs = [math.log(v) for v in values]
    return 100.0 * (math.exp(t * statistics.stdev(logs) / math.sqrt(len(logs))) - 1.0)


def test_the_ci_half_width_is_a_t_interval_on_log_throughput():
    assert median_ci_halfwidth_pct([100, 102, 98]) == pytest.approx(
        _by_hand([100, 102, 98], 4.303), rel=1e-3
    )
    assert median_ci_halfwidth_pct([100, 101]) == pytest.approx(
        _by_hand([100, 101], 12.706), rel=1e-3
    )
    six = [100, 102, 98, 101, 99, 100]
    assert median_ci_halfwidth_pct(six) == pytest.approx(_by_hand(six, 2.571), rel=1e-3)
    # About 5.1% at three runs of ±2%, 1.5% at six: more runs of the same noise narrow it.
    assert 5.0 < median_ci_halfwidth_pct([100, 102, 98]) < 5.2
    assert 1.4 < median_ci_halfwidth_pct(six) < 1.6
    assert median_ci_halfwidth_pct([100]) == math.inf
    assert median_ci_halfwidth_pct([100, 100, 100]) == 0.0


def test_sequential_stopping_by_hand():
    rule = {"repeats": 3, "precision_pct": 3.0, "max_repeats": None, "max_level_s": 600.0}
    assert not precise_enough([100, 100], 20.0, **rule)  # fewer than `repeats` runs
    assert not precise_enough([100, 102, 98], 30.0, **rule)  # ±5.1% > ±3%
    assert precise_enough([100, 102, 98, 101], 40.0, **rule)  # ±2.8% at four runs
    assert precise_enough([100, 102, 98, 101, 99, 100], 60.0, **rule)  # ±1.5%
    assert precise_enough([100, 100.5, 99.5], 30.0, **rule)  # ±1.2% at three runs
    # The caps: 3 x repeats runs by default, max_repeats when set, and the level's time.
    wild = [100, 150, 70, 130, 80, 120, 90, 110, 95]
    assert not precise_enough(wild[:8], 80.0, **rule)
    assert precise_enough(wild, 90.0, **rule)
    assert precise_enough(wild[:4], 40.0, **{**rule, "max_repeats": 4})
    assert precise_enough(wild[:3], 600.0, **rule)
    assert not precise_enough(wild[:3], 599.0, **rule)
    # max_repeats never cuts below `repeats`.
    assert not precise_enough(wild[:2], 20.0, **{**rule, "max_repeats": 1})


def test_a_fourth_run_of_the_same_noise_reaches_three_percent():
    # The third assertion above, spelled out: t(3) = 3.182 over four runs.
    assert median_ci_halfwidth_pct([100, 102, 98, 101]) == pytest.approx(
        _by_hand([100, 102, 98, 101], 3.182), rel=1e-3
    )
    assert 2.7 < median_ci_halfwidth_pct([100, 102, 98, 101]) < 2.8


@pytest.fixture
def store(db_path: Path) -> Store:
    return Store(str(db_path))  # the store the `autotune` CLI fixture reads


def _study(store: Store, tmp_path: Path, name: str, **measurement) -> ResolvedStudy:
    land = write_rows(tmp_path / f"{name}.csv")
    data = replay_study(land, name=name, measurement=measurement)
    return ResolvedStudy.from_json(api.create_study(store, data=data).study.resolved_json)


def _m(c: int, repeat: int, tok_s: float, seconds: float = 10.0) -> Measurement:
    return Measurement("code", "d", c, repeat, 0, 1, 1, 1, seconds, tok_s, 1.0)


def test_noisy_cell_re_measures_to_the_precision_with_both_caps(store, tmp_path):
    study = _study(store, tmp_path, "seq", precision_pct=3.0, max_repeats=6, max_level_s=45)
    assert study.spec.repeats == 2
    quiet = [_m(4, 0, 300), _m(4, 1, 300.6)]  # ±1.3% at two runs
    level1 = [_m(1, 0, 100), _m(1, 1, 104)]  # ±25% at two runs
    cell = noisy_cell(study, [*level1, *quiet])
    assert (cell.workload, cell.concurrency, cell.repeat) == ("code", 1, 2)
    # Four runs within ±2.9%: precise enough, no more.
    assert noisy_cell(study, [*level1, _m(1, 2, 101), _m(1, 3, 103), *quiet]) is None
    more = [*level1, _m(1, 2, 110), _m(1, 3, 95)]  # ±10% at four runs
    assert noisy_cell(study, [*more, *quiet]).repeat == 4
    # 40 s measured at c=1: one more run is allowed (45 s cap), then the time cap holds.
    assert noisy_cell(study, [*more, _m(1, 4, 250, seconds=10.0), *quiet]) is None
    slow = [_m(1, 0, 100, 30), _m(1, 1, 130, 30)]
    assert noisy_cell(study, [*slow, *quiet]) is None  # 60 s >= 45 s
    # remeasure_noisy: false keeps exactly `repeats`.
    exact = _study(store, tmp_path, "exact", precision_pct=3.0, remeasure_noisy=False)
    assert noisy_cell(exact, [*level1, *quiet]) is None


def test_a_replay_keeps_the_spread_rule_unless_it_sets_precision(store, tmp_path):
    spread = _study(store, tmp_path, "spread")
    two = [_m(1, 0, 100), _m(1, 1, 104)]  # spread 3.9% < 10%: the spread rule stops
    assert noisy_cell(spread, two) is None
    precise = _study(store, tmp_path, "precise", precision_pct=3.0)
    assert noisy_cell(precise, two) is not None


def test_protocol_cell_takes_every_planned_cell_then_the_re_runs(store, tmp_path):
    study = _study(store, tmp_path, "plan", precision_pct=3.0)
    measured: list[Measurement] = []
    order = []
    while (cell := protocol_cell(study, measured)) is not None and len(order) < 20:
        order.append((cell.concurrency, cell.repeat))
        tok_s = {1: [100, 110, 95, 104, 99, 101], 4: [300, 300.3]}[cell.concurrency]
        measured.append(_m(cell.concurrency, cell.repeat, tok_s[cell.repeat]))
    # repeats outermost, then c=1 re-measured until ±3% or 3 x 2 runs
    assert order[:4] == [(1, 0), (4, 0), (1, 1), (4, 1)]
    assert order[4:] == [(1, 2), (1, 3), (1, 4), (1, 5)]


# --- the drift check through the tuner ------------------------------------------------------

# The baseline is started twice (the drift check), and a replay serves each recorded repeat
# once: four recorded repeats of the baseline, two per start.
TWICE = [
    ("none", 0, 1, (100, 101, 99, 102), ""),
    ("none", 0, 4, (300, 302, 301, 303), ""),
    *NGRAM_TWO_LEVELS[2:],
]


@pytest.mark.parametrize("sampler", ["grid", "model"])
def test_the_drift_check_runs_the_baseline_again_once(store, tmp_path, sampler):
    land = write_rows(tmp_path / "l.csv", TWICE)
    data = replay_study(land, sampler, measurement={"drift_check": True})
    api.create_study(store, data=data, source=str(land))
    summary = api.run_study(store, "replayed")
    assert summary.trials_run == 4 and summary.trials_failed == 0
    trials = store.trials(store.get_study("replayed"))
    # The baseline brackets the search: the first engine under the grid, the second under the
    # model (its first method's anchor goes ahead, so off's repeats can be screened).
    base = 0 if sampler == "grid" else 1
    assert sorted(t.method for i, t in enumerate(trials[:-1]) if i != base) == ["ngram"] * 2
    assert trials[base].method == trials[-1].method == "none"
    assert trials[base].config_key == trials[-1].config_key
    rows = store.measurements(study="replayed")
    late = [r for r in rows if r.trial_id == trials[-1].id]
    assert {r.concurrency for r in late} == {1, 4} and len(late) >= 4  # every level, repeats
    # Both runs pooled into the baseline; the config is not double-counted anywhere else.
    rec = api.recommend(store, "org/tiny", "code", 1)
    assert rec.choice.baseline.trial_ids == (trials[base].id, trials[-1].id)
    assert rec.choice.drift_pct is not None
    assert api.coverage(store, store.get_study("replayed")).measured == 3
    # The Optuna mirror holds one trial per config.
    import optuna

    optuna_study = optuna.load_study(
        study_name=store.get_study("replayed").optuna_study_name, storage=store.optuna_storage()
    )
    assert len(optuna_study.trials) == 3
    # Running again measures nothing: the drift check is done.
    again = api.run_study(store, "replayed")
    assert again.trials_started == 0


def test_no_drift_check_without_a_baseline_or_when_off(store, tmp_path):
    land = write_rows(tmp_path / "l.csv")
    api.create_study(store, data=replay_study(land, name="nobase", baseline=False,
                                            measurement={"drift_check": True}), source=str(land))  # fmt: skip
    assert api.run_study(store, "nobase").trials_run == 2
    api.create_study(store, data=replay_study(land, name="off"), source=str(land))
    assert api.run_study(store, "off").trials_run == 3  # replay default: off


def test_resume_in_the_middle_of_the_drift_check(store, tmp_path):
    land = write_rows(tmp_path / "l.csv", TWICE)
    created = api.create_study(
        store, data=replay_study(land, measurement={"drift_check": True}), source=str(land)
    )
    first = api.run_study(store, "replayed", max_configs=3)
    assert first.trials_run == 3  # the budget stops it before the drift check
    # A driver killed while the second baseline ran leaves it running, half measured.
    baseline = EngineConfig(model="org/tiny")
    trial_id = store.start_trial(created.study, baseline, None)
    info = EngineInfo(10.0, "replay", "replayed landscape", "replay", "replay")
    store.record_engine(trial_id, info)
    store.add_measurement(trial_id, _m(1, 0, 100.0), info, baseline)
    second = api.run_study(store, "replayed")
    assert second.trials_run == 1 and second.trials_started == 1  # only the drift run, again
    trials = store.trials(store.get_study("replayed"))
    base = [t for t in trials if t.method == "none"]
    # The interrupted drift run is reopened, its measured cell kept and the rest measured.
    assert [t.state for t in base] == ["complete", "complete"] and base[1].id == trial_id
    assert len({t.config_key for t in base}) == 1 == len({baseline.key(), base[0].config_key})
    kept = [m for m in store.trial_measurements(trial_id) if (m.concurrency, m.repeat) == (1, 0)]
    assert [m.output_throughput_tok_s for m in kept] == [100.0]
    rec = api.recommend(store, "org/tiny", "code", 1)
    assert rec.choice.baseline.trial_ids == (base[0].id, base[1].id)
    assert store.get_study("replayed").status == "done"
    assert api.run_study(store, "replayed").trials_started == 0


# --- drift as the recommendation shows it -----------------------------------------------------


def _trial(store, record, config, tputs: dict[int, list[float]]) -> int:
    info = EngineInfo(10.0, "replay:hand", "hand-written", "replay", "replay")
    trial_id = store.start_trial(record, config, None)
    store.record_engine(trial_id, info)
    for c, values in tputs.items():
        for repeat, tput in enumerate(values):
            m = Measurement("code", "hand", c, repeat, 0, 8, 800, round(tput * 2), 2.0, tput, 4.0)
            store.add_measurement(trial_id, m, info, config)
    store.finish_trial(trial_id, state="complete", engine_seconds=10.0)
    return trial_id


def test_a_drifting_baseline_is_low_confidence_and_speedups_pool_both_runs(
    store, tmp_path, autotune
):
    land = write_rows(tmp_path / "l.csv")
    record = api.create_study(store, data=replay_study(land, name="drift")).study
    base = EngineConfig(model=record.model)
    ngram = EngineConfig(model=record.model, method="ngram", num_speculative_tokens=1)
    _trial(store, record, base, {1: [100, 100.5, 99.5], 4: [300, 300.5, 299.5]})
    _trial(store, record, ngram, {1: [150, 150.5, 149.5], 4: [330, 330.5, 329.5]})
    # The late baseline: 10% faster at c=1, 1% at c=4.
    _trial(store, record, base, {1: [110, 110.5, 109.5], 4: [303, 303.5, 302.5]})
    store.set_study_status("drift", "done")
    at1 = api.recommend(store, "org/tiny", "code", 1)
    assert at1.choice.drift_pct == pytest.approx(10.0)
    assert at1.choice.baseline_runs == (100.0, 110.0)
    pooled = statistics.median([100, 100.5, 99.5, 110, 110.5, 109.5])
    assert at1.choice.speedup == pytest.approx(150 / pooled)
    (low,) = at1.low_confidence
    assert "the baseline drifted +10.0% during the study (100.0 then 110.0 tok/s" in low.reason
    assert "over the study's precision of ±3%" in low.reason
    at4 = api.recommend(store, "org/tiny", "code", 4)
    assert at4.choice.drift_pct == pytest.approx(1.0) and at4.low_confidence == ()
    out = autotune("recommend", "--model", "org/tiny", "--workload", "code", "--json")
    doc = json.loads(out.stdout)
    assert [d["concurrency"] for d in doc["baseline_drift"]] == [1, 4]
    assert doc["baseline_drift"][0]["drift_pct"] == pytest.approx(10.0)
    assert doc["tie"] is False and doc["tied_with"] == []
    explain = autotune("recommend", "--model", "org/tiny", "--workload", "code", "--explain")
    header = next(ln for ln in explain.stderr.splitlines() if ln.lstrip().startswith("concur"))
    assert "drift %" in header and "verdict" in header
    assert any(ln.split()[:1] == ["1"] and "+10.0" in ln for ln in explain.stderr.splitlines())
    report = autotune("report", "drift")
    assert report.exit_code == 0
    lines = [ln for ln in report.stdout.splitlines() if ln.startswith("baseline drift")]
    assert lines == [
        "baseline drift code c=1: +10.0% (100.0 then 110.0 tok/s; over the study's precision "
        "of ±3%, low confidence)",
        "baseline drift code c=4: +1.0% (300.0 then 303.0 tok/s; within the study's precision "
        "of ±3%)",
    ]
    doc = json.loads(autotune("report", "drift", "--json").stdout)
    assert [round(d["drift_pct"], 6) for d in doc["baseline_drift"]] == [10.0, 1.0]
