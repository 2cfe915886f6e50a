"""The ask/tell tuner on the replay backend: stores what the engine returned, never measures a
completed config twice, turns failures into failed trials, and stops on budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import api
from autotune.store import Store
from autotune.testing.landscapes import NGRAM_TWO_LEVELS, write_rows
from autotune.testing.studies import replay_study


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(str(tmp_path / "t.db"))


@pytest.mark.parametrize("sampler", ["grid", "random", "tpe"])
def test_runs_every_config_once(tmp_path: Path, store: Store, sampler: str):
    land = write_rows(tmp_path / "l.csv")
    api.create_study(store, data=replay_study(land, sampler), source=str(land))
    summary = api.run_study(store, "replayed")
    assert summary.trials_run == 3 and summary.trials_failed == 0
    record = store.get_study("replayed")
    trials = store.trials(record)
    assert trials[0].method == "none"  # baseline first
    assert sorted(t.num_speculative_tokens for t in trials) == [0, 1, 2]
    assert all(t.state == "complete" for t in trials)
    # 2 levels x 2 repeats per config, each value one of the recorded repeats
    rows = store.measurements(study="replayed")
    assert len(rows) == 3 * 4
    recorded = {(m, n, c): set(t) for m, n, c, t, _ in NGRAM_TWO_LEVELS}
    for r in rows:
        assert (
            r.output_throughput_tok_s
            in recorded[(r.method, r.num_speculative_tokens, r.concurrency)]
        )
    # cost accounting: start (10 s) + 4 measurements x 2 s per config
    assert summary.engine_seconds == pytest.approx(3 * (10 + 4 * 2))
    assert record.status == "done"
    # Running again measures nothing new.
    again = api.run_study(store, "replayed")
    assert again.trials_run == 0 and len(store.measurements(study="replayed")) == 12


def test_recommend_from_replay(tmp_path: Path, store: Store):
    land = write_rows(tmp_path / "l.csv")
    api.create_study(store, data=replay_study(land), source=str(land))
    api.run_study(store, "replayed")
    at1 = api.recommend(store, "org/tiny", "code", 1)
    assert at1.choice.best.num_speculative_tokens == 2  # 170 beats 150 and 100
    at4 = api.recommend(store, "org/tiny", "code", 4)
    assert at4.choice.best.num_speculative_tokens == 1
    import statistics

    def med(n: int) -> float:
        return statistics.median(
            r.output_throughput_tok_s
            for r in at4.rows
            if r.concurrency == 4 and r.num_speculative_tokens == n
        )

    assert at4.choice.speedup == pytest.approx(med(1) / med(0))
    saved = store.recommendations(store.get_study("replayed"))
    assert {(r.concurrency, r.speculative_config["num_speculative_tokens"]) for r in saved} == {
        (1, 2),
        (4, 1),
    }


def test_failed_config_is_a_failed_trial_and_the_study_goes_on(tmp_path: Path, store: Store):
    land = write_rows(tmp_path / "l.csv")
    data = replay_study(land)
    data["methods"][0]["num_speculative_tokens"] = {"min": 1, "max": 3}  # N=3 not recorded
    api.create_study(store, data=data, source=str(land))
    summary = api.run_study(store, "replayed")
    assert summary.trials_run == 3 and summary.trials_failed == 1
    failed = [t for t in store.trials(store.get_study("replayed")) if t.state == "failed"]
    assert len(failed) == 1 and "has no ngram N=3" in (failed[0].failure_reason or "")
    # A failed config is not retried on resume.
    assert api.run_study(store, "replayed").trials_failed == 0


def test_budget_and_resume(tmp_path: Path, store: Store):
    land = write_rows(tmp_path / "l.csv")
    api.create_study(store, data=replay_study(land), source=str(land))
    first = api.run_study(store, "replayed", max_configs=2)
    assert first.trials_run == 2 and first.stop_reason == "--max-configs 2"
    assert store.get_study("replayed").status == "stopped: --max-configs"
    second = api.run_study(store, "replayed")
    assert second.trials_run == 1
    assert store.get_study("replayed").status == "done"
    keys = [t.config_key for t in store.trials(store.get_study("replayed"))]
    assert len(keys) == len(set(keys)) == 3


def test_engine_config_budget(tmp_path: Path, store: Store):
    land = write_rows(tmp_path / "l.csv")
    api.create_study(
        store, data=replay_study(land, budget={"max_engine_configs": 2}), source=str(land)
    )
    summary = api.run_study(store, "replayed")
    assert summary.trials_run == 2 and summary.stop_reason == "budget: 2 engine configs"
    assert store.get_study("replayed").status == "stopped: budget"


def test_interrupted_trial_is_reopened(tmp_path: Path, store: Store):
    """A trial a killed driver left running is reopened by the resume, not redone: one trial
    per config, the interrupted one completed under its own id."""
    from autotune.engine import EngineConfig

    land = write_rows(tmp_path / "l.csv")
    created = api.create_study(store, data=replay_study(land), source=str(land))
    # A driver killed mid-trial leaves a running trial behind.
    left = store.start_trial(created.study, EngineConfig(model="org/tiny"), None)
    summary = api.run_study(store, "replayed")
    assert summary.trials_run == 3
    trials = store.trials(store.get_study("replayed"))
    assert sorted(t.state for t in trials) == ["complete", "complete", "complete"]
    assert (
        next(t for t in trials if t.config_key == EngineConfig(model="org/tiny").key()).id == left
    )


@pytest.mark.parametrize("sampler", ["grid", "model"])
def test_optuna_mirrors_the_study(tmp_path: Path, store: Store, sampler: str):
    """Whatever strategy ran, optuna-dashboard sees one trial per engine config: the named
    objective, the speculative config and per-level medians, failures with their reason."""
    import optuna

    land = write_rows(tmp_path / "l.csv")
    data = replay_study(land, sampler)
    data["methods"][0]["num_speculative_tokens"] = {"min": 1, "max": 3}  # N=3 not recorded
    api.create_study(store, data=data, source=str(land))
    api.run_study(store, "replayed")
    ostudy = optuna.load_study(study_name="autotune:replayed", storage=store.url)
    assert ostudy.metric_names == ["output_throughput_tok_s_geomean"]
    by_config = {t.user_attrs["config"]: t for t in ostudy.trials}
    stored = {t.config_key for t in store.trials(store.get_study("replayed"))}
    assert len(ostudy.trials) == len(stored)
    failed = by_config["ngram N=3"]
    assert failed.state == optuna.trial.TrialState.FAIL
    assert "has no ngram N=3" in failed.user_attrs["failure_reason"]
    base = by_config["off (no speculation)"]
    assert base.state == optuna.trial.TrialState.COMPLETE
    assert base.user_attrs["speculative_config"] is None
    import statistics

    def median(c: int) -> float:
        rows = store.measurements(study="replayed")
        return statistics.median(
            r.output_throughput_tok_s for r in rows if r.method == "none" and r.concurrency == c
        )

    assert base.user_attrs["tok_s code c=1"] == pytest.approx(median(1))
    assert base.value == pytest.approx((median(1) * median(4)) ** 0.5)
    if sampler == "grid":
        assert ostudy.best_trial.params["option"] == "ngram"
        assert (
            by_config["ngram N=2"].user_attrs["speculative_config"]["num_speculative_tokens"] == 2
        )


def test_export_roundtrip(tmp_path: Path, store: Store, autotune):
    from autotune.engine.readers.landscape import read_landscape

    land = write_rows(tmp_path / "l.csv")
    api.create_study(store, data=replay_study(land), source=str(land))
    api.run_study(store, "replayed")
    out = tmp_path / "exported.csv"
    assert api.export_landscape(store, "replayed", out) == 12
    points = read_landscape(out)
    original = {(p.config, p.concurrency, p.output_throughput_tok_s) for p in read_landscape(land)}
    assert {(p.config, p.concurrency, p.output_throughput_tok_s) for p in points} <= original
    ngram2 = next(p for p in points if p.num_speculative_tokens == 2)
    assert ngram2.acceptance_per_pos == pytest.approx((0.6, 0.4))
    assert ngram2.engine_start_s == 10.0


def test_recommend_falls_back_to_published_prior(autotune, db_path: Path):
    result = autotune("recommend", "--model", "qwen3.5-27b", "--workload", "math")
    assert result.exit_code == 0
    import json

    config = json.loads(result.stdout)
    assert config["method"] == "dflash" and config["num_speculative_tokens"] == 15
    assert "published starting point" in result.stderr
    assert not db_path.exists()
    missing = autotune("recommend", "--model", "tiny", "--workload", "code")
    assert missing.exit_code == 1
    assert "nothing measured" in missing.stderr and "Traceback" not in missing.stderr


def test_study_create_from_a_landscape(tmp_path: Path, autotune):
    land = write_rows(tmp_path / "l.csv")
    made = autotune("study", "create", "--landscape", str(land), "--name", "again")
    assert made.exit_code == 0, made.stderr
    ran = autotune("study", "run", "again")
    assert ran.exit_code == 0, ran.stderr
    rec = autotune("recommend", "--model", "org/tiny", "--workload", "code", "--concurrency", "1")
    assert rec.exit_code == 0 and '"num_speculative_tokens": 2' in rec.stdout
    nameless = autotune("study", "create", "--landscape", str(land))
    assert nameless.exit_code == 2 and "--name" in nameless.stderr
    bad = autotune("study", "create", "--landscape", "/etc/hostname", "--name", "x")
    assert bad.exit_code == 2 and "Traceback" not in bad.stderr


def test_a_noisy_cell_is_measured_again_while_the_engine_is_warm(tmp_path: Path, store: Store):
    """Repeats spreading wider than max_spread_pct get one more repeat each, up to twice the
    study's repeats; a quiet cell gets none."""
    from autotune.engine import Measurement
    from autotune.search.strategy import noisy_cell
    from autotune.spec.loader import ResolvedStudy

    land = write_rows(tmp_path / "l.csv")
    created = api.create_study(store, data=replay_study(land), source=str(land))
    study = ResolvedStudy.from_json(created.study.resolved_json)
    assert study.spec.repeats == 2 and study.spec.measurement.max_spread_pct == 10.0

    def m(c: int, repeat: int, tok_s: float) -> Measurement:
        return Measurement("code", "d", c, repeat, 0, 1, 1, 1, 1.0, tok_s, 1.0)

    quiet = [m(1, 0, 100), m(1, 1, 104), m(4, 0, 300), m(4, 1, 303)]
    assert noisy_cell(study, quiet) is None
    noisy = [m(1, 0, 100), m(1, 1, 187), m(4, 0, 300), m(4, 1, 303)]
    cell = noisy_cell(study, noisy)
    assert (cell.workload, cell.concurrency, cell.repeat) == ("code", 1, 2)
    # Still noisy after the extra repeat: one more, then the bound (2 x repeats) holds.
    assert noisy_cell(study, [*noisy, m(1, 2, 120)]).repeat == 3
    assert noisy_cell(study, [*noisy, m(1, 2, 120), m(1, 3, 150)]) is None
    # A study may keep exactly `repeats` per level.
    data = replay_study(land, name="exact", measurement={"remeasure_noisy": False})
    exact = ResolvedStudy.from_json(
        api.create_study(store, data=data, source=str(land)).study.resolved_json
    )
    assert noisy_cell(exact, noisy) is None


def test_resume_restores_the_optuna_trial_a_dead_driver_missed(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
):
    """The driver stops between finishing a trial in the store and telling Optuna (a full
    disk, a lost server, kill -9): the resume records that trial in the mirror, once."""
    import optuna

    from autotune.errors import StoreError
    from autotune.search.samplers import OptunaMirror

    land = write_rows(tmp_path / "l.csv")
    api.create_study(store, data=replay_study(land), source=str(land))
    real = OptunaMirror.record

    def fail_second(self, *args, **kwargs):
        if getattr(fail_second, "calls", 0) == 1:
            raise StoreError("database or disk is full")
        fail_second.calls = getattr(fail_second, "calls", 0) + 1  # type: ignore[attr-defined]
        return real(self, *args, **kwargs)

    monkeypatch.setattr(OptunaMirror, "record", fail_second)
    with pytest.raises(StoreError, match="full"):
        api.run_study(store, "replayed")
    monkeypatch.setattr(OptunaMirror, "record", real)
    ostudy = optuna.load_study(study_name="autotune:replayed", storage=store.url)
    assert len([t for t in ostudy.trials if "config" in t.user_attrs]) == 1  # one short
    api.run_study(store, "replayed")
    ostudy = optuna.load_study(study_name="autotune:replayed", storage=store.url)
    recorded = [t.user_attrs["config"] for t in ostudy.trials if "config" in t.user_attrs]
    assert len(recorded) == len(set(recorded)) == 3
    assert sorted(t.state for t in store.trials(store.get_study("replayed"))) == ["complete"] * 3
