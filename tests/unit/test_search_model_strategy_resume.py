"""The model strategy continues from the store alone (issue #33 item 1): run+resume at every
``--max-configs K``, and a driver stopped after any measurement then resumed, end with exactly
the measurements and answers of one uninterrupted run (real tuner loop, replay engine, SQLite);
the levels a config's engine measures are stored when it is proposed, and a cancel is stored
with its trial as soon as the engine is stopped."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune import api
from autotune.cluster.jobs import Cell, Finished, TrialEvent, TrialJob
from autotune.cluster.virtual import VirtualPool
from autotune.engine._base import EngineConfig, Measurement
from autotune.engine.replay import ReplayEngine
from autotune.search.landscape_study import study_from_landscape
from autotune.search.model_strategy import STATE_PREFIX, ModelStrategy
from autotune.search.protocol import run_protocol, save_recommendations
from autotune.search.reporting import SilentReporter
from autotune.search.strategy import SearchState
from autotune.search.tuner import Tuner
from autotune.spec.loader import ResolvedStudy
from autotune.store import Store
from autotune.testing.landscapes import write_rows
from autotune.testing.resume import CLOSE_EVERYWHERE, Outcome, outcome, run_in_steps

REPO = Path(__file__).resolve().parents[2]
LLAMA = REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv"


def _url(tmp_path: Path, tag: str) -> str:
    return f"sqlite:///{tmp_path / f'{tag}.db'}"


def _trials(url: str, name: str) -> int:
    store = Store(url)
    try:
        return len(store.trials(store.get_study(name)))
    finally:
        store.dispose()


@pytest.mark.slow  # whole studies run, stopped and resumed
def test_run_and_resume_at_every_k_on_the_recorded_sweep(tmp_path: Path) -> None:
    """The recorded CPU sweep (14 speculative configs, 6 levels, 3 repeats) with the model
    strategy: every K from 1 to the number of configs the uninterrupted run starts, and a run
    resumed after every single config."""
    data = study_from_landscape(LLAMA, "llama", "model", 0)
    reference = run_in_steps(_url(tmp_path, "ref"), data, str(LLAMA), [])
    started = _trials(_url(tmp_path, "ref"), "llama")
    assert started >= 4 and reference.answers
    for k in range(1, started + 1):
        got = run_in_steps(_url(tmp_path, f"k{k}"), data, str(LLAMA), [k])
        assert got == reference, f"--max-configs {k}"
    chain = run_in_steps(_url(tmp_path, "chain"), data, str(LLAMA), [1] * started)
    assert chain == reference


class _Stop(SilentReporter):
    """Stops the driver (as Ctrl-C does) once it has stored ``after`` new measurements."""

    def __init__(self, after: int) -> None:
        self.left = after

    def measured(self, config: EngineConfig, m: Measurement) -> None:
        self.left -= 1
        if self.left == 0:
            raise KeyboardInterrupt


def _stopped_and_resumed(
    url: str, data: dict[str, Any], source: str, stops: Sequence[int]
) -> Outcome:
    """Create the study, run it stopping after each count of new measurements in ``stops``
    (each a new driver, as after a kill), resume it to its end and read what it ended with."""
    store = Store(url)
    try:
        api.create_study(store, data=data, source=source)
        for after in stops:
            with pytest.raises(KeyboardInterrupt):
                api.run_study(store, data["name"], reporter=_Stop(after))
            assert store.get_study(data["name"]).status == "interrupted"
        api.run_study(store, data["name"])
        return outcome(store, data["name"])
    finally:
        store.dispose()


@pytest.mark.slow  # whole studies run, stopped and resumed
def test_a_driver_stopped_after_any_measurement_resumes_to_the_same_end(tmp_path: Path) -> None:
    """Stopped mid-trial after every measurement count of the close-call study (the cells it
    measured kept, its trial reopened), and after random counts, several times in a row, on
    the recorded sweep."""
    land = write_rows(tmp_path / "close.csv", CLOSE_EVERYWHERE)
    close = study_from_landscape(land, "close", "model", 0, repeats=2)
    reference = run_in_steps(_url(tmp_path, "ref"), close, str(land), [])
    for m in range(1, reference.count):
        got = _stopped_and_resumed(_url(tmp_path, f"m{m}"), close, str(land), [m])
        assert got == reference, f"stopped after {m} measurements"
    llama = study_from_landscape(LLAMA, "llama", "model", 0)
    reference = run_in_steps(_url(tmp_path, "llama-ref"), llama, str(LLAMA), [])
    rng = random.Random(33)
    for run in range(3):
        stops = [rng.randint(1, 15) for _ in range(3)]
        got = _stopped_and_resumed(_url(tmp_path, f"l{run}"), llama, str(LLAMA), stops)
        assert got == reference, f"stopped after {stops} measurements"


@pytest.mark.slow  # whole studies run, stopped and resumed
def test_the_levels_decided_at_a_proposal_are_stored(tmp_path: Path) -> None:
    """Every config the strategy proposed has its levels in the Optuna study; a strategy bound
    to the store later reads the same decisions."""
    url = _url(tmp_path, "s")
    data = study_from_landscape(LLAMA, "llama", "model", 0)
    run_in_steps(url, data, str(LLAMA), [3])
    store = Store(url)
    record = store.get_study("llama")
    attrs = optuna.load_study(study_name=record.optuna_study_name, storage=store.url).user_attrs
    stored = {k[len(STATE_PREFIX) :]: v for k, v in attrs.items() if k.startswith(STATE_PREFIX)}
    trials = store.trials(record)
    assert {t.config_key for t in trials} <= set(stored)
    levels = {(w, c) for w in ("code", "chat") for c in (1, 4, 8)}
    for entry in stored.values():
        assert {(w, c) for w, c in entry["levels"]} <= levels
        assert entry["levels"]
    store.dispose()


# --- a cancel, on several slots ---------------------------------------------------------------


def _toy(tmp_path: Path) -> Store:
    """The study of tests/unit/test_model_strategy_slots.py: eagle3 N = 1..7 at c = 1 and 4,
    a_i = 0.95 and 0.2 ms a draft token, so N = 7 wins everywhere; its cells take 1 s, every
    other config's 5 s, so on four slots N = 7 finishes while the others still measure and
    some are cancelled."""
    rows = []
    for n in range(8):
        acc = ";".join(["0.95"] * n)
        for c, t0 in ((1, 0.010), (4, 0.012)):
            tput = c * (1 + 0.95 * n) / (t0 + 0.0002 * n)
            method = "eagle3" if n else "none"
            rows.append((method, n, c, (tput, tput), acc, 30.0, 1.0 if n == 7 else 5.0))
    land = write_rows(tmp_path / "toy.csv", rows, model="org/toy", draft="org/toy-eagle3")
    store = Store(_url(tmp_path, "toy"))
    api.create_study(store, data=study_from_landscape(land, "toy", "model", 0), source=str(land))
    store.ensure_optuna_schema()
    return store


class _DiesAtACancel:
    """A VirtualPool whose driver dies (KeyboardInterrupt) just before it would report the end
    of an engine the strategy cancelled: what is stored then is what a kill leaves."""

    def __init__(self, inner: VirtualPool, strategy: ModelStrategy) -> None:
        self.inner, self.strategy = inner, strategy
        self.jobs: dict[int, TrialJob] = {}
        self.died = False

    @property
    def slots(self) -> int:
        return self.inner.slots

    @property
    def busy(self) -> int:
        return self.inner.busy

    def submit(self, job: TrialJob) -> None:
        self.jobs[job.trial_id] = job
        self.inner.submit(job)

    def poll(self, timeout_s: float = 0.0) -> list[TrialEvent]:
        events = self.inner.poll(timeout_s)
        for e in events:
            job = self.jobs[e.trial_id]
            if (
                isinstance(e, Finished)
                and self.strategy.cancel_reason(job.config)
                and not self.died
            ):
                self.died = True
                raise KeyboardInterrupt
        return events

    def shutdown(self) -> None:
        self.inner.shutdown()


def test_a_cancel_is_stored_with_its_trial_before_the_engine_ends(tmp_path: Path) -> None:
    store = _toy(tmp_path)
    resolved = ResolvedStudy.from_json(store.get_study("toy").resolved_json)
    strategy = ModelStrategy(resolved)
    pools: list[_DiesAtACancel] = []

    def factory(_: ResolvedStudy) -> _DiesAtACancel:
        engine = lambda: ReplayEngine(str(resolved.landscape), resolved.spec.seed)  # noqa: E731
        pools.append(_DiesAtACancel(VirtualPool(4, engine), strategy))
        return pools[-1]

    with store.lease("toy"), pytest.raises(KeyboardInterrupt):
        Tuner(store, store.get_study("toy"), factory, strategy=strategy).run()
    assert pools[0].died
    trials = store.trials(store.get_study("toy"))
    cancelled = [t for t in trials if t.state == "cancelled"]
    assert cancelled, [(t.num_speculative_tokens, t.state) for t in trials]
    for t in cancelled:
        assert t.failure_reason is not None and t.failure_reason.startswith("cancelled: ruled out")
    rows = {t.id: len(store.trial_measurements(t.id)) for t in cancelled}
    # The resume does not start a cancelled config again, and its cells stay as they were.
    api.run_study(store, "toy")
    after = store.trials(store.get_study("toy"))
    keys = [t.config_key for t in after if t.purpose is None]
    assert len(keys) == len(set(keys))
    for t in after:
        if t.id in rows:
            assert t.state == "cancelled" and len(store.trial_measurements(t.id)) == rows[t.id]
    assert store.get_study("toy").status == "done"
    store.dispose()


# --- several engines at once ------------------------------------------------------------------

SLOTS = 4


def _virtual(resolved: ResolvedStudy) -> VirtualPool:
    """``SLOTS`` replay engines at once on a virtual clock: the same run every time."""
    landscape = str(resolved.landscape)
    return VirtualPool(SLOTS, lambda: ReplayEngine(landscape, resolved.spec.seed))


def _on_slots(url: str, steps: Sequence[int], stops: Sequence[int] = ()) -> Outcome:
    """The recorded sweep on ``SLOTS`` slots: run with ``--max-configs K`` for each K of
    ``steps``, then stopped after each count of new measurements in ``stops``, then resumed to
    its end (every run a new tuner and strategy, as a new driver)."""
    data = study_from_landscape(LLAMA, "llama", "model", 0)
    store = Store(url)
    try:
        api.create_study(store, data=data, source=str(LLAMA))
        for k in steps:
            run_protocol(store, "llama", _virtual, ttl_s=60, max_configs=k)
        for after in stops:
            with pytest.raises(KeyboardInterrupt):
                run_protocol(store, "llama", _virtual, ttl_s=60, reporter=_Stop(after))
        run_protocol(store, "llama", _virtual, ttl_s=60)
        assert store.get_study("llama").status == "done"
        return outcome(store, "llama")
    finally:
        store.dispose()


class _Reloaded(ModelStrategy):
    """A model strategy that forgets what it holds and reads the store again before every
    decision: all a new driver would know."""

    def _reload(self) -> None:
        assert self._state is not None
        self.keep_state_in(self._state)

    def propose(self, state: SearchState, slots: int, fill: bool = True) -> list[EngineConfig]:
        self._reload()
        return super().propose(state, slots, fill)

    def next_cell(
        self, state: SearchState, config: EngineConfig, measured: Sequence[Measurement]
    ) -> Cell | None:
        self._reload()
        return super().next_cell(state, config, measured)

    def planned(self, state: SearchState) -> int:
        self._reload()
        return super().planned(state)


def test_on_several_slots_the_strategy_keeps_nothing_the_store_does_not(tmp_path: Path) -> None:
    """Four engines at once, one uninterrupted run: a strategy that reads its decisions back
    from the store before each one ends with exactly the measurements and answers of one that
    keeps them in memory (only a cancel lives in memory, between the engine's last cell and
    its trial's end, and it is stored with the trial then)."""
    url = _url(tmp_path, "plain")
    reference = _on_slots(url, [])
    store = Store(_url(tmp_path, "reloaded"))
    try:
        data = study_from_landscape(LLAMA, "llama", "model", 0)
        api.create_study(store, data=data, source=str(LLAMA))
        store.ensure_optuna_schema()
        record = store.get_study("llama")
        strategy = _Reloaded(ResolvedStudy.from_json(record.resolved_json))
        with store.lease("llama"):
            Tuner(store, record, _virtual, strategy=strategy).run()
            save_recommendations(store, record)
        assert outcome(store, "llama") == reference
    finally:
        store.dispose()
    assert _trials(url, "llama") > SLOTS and reference.answers


@pytest.mark.slow  # whole studies run, stopped and resumed (19 s)
def test_on_several_slots_a_resume_ends_with_the_same_answers(tmp_path: Path) -> None:
    """Four engines at once: run+resume and a driver stopped mid-run end with the answers of
    the uninterrupted run, not with its measurements. Its decisions depend on which trials had
    finished when each was taken, and a resume changes that: ``--max-configs K`` lets the
    running engines finish before the run ends, and a resumed driver starts its engines
    together. At K = 1 the uninterrupted run took its 5th config with 1 config finished and 3
    running (10 rows); the resumed one with 4 finished (48 rows), and chose another config."""
    reference = _on_slots(_url(tmp_path, "ref"), [])
    assert reference == _on_slots(_url(tmp_path, "again"), [])  # the virtual clock: one run
    drained = _on_slots(_url(tmp_path, "k1"), [1])
    assert drained.answers == reference.answers
    for tag, steps, stops in (("k5", [5], []), ("stops", [], [7, 30])):
        got = _on_slots(_url(tmp_path, tag), steps, stops)
        assert got.answers == reference.answers, tag
