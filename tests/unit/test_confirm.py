"""Confirmation across engine starts (autotune.search.confirm) through the real tuner loop and
store on replay landscapes whose recorded repeats differ, so two starts of one config draw
different repeats (the start-to-start spread the drift check measures): a close call gets one
more start of the winner, then of the rival; a clear win gets none; the bound holds; a resume
after an interrupt inside a confirmation start neither loses nor repeats a measurement; and
``recommend --explain`` lists the starts behind each level."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune import api
from autotune.evidence.cells import baseline_drift
from autotune.recommend.choose import choose
from autotune.search.confirm import CONFIRM, plan
from autotune.search.space import SearchSpace
from autotune.spec.loader import ResolvedStudy
from autotune.store import Store
from autotune.testing.landscapes import write_rows
from autotune.testing.studies import replay_study

# Four recorded repeats per cell, two per start: the baseline's two starts differ by 3.4% at
# c=1 and 1.0% at c=4 (the spread); ngram N=1 and N=2 lie 1.3% apart at c=1 (a close call),
# N=2 wins c=4 by 20% (clear).
CLOSE = [
    ("none", 0, 1, (100, 101, 104, 110), ""),
    ("none", 0, 4, (300, 302, 306, 310), ""),
    ("ngram", 1, 1, (150, 151, 152, 153), "0.6"),
    ("ngram", 1, 4, (330, 331, 332, 333), "0.6"),
    ("ngram", 2, 1, (151, 152, 153, 154), "0.6;0.4"),
    ("ngram", 2, 4, (400, 401, 402, 403), "0.6;0.4"),
]
# N=2 wins c=1 by 30% too: nothing lies within the spread.
CLEAR = [*CLOSE[:4], ("ngram", 2, 1, (200, 201, 202, 203), "0.6;0.4"), CLOSE[5]]
# Two close pairs: N=1 vs N=2 at c=1, N=1 vs the baseline at c=4 (N=2 slower there). The
# baseline starts three times at c=4 (search, drift check, confirmation): six recorded repeats,
# as a replay serves each once.
TWO = [
    CLOSE[0],
    ("none", 0, 4, (300, 302, 306, 310, 303, 308), ""),
    CLOSE[2],
    ("ngram", 1, 4, (305, 306, 307, 308), "0.6"),
    CLOSE[4],
    ("ngram", 2, 4, (250, 251, 252, 253), "0.6;0.4"),
]

# max_repeats 2: no undecided re-runs in the search (autotune.search.strategy.undecided_cell),
# so each start draws the recorded repeats these tests count.
CONFIRMING = {"drift_check": True, "confirm_starts": True, "max_repeats": 2}


@pytest.fixture
def store(db_path: Path) -> Store:
    return Store(str(db_path))  # the store the `autotune` CLI fixture reads


def _create(store: Store, tmp_path: Path, rows, name: str = "replayed", **measurement) -> None:
    land = write_rows(tmp_path / f"{name}.csv", rows)
    data = replay_study(land, name=name, measurement={**CONFIRMING, **measurement})
    api.create_study(store, data=data, source=str(land))


def _trials(store: Store, name: str = "replayed"):
    return store.trials(store.get_study(name))


def _label(t) -> str:
    return "off" if t.method == "none" else f"{t.method} N={t.num_speculative_tokens}"


def test_a_close_call_gets_one_more_start_each_winner_first(store, tmp_path):
    _create(store, tmp_path, CLOSE)
    summary = api.run_study(store, "replayed")
    trials = _trials(store)
    search = [t for t in trials if t.purpose is None]
    confirm = [t for t in trials if t.purpose == CONFIRM]
    assert len(search) == 3 and [t.purpose for t in trials].count("drift") == 1
    # Confirmation comes last, after the drift check, one start of each of the two configs.
    assert [t.purpose for t in trials[-2:]] == [CONFIRM, CONFIRM]
    assert sorted(_label(t) for t in confirm) == ["ngram N=1", "ngram N=2"]
    # The spread the study measured, and the call it found inside it, from the search's rows.
    search_rows = [r for r in store.measurements(study="replayed") if r.purpose != CONFIRM]
    noise = max(abs(d.drift_pct) for d in baseline_drift(search_rows))
    before = choose(search_rows, "code", 1)
    margin = 100 * abs(before.best.median_tok_s / before.runner_up.median_tok_s - 1)
    assert margin <= noise
    # A-B order: the winner's confirmation start first, then the runner-up's.
    assert [t.config_key for t in confirm] == [
        next(t.config_key for t in search if _label(t) == before.best.label(prose=False)),
        next(t.config_key for t in search if _label(t) == before.runner_up.label(prose=False)),
    ]
    assert confirm[0].id < confirm[1].id
    # Only the close level is measured on a confirmation start, with the full repeats.
    rows = store.measurements(study="replayed")
    for t in confirm:
        mine = [r for r in rows if r.trial_id == t.id]
        assert {(r.concurrency, r.repeat) for r in mine} == {(1, 0), (1, 1)}
        assert all(r.purpose == CONFIRM for r in mine)
    # The answer pools every start; the cost is in the run summary.
    after = choose(rows, "code", 1)
    assert {t.id for t in confirm} <= set(after.best.trial_ids) | set(after.runner_up.trial_ids)
    assert len(after.best.trial_ids) == 2 and len(after.runner_up.trial_ids) == 2
    assert summary.confirm_starts == 2
    assert summary.confirm_engine_seconds == pytest.approx(sum(t.engine_seconds for t in confirm))
    assert "2 engine start(s) this run" in summary.confirm_note
    assert "code c=1 (ngram N=" in summary.confirm_note
    # Stored recommendations pool both starts; a second run starts nothing.
    assert api.run_study(store, "replayed").trials_started == 0
    assert len(_trials(store)) == 6


def test_a_clear_win_gets_no_confirmation_start(store, tmp_path):
    _create(store, tmp_path, CLEAR)
    summary = api.run_study(store, "replayed")
    assert [t.purpose for t in _trials(store)] == [None, None, None, "drift"]
    assert summary.confirm_starts == 0
    assert "no level within the start-to-start spread" in summary.confirm_note


def test_off_by_default_on_replay_and_nothing_without_a_spread(store, tmp_path):
    land = write_rows(tmp_path / "l.csv", CLOSE)
    api.create_study(store, data=replay_study(land, name="plain"), source=str(land))
    summary = api.run_study(store, "plain")
    assert [t.purpose for t in _trials(store, "plain")] == [None, None, None]
    assert summary.confirm_note == ""
    # On, but without the drift check no spread was measured: nothing to confirm against.
    _create(store, tmp_path, CLOSE, name="nodrift", drift_check=False)
    summary = api.run_study(store, "nodrift")
    assert [t.purpose for t in _trials(store, "nodrift")] == [None, None, None]
    assert "no start-to-start spread measured" in summary.confirm_note


def test_the_bound_keeps_the_closest_pairs(store, tmp_path):
    _create(store, tmp_path, TWO, name="unbounded")
    api.run_study(store, "unbounded")
    confirm = [t for t in _trials(store, "unbounded") if t.purpose == CONFIRM]
    # N=1 is in both pairs: one start for both its levels, then each rival once.
    assert sorted(_label(t) for t in confirm) == ["ngram N=1", "ngram N=2", "off"]
    n1 = next(t for t in confirm if _label(t) == "ngram N=1")
    levels = {r.concurrency for r in store.measurements(study="unbounded") if r.trial_id == n1.id}
    assert levels == {1, 4}
    # The baseline's confirmation start joins its score, not its drift (the drift check's).
    rows = store.measurements(study="unbounded")
    search = [r for r in rows if r.purpose != CONFIRM]
    drift = {d.concurrency: d.drift_pct for d in baseline_drift(search)}
    at4 = choose(rows, "code", 4)
    assert len(at4.baseline.trial_ids) == 3 and at4.drift_pct == pytest.approx(drift[4])

    _create(store, tmp_path, TWO, name="one", confirm_max_pairs=1)
    summary = api.run_study(store, "one")
    confirm = [t for t in _trials(store, "one") if t.purpose == CONFIRM]
    # The closer of the two calls is kept, the other left out.
    resolved = ResolvedStudy.from_json(store.get_study("one").resolved_json)
    found = plan(resolved, SearchSpace(resolved), store.measurements(study="one"))
    assert len(found.close) == 2 and found.pairs == 1 and found.dropped == 1
    closest = min(found.close, key=lambda c: c.margin_pct)
    pair = [closest.winner.label(prose=False), closest.rival.label(prose=False)]
    assert [_label(t) for t in confirm] == pair  # winner first
    assert summary.confirm_starts == 2
    assert "1 pair(s) over confirm_max_pairs left out" in summary.confirm_note

    _create(store, tmp_path, TWO, name="none", confirm_max_pairs=0)
    assert api.run_study(store, "none").confirm_starts == 0
    assert all(t.purpose != CONFIRM for t in _trials(store, "none"))


class _StopInsideConfirmation:
    """A reporter that interrupts the run (as Ctrl-C does) after the first measurement of the
    first confirmation start: the 5th engine start (3 configs, the drift check, then it)."""

    def __init__(self) -> None:
        self.started = 0
        self.measured_in_it = 0

    def begin(self, total_configs, done_configs):
        pass

    def planned(self, total_configs):
        pass

    def trial_started(self, config):
        self.started += 1

    def measured(self, config, m):
        if self.started == 5:
            self.measured_in_it += 1
            if self.measured_in_it == 1:
                raise KeyboardInterrupt

    def trial_finished(self, config, value, reason, best):
        pass

    def end(self):
        pass


def test_resume_inside_a_confirmation_start_loses_and_repeats_nothing(store, tmp_path):
    # The same study uninterrupted, for the measurements a resume must end with.
    _create(store, tmp_path, CLOSE, name="whole")
    api.run_study(store, "whole")
    whole = [t for t in _trials(store, "whole") if t.purpose == CONFIRM]

    _create(store, tmp_path, CLOSE)
    with pytest.raises(KeyboardInterrupt):
        api.run_study(store, "replayed", reporter=_StopInsideConfirmation())
    trials = _trials(store)
    assert [t.purpose for t in trials][-1] == CONFIRM and trials[-1].state == "interrupted"
    (kept,) = store.trial_measurements(trials[-1].id)

    summary = api.run_study(store, "replayed")
    assert summary.confirm_starts == 2 and summary.trials_started == 2  # the reopened one, B
    trials = _trials(store)
    confirm = [t for t in trials if t.purpose == CONFIRM]
    assert [t.state for t in confirm] == ["complete", "complete"]
    assert [t.config_key for t in confirm] == [t.config_key for t in whole]
    # The interrupted start is reopened, not redone: its measured cell kept, once.
    first = store.trial_measurements(confirm[0].id)
    assert kept.id in {m.id for m in first}
    for t in confirm:
        cells = [(m.workload, m.concurrency, m.repeat) for m in store.trial_measurements(t.id)]
        assert len(cells) == len(set(cells)) == 2
    # No other config ran again, and nothing is left to do.
    assert len(trials) == 6
    assert api.run_study(store, "replayed").trials_started == 0


def test_recommend_explain_lists_the_starts(store, tmp_path, autotune):
    _create(store, tmp_path, CLOSE)
    api.run_study(store, "replayed")
    out = autotune("recommend", "--model", "org/tiny", "--workload", "code", "--explain")
    assert out.exit_code == 0, out.stderr
    lines = out.stderr.splitlines()
    head = lines.index(
        "engine starts behind each level's answer (median tok/s per start, its runs):"
    )
    c1, c4 = lines[head + 1], lines[head + 2]
    assert c1.split()[0] == "c=1" and c4.split()[0] == "c=4"
    # c=1: both configs, each with its search start and its confirmation start.
    answer, runner = c1.split(" | ")
    assert answer.count("confirmation") == 1 and runner.count("confirmation") == 1
    assert runner.lstrip().startswith("runner-up ngram N=")
    assert answer.count("(2 runs") == 2
    # c=4: a clear win, one start each; the baseline's second start is the drift check's.
    assert "confirmation" not in c4
    doc = json.loads(
        autotune("recommend", "--model", "org/tiny", "--workload", "code", "--json").stdout
    )
    at1 = next(lv for lv in doc["starts"] if lv["concurrency"] == 1)
    assert [x["purpose"] for x in at1["answer"]] == [None, CONFIRM]
    assert [x["purpose"] for x in at1["runner_up"]] == [None, CONFIRM]
    assert all(x["runs"] == 2 and x["median_tok_s"] > 0 for x in at1["answer"])


def test_a_schema_5_store_gains_the_trial_purpose(tmp_path):
    from sqlalchemy import create_engine, text

    from autotune.engine import EngineConfig
    from autotune.store import migrations

    path = tmp_path / "old.db"
    store = Store(str(path))
    study = store.create_study(
        name="s", description="", model_alias=None, model="m", source="", resolved_json="{}"
    )
    old = store.start_trial(study, EngineConfig(model="m"), 0)
    store.dispose()
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:  # what an autotune of schema 5 left behind
        conn.execute(text("ALTER TABLE autotune_trials DROP COLUMN purpose"))
        conn.execute(text("UPDATE autotune_meta SET value='5' WHERE key='schema_version'"))
    engine.dispose()
    store = Store(str(path))
    new = store.start_trial(store.get_study("s"), EngineConfig(model="m"), None, CONFIRM)
    by_id = {t.id: t.purpose for t in store.trials(store.get_study("s"))}
    assert by_id == {old: None, new: CONFIRM}
    store.dispose()
    with create_engine(f"sqlite:///{path}").connect() as conn:
        assert migrations.current_version(conn) == migrations.SCHEMA_VERSION == 8
