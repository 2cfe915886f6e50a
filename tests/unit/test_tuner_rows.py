"""The tuner keeps the stored measurements it wrote instead of reading the store again after
every event: what its strategy is shown must still be exactly what the store reads then, on
several slots (the running engines' cells too) and after a resume that reopened an interrupted
trial with cells stored.

Real tuner, store and replay engines on a :class:`autotune.cluster.virtual.VirtualPool`, the
model-guided search on a repository landscape."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from autotune import api
from autotune.cluster.jobs import Cell
from autotune.cluster.virtual import VirtualPool
from autotune.engine._base import EngineConfig, Measurement
from autotune.engine.replay import ReplayEngine
from autotune.search.landscape_study import study_from_landscape
from autotune.search.model_strategy import ModelStrategy
from autotune.search.strategy import SearchState
from autotune.search.tuner import Tuner
from autotune.spec.loader import ResolvedStudy
from autotune.store import MeasurementRecord, Store

LANDSCAPE = Path(__file__).resolve().parents[2] / "bench/landscapes/synthetic-maverick-eagle3.csv"
NAME = "rows"


class Stop(Exception):
    """The driver dies mid-study (raised from a cell plan, as a Ctrl-C would be)."""


class Checking(ModelStrategy):
    """The model strategy, comparing every state it is shown with the store's own reads."""

    def __init__(self, study: ResolvedStudy, store: Store, stop_after: int | None = None):
        super().__init__(study)
        self.store = store
        self.stop_after = stop_after
        self.checked = {"propose": 0, "next_cell": 0, "running": 0}

    def _finished(self) -> list[MeasurementRecord]:
        return self.store.measurements(study=NAME)

    def propose(self, state: SearchState, slots: int, fill: bool = True) -> list[EngineConfig]:
        assert list(state.rows) == self._finished()
        self.checked["propose"] += 1
        return super().propose(state, slots, fill)

    def next_cell(
        self, state: SearchState, config: EngineConfig, measured: Sequence[Measurement]
    ) -> Cell | None:
        running = [t for t in self.store.trials(self.store.get_study(NAME)) if t.state == "running"]
        own = next(t for t in running if t.config_key == config.key())
        others = [r for t in running if t.id != own.id for r in self.store.trial_measurements(t.id)]
        assert list(state.rows) == [*self._finished(), *others]
        self.checked["next_cell"] += 1
        self.checked["running"] += bool(others)
        if self.stop_after is not None and self.checked["next_cell"] > self.stop_after:
            raise Stop
        return super().next_cell(state, config, measured)


def _tuner(store: Store, slots: int, stop_after: int | None = None) -> tuple[Tuner, Checking]:
    record = store.get_study(NAME)
    resolved = ResolvedStudy.from_json(record.resolved_json)
    landscape, seed = str(resolved.landscape), resolved.spec.seed
    strategy = Checking(resolved, store, stop_after)

    def pool(_: ResolvedStudy) -> VirtualPool:
        return VirtualPool(slots, lambda: ReplayEngine(landscape, seed))

    return Tuner(store, record, pool, strategy=strategy), strategy


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    data = study_from_landscape(LANDSCAPE, NAME, sampler="model", seed=3)
    api.create_study(store, data=data, source=str(LANDSCAPE))
    store.ensure_optuna_schema()
    return store


@pytest.mark.slow  # reads the whole store back at every event of a 31-config search: `make test` runs it
def test_the_strategy_sees_what_the_store_reads_on_several_slots(store: Store):
    tuner, strategy = _tuner(store, slots=4)
    with store.lease(NAME):
        summary = tuner.run()
    assert summary.stop_reason == "no unmeasured config can beat the measured best"
    assert strategy.checked["propose"] > 3 and strategy.checked["running"] > 10, strategy.checked
    # Every measurement stored once, and the tuner's copy of them is the store's.
    rows = store.measurements(study=NAME)
    assert summary.measurements == len(rows) == len({r.id for r in rows})
    assert tuner._rows == rows


@pytest.mark.slow  # reads the whole store back at every event of two 31-config searches: `make test` runs it
def test_a_resume_sees_the_reopened_trials_stored_cells(store: Store):
    """A driver killed mid-study leaves trials interrupted with cells stored; the resume
    reopens them, and every plan of it sees their stored cells with the rest."""
    first, _ = _tuner(store, slots=4, stop_after=12)
    with store.lease(NAME), pytest.raises(Stop):
        first.run()
    trials = store.trials(store.get_study(NAME))
    left = {t.id for t in trials if t.state == "interrupted" and store.trial_measurements(t.id)}
    assert left  # the test needs an interrupted trial with cells stored
    second, strategy = _tuner(store, slots=4)
    with store.lease(NAME):
        summary = second.run()
    assert summary.stop_reason == "no unmeasured config can beat the measured best"
    assert strategy.checked["running"] > 0
    finished = {t.id for t in store.trials(store.get_study(NAME)) if t.state != "interrupted"}
    assert left <= finished  # reopened under their own ids
    rows = store.measurements(study=NAME)
    assert second._rows == rows and len(rows) == len({r.id for r in rows})
