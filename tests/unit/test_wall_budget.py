"""The wall-clock budget (autotune.search.wall_budget, ``budget.max_wall_minutes``): a run starts
no config once the time so far plus the next config's expected time would pass the budget, lets
the running one finish, keeps its recommendation, reads ``stopped: wall budget``, says what is
left, and ``study resume`` continues in the strategy's order. The runs are replay studies whose
engines sleep for their recorded times x a time scale, so the clock is the real one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune import api
from autotune.engine.readers.landscape import LandscapePoint, write_landscape
from autotune.search.wall_budget import WALL_BUDGET_STATUS, WallBudget, configs_bought
from autotune.store import Store

# Recorded: every engine starts in 40 s and measures a cell in 5 s. At a time scale of 0.02 a
# config (start + 2 repeats at one level) takes about 1 s of wall time.
START_S, MEASURE_S, SCALE = 40.0, 5.0, 0.02
CONFIG_S = (START_S + 2 * MEASURE_S) * SCALE
# Room for one config (no estimate yet) but not for a second one after it.
BUDGET_MIN = 1.8 * CONFIG_S / 60


def _landscape(path: Path) -> Path:
    tok_s = {0: 100.0, 1: 150.0, 2: 170.0, 3: 160.0}
    points = [
        LandscapePoint(
            model="org/tiny",
            workload="code",
            method="none" if n == 0 else "ngram",
            draft=None,
            num_speculative_tokens=n,
            concurrency=1,
            repeat=r,
            output_throughput_tok_s=tok_s[n] + r,
            mean_acceptance_length=None if n == 0 else 1 + 0.6 * n,
            acceptance_per_pos=() if n == 0 else (0.6,) * n,
            engine_start_s=START_S,
            measure_s=MEASURE_S,
        )
        for n in tok_s
        for r in range(2)
    ]
    write_landscape(path, points)
    return path


def _create(store: Store, tmp_path: Path, sampler: str = "grid", minutes: float = BUDGET_MIN):
    land = _landscape(tmp_path / "l.csv")
    data = {
        "name": "walled",
        "model": {"name": "org/tiny"},
        "workloads": ["code"],
        "concurrency": [1],
        "methods": [{"method": "ngram", "num_speculative_tokens": {"min": 1, "max": 3}}],
        "repeats": 2,
        "sampler": sampler,
        "engine": {"kind": "replay", "landscape": str(land)},
        "budget": {"max_wall_minutes": minutes},
    }
    api.create_study(store, data=data, source=str(land))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(str(tmp_path / "t.db"))


def test_the_next_config_is_not_started_when_it_would_pass_the_budget() -> None:
    now = [0.0]
    wall = WallBudget(1.0, clock=lambda: now[0])  # 60 s
    assert wall.exceeded() == ""  # no estimate yet: the first config starts
    wall.trial_started(1)
    now[0] = 25.0
    wall.trial_finished(1)
    assert wall.expected_s() == 25.0
    assert wall.exceeded() == ""  # 25 + 25 <= 60
    wall.trial_started(2)
    now[0] = 45.0
    wall.trial_finished(2)  # 20 s: the mean is 22.5 s
    assert wall.expected_s() == pytest.approx(22.5)
    # 45 + 22.5 > 60; one unit (seconds: a budget under 2 min), the decision time kept
    assert wall.exceeded() == "wall budget (1 min): 45 s elapsed, next config needs ~22 s"
    assert wall.decided_s == 45.0 and wall.spent() == "45 s"
    assert WallBudget(None, clock=lambda: now[0]).exceeded() == ""


def test_the_first_config_of_a_run_starts_however_late_the_run_gets_to_it() -> None:
    """A resume whose set-up (Ray, the store, a loaded machine) outlasts the budget still
    measures one config: every run makes progress, as ``configs_bought`` counts."""
    now = [0.0]
    wall = WallBudget(0.01, clock=lambda: now[0])  # 0.6 s
    now[0] = 5.0
    assert wall.exceeded() == "" and wall.decided_s is None
    wall.trial_started(1)
    assert wall.exceeded() == "wall budget (0.01 min): 5 s elapsed" and wall.decided_s == 5.0


def test_without_an_estimate_the_run_stops_once_the_budget_has_passed() -> None:
    now = [0.0]
    wall = WallBudget(0.5, clock=lambda: now[0])
    wall.trial_started(1)  # still running at 31 s: nothing finished, nothing to estimate from
    now[0] = 31.0
    assert wall.exceeded() == "wall budget (0.5 min): 31 s elapsed"


def test_the_stop_reason_and_the_spent_line_show_the_decision_time_in_minutes() -> None:
    """One clock, one unit: what the stop reason says is what ``spent`` says afterwards, though
    the configs still running go on (the run ends later)."""
    now = [0.0]
    wall = WallBudget(8.0, clock=lambda: now[0])
    wall.trial_started(1)
    now[0] = 146.0
    wall.trial_finished(1)
    now[0] = 335.0
    assert wall.spent() == ""  # not stopped yet
    reason = wall.exceeded()
    assert reason == "wall budget (8 min): 5.6 min elapsed, next config needs ~2.4 min"
    now[0] = 456.0  # the running configs finish
    assert wall.spent() == "5.6 min" and wall.spent() in reason


def test_start_up_is_measured_apart_from_a_configs_own_time() -> None:
    """The first config's wall time beyond its engine time (Ray, model builds) is paid once: the
    next config is expected to take its engine time, not the first one's wall time."""
    now = [0.0]
    wall = WallBudget(8.0, clock=lambda: now[0])
    wall.trial_started(1)
    now[0] = 250.0  # 130 s of it the baseline's engine time, 120 s start-up
    wall.trial_finished(1, engine_seconds=130.0)
    assert wall.startup_s == 120.0 and wall.expected_s() == 130.0
    assert wall.exceeded() == ""  # 250 + 130 <= 480: the old estimate (250 s) stopped here
    wall.trial_started(2)
    now[0] = 340.0  # 80 s of engine time, 10 s of hand-over
    wall.trial_finished(2, engine_seconds=80.0)
    assert wall.overhead_s() == 10.0 and wall.expected_s() == pytest.approx(115.0)
    assert wall.exceeded() == ""  # 340 + 115 <= 480
    now[0] = 370.0
    assert wall.exceeded() == "wall budget (8 min): 6.2 min elapsed, next config needs ~1.9 min"
    assert wall.startup_s == 120.0  # still the first config's


def test_configs_bought_counts_what_the_run_would_start() -> None:
    # 6 min, 40 s start-up, 60 s a config: starts at 40, 100, ..., the 6th ends at 400 > 360.
    assert configs_bought(6.0, 60.0, 40.0, planned=10) == 5
    assert configs_bought(6.0, 60.0, 40.0, planned=3) == 3
    assert configs_bought(0.5, 60.0, 40.0, planned=3) == 1  # the first always starts
    assert configs_bought(6.0, 60.0, 0.0, planned=0) == 0


@pytest.mark.slow  # four runs on the real clock (engines sleep their recorded times): `make test` runs it
def test_the_run_stops_keeps_its_answer_and_resume_continues(tmp_path: Path, store: Store) -> None:
    _create(store, tmp_path)
    first = api.run_study(store, "walled", replay_time_scale=SCALE)
    # the baseline ran (there was no estimate); a second config would have passed the budget
    assert first.trials_run == 1
    assert first.stop_reason.startswith(f"wall budget ({BUDGET_MIN:g} min): ")
    assert first.wall_spent and f": {first.wall_spent} elapsed" in first.stop_reason
    assert first.unmeasured == 3  # the grid's three n-gram configs
    assert first.wall_seconds >= CONFIG_S
    record = store.get_study("walled")
    assert record.status == WALL_BUDGET_STATUS
    trials = store.trials(record)
    assert [(t.method, t.state) for t in trials] == [("none", "complete")]
    assert store.recommendations(record)  # the answer from what was measured
    # each resume has a new budget: one more config per run, in the strategy's order, until done
    runs = [api.run_study(store, "walled", replay_time_scale=SCALE) for _ in range(3)]
    assert [r.trials_run for r in runs] == [1, 1, 1]
    assert [r.unmeasured for r in runs] == [2, 1, None]
    record = store.get_study("walled")
    assert record.status == "done"  # the budget ran out with the search: done, not stopped
    keys = [t.config_key for t in store.trials(record)]
    assert len(keys) == len(set(keys)) == 4
    best = store.recommendations(record)
    # ngram N=2 (170 tok/s), measured on a resume
    assert {(r.speculative_config or {}).get("num_speculative_tokens") for r in best} == {2}


def test_the_budget_goes_to_the_strategys_first_pick_then_the_baseline(
    tmp_path: Path, store: Store
) -> None:
    _create(store, tmp_path, sampler="model")
    api.run_study(store, "walled", replay_time_scale=SCALE)
    api.run_study(store, "walled", replay_time_scale=SCALE)
    trials = store.trials(store.get_study("walled"))
    # the model strategy's order: the method at its largest N, then the baseline
    assert [(t.method, t.num_speculative_tokens) for t in trials] == [("ngram", 3), ("none", 0)]


def test_study_run_says_what_is_left_and_how_to_go_on(autotune, db_path: Path, tmp_path) -> None:
    _create(Store(str(db_path)), tmp_path)
    run = autotune("study", "run", "walled", "--replay-time-scale", str(SCALE), "-q")
    assert run.exit_code == 0, run.stderr
    assert "; stopped: wall budget (" in run.stdout
    # "..., next config needs ~N s" unless the first config alone overran the budget (load)
    spent = re.search(r"; stopped: wall budget \([^)]*\): (\d+ s) elapsed", run.stdout)
    assert spent, run.stdout  # the same number on the summary's line
    assert f"wall budget spent ({spent.group(1)} elapsed): 3 engine configs" in run.stdout
    assert "3 engine configs the search still plans left unmeasured" in run.stdout
    assert f"autotune --db sqlite:///{db_path} study resume walled continues" in run.stdout
    listed = autotune("study", "list", "--json")
    assert '"status": "stopped: wall budget"' in listed.stdout
    shown = autotune("study", "show", "walled", "--json")
    assert '"status": "stopped: wall budget"' in shown.stdout
