"""Confirmation pairs are atomic under the run's budgets (autotune.search.confirm): a pair starts
only when both its starts fit (counted before the first), else it is skipped and the run summary
says so; a pair whose winner's start has begun gets its rival whatever the budget then says, in
the same run and in the resume after a crash between the two. Through the real tuner loop and
store on replay landscapes whose recorded repeats differ between starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import api
from autotune.recommend.choose import choose
from autotune.search.confirm import CONFIRM, Budget, plan
from autotune.search.space import SearchSpace
from autotune.search.wall_budget import WallBudget
from autotune.spec.loader import ResolvedStudy
from autotune.store import Store
from autotune.testing.landscapes import write_rows
from autotune.testing.studies import replay_study

# The baseline's two starts differ by 3.4% at c=1 (the spread); ngram N=1 and N=2 lie 1.3%
# apart at c=1 (a close call); N=2 wins c=4 by 20%. Search 3 starts + the drift check 1.
CLOSE = [
    ("none", 0, 1, (100, 101, 104, 110), ""),
    ("none", 0, 4, (300, 302, 306, 310), ""),
    ("ngram", 1, 1, (150, 151, 152, 153), "0.6"),
    ("ngram", 1, 4, (330, 331, 332, 333), "0.6"),
    ("ngram", 2, 1, (151, 152, 153, 154), "0.6;0.4"),
    ("ngram", 2, 4, (400, 401, 402, 403), "0.6;0.4"),
]
# Two close pairs sharing ngram N=1: N=1 vs N=2 at c=1 (closest), N=1 vs the baseline at c=4.
TWO = [
    *CLOSE[:3],
    ("ngram", 1, 4, (305, 306, 307, 308), "0.6"),
    CLOSE[4],
    ("ngram", 2, 4, (250, 251, 252, 253), "0.6;0.4"),
]
# CLOSE with drafters whose engines take 60 s to start (the baseline's 10 s): a confirmation
# start of a drafter costs more engine-seconds than the study's mean start.
SLOW_DRAFTERS = [(*r, 60.0 if r[0] == "ngram" else 10.0, 2.0) for r in CLOSE]

# max_repeats 2: no undecided re-runs in the search (autotune.search.strategy.undecided_cell),
# so each start draws the recorded repeats these tests count.
CONFIRMING = {"drift_check": True, "confirm_starts": True, "max_repeats": 2}


@pytest.fixture
def store(db_path: Path) -> Store:
    return Store(str(db_path))


def _create(store: Store, tmp_path: Path, rows, name: str, **budget) -> None:
    land = write_rows(tmp_path / f"{name}.csv", rows)
    data = replay_study(land, name=name, measurement=CONFIRMING, budget=budget)
    api.create_study(store, data=data, source=str(land))


def _confirm_trials(store: Store, name: str):
    return [t for t in store.trials(store.get_study(name)) if t.purpose == CONFIRM]


def _label(t) -> str:
    return "off" if t.method == "none" else f"{t.method} N={t.num_speculative_tokens}"


def test_a_pair_that_does_not_fit_is_skipped_whole_and_said(store, tmp_path):
    # 4 starts of 5 used: the pair needs 2, so neither starts (before: the winner alone).
    _create(store, tmp_path, CLOSE, "five", max_engine_configs=5)
    summary = api.run_study(store, "five")
    assert _confirm_trials(store, "five") == []
    assert summary.confirm_starts == 0
    assert "confirmation of code c=1 skipped: budget (5 engine configs" in summary.confirm_note
    assert summary.stop_reason.startswith("budget: 5 engine configs")
    assert store.get_study("five").status == "stopped: budget"
    # The answer rests on one start of each, never on a lone extra start of one side.
    at1 = choose(store.measurements(study="five"), "code", 1)
    assert len(at1.best.trial_ids) == len(at1.runner_up.trial_ids) == 1

    # 6: both fit, both run.
    _create(store, tmp_path, CLOSE, "six", max_engine_configs=6)
    summary = api.run_study(store, "six")
    assert sorted(_label(t) for t in _confirm_trials(store, "six")) == ["ngram N=1", "ngram N=2"]
    assert "skipped" not in summary.confirm_note


def test_a_shared_config_measures_only_the_pairs_that_fit(store, tmp_path):
    # Both pairs take 3 starts (N=1 once for both levels, N=2, off); 6 configs leave 2: the
    # closer pair runs, the other is skipped, and N=1 does not measure the skipped pair's level.
    _create(store, tmp_path, TWO, "two", max_engine_configs=6)
    summary = api.run_study(store, "two")
    resolved = ResolvedStudy.from_json(store.get_study("two").resolved_json)
    found = plan(resolved, SearchSpace(resolved), store.measurements(study="two"))
    closest, other = found.kept
    confirm = _confirm_trials(store, "two")
    kept = [closest.calls[0].winner.label(prose=False), closest.calls[0].rival.label(prose=False)]
    assert [_label(t) for t in confirm] == kept  # winner first
    n1 = next(t for t in confirm if _label(t) == "ngram N=1")
    levels = {r.concurrency for r in store.measurements(study="two") if r.trial_id == n1.id}
    assert levels == {c for _, c in closest.levels} != {c for _, c in other.levels}
    assert f"confirmation of {other.where()} skipped: budget (6 engine configs" in (
        summary.confirm_note
    )
    assert "1 pair(s), 2 engine start(s) this run" in summary.confirm_note
    # The skipped pair's level rests on one start of each side of its close call.
    (w, level) = other.levels[0]
    at = choose(store.measurements(study="two"), w, level)
    for s in (other.calls[0].winner, other.calls[0].rival):
        mine = next(x for x in at.ranked if x.label() == s.label())
        assert len(mine.trial_ids) == (2 if mine.is_baseline else 1)  # the drift check's two


def test_the_rival_starts_though_the_winner_spent_the_engine_hours(store, tmp_path):
    # Search and drift check: 2 x 18 + 2 x 68 = 172 engine-seconds, 43 a start; the pair's two
    # starts fit 225 s (172 + 43 < 225), but the winner's start (60 + 2 x 2 = 64 s) spends the
    # budget (236 s): the rival, counted with it, starts anyway.
    _create(store, tmp_path, SLOW_DRAFTERS, "hours", max_engine_hours=225 / 3600)
    summary = api.run_study(store, "hours")
    confirm = _confirm_trials(store, "hours")
    assert [t.state for t in confirm] == ["complete", "complete"]
    assert summary.engine_seconds > 225 and summary.confirm_starts == 2
    assert store.get_study("hours").status == "stopped: budget"  # nothing more after the pair


class _StopAtTheRival:
    """Interrupts the run (as Ctrl-C does) when the 6th engine start, the rival's confirmation
    start, begins: after the winner's confirmation start finished, before its rival measured."""

    def __init__(self) -> None:
        self.started = 0

    def begin(self, total_configs, done_configs):
        pass

    def planned(self, total_configs):
        pass

    def trial_started(self, config):
        self.started += 1
        if self.started == 6:
            raise KeyboardInterrupt

    def measured(self, config, m):
        pass

    def trial_finished(self, config, value, reason, best):
        pass

    def end(self):
        pass


def test_a_resume_after_a_crash_between_the_two_finishes_the_rival(store, tmp_path):
    _create(store, tmp_path, SLOW_DRAFTERS, "crash", max_engine_hours=225 / 3600)
    with pytest.raises(KeyboardInterrupt):
        api.run_study(store, "crash", reporter=_StopAtTheRival())
    winner, rival = _confirm_trials(store, "crash")
    assert winner.state == "complete" and rival.state == "interrupted"
    # The engine-hours are spent (236 s): a resume starts nothing else, but the owed rival.
    summary = api.run_study(store, "crash")
    assert summary.trials_started == 1 and summary.confirm_starts == 1
    confirm = _confirm_trials(store, "crash")
    assert [t.state for t in confirm] == ["complete", "complete"]
    assert [t.id for t in confirm] == [winner.id, rival.id]  # reopened, not started anew
    cells = [(m.concurrency, m.repeat) for m in store.trial_measurements(rival.id)]
    assert sorted(cells) == [(1, 0), (1, 1)]
    assert len(store.trials(store.get_study("crash"))) == 6
    assert api.run_study(store, "crash").trials_started == 0


def test_the_budget_counts_every_start_of_the_pair() -> None:
    """The tuner's rules for one start, applied to the last of the pair's."""
    b = Budget(started=4, run_started=4, engine_seconds=100.0, finished=4)
    assert b.refuses(2, 2) == ("", "")
    capped = Budget(started=4, run_started=1, engine_seconds=0.0, finished=4, max_configs=2)
    assert capped.refuses(1, 1) == ("", "")
    why, status = capped.refuses(2, 2)
    assert why.startswith("--max-configs 2") and status == "stopped: --max-configs"
    hours = Budget(
        started=4, run_started=4, engine_seconds=100.0, finished=4, max_engine_hours=0.035
    )
    assert hours.refuses(2, 2) == ("", "")  # the rival begins at 125 s of 126
    assert hours.refuses(3, 3)[1] == "stopped: budget"  # the third would begin at 150 s
    now = [0.0]
    wall = WallBudget(1.0, clock=lambda: now[0])
    wall.trial_started(1)
    now[0] = 20.0
    wall.trial_finished(1)  # a start takes about 20 s; 20 s of 60 gone
    timed = Budget(started=1, run_started=1, engine_seconds=0.0, finished=1, wall=wall)
    assert timed.refuses(2, 2) == ("", "")  # 20 + 2 x 20 = 60: both fit
    why, status = timed.refuses(2, 3)  # three rounds would not
    assert why.startswith("1 wall-minutes: 20 s elapsed") and status == "stopped: wall budget"
