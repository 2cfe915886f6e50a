"""The tuner loop: the driver process alone asks the strategy, runs the pool and writes the store.

Each engine config is one trial. Its job (start, warm up, the cells its strategy picks, stop)
runs on a pool; measurements are stored as they arrive; every finished trial is mirrored into
the study's Optuna study. Completed and failed configs are never measured twice, so an
interrupted study resumes where it stopped: a trial a dead driver left ``interrupted`` is
reopened with the cells it measured, and its engine measures only the cells it is missing (a
replay engine draws exactly what an uninterrupted run would have), and a finished trial the
Optuna mirror is missing (the driver died between the two writes) is recorded there again.

A strategy's own per-config decisions are stored too (the model strategy's, in the Optuna
study: ``ModelStrategy.keep_state_in``), and a cancel is stored with its trial as soon as the
strategy stops the engine, so a resumed study, a takeover or another driver continues from the
store alone.

The caller holds the study's lease: every write goes through it (``Store.lease``), and the loop
checks it between steps, so a driver whose lease was taken over stops within one heartbeat.

The drift check is the one exception: when the strategy has nothing more to propose, the
baseline is started once more and measured at every level (``measurement.drift_check``), so
the study brackets its drafters between two baseline runs. That second trial shares the
baseline's config key; it counts as an engine start, is not mirrored into Optuna (the config is
there already) and does not change the config's value (the first run's), and a resume finds it
by counting the baseline's finished trials.

Confirmation (:mod:`autotune.search.confirm`) comes after the drift check: the close calls'
winners and rivals are started once more each (trials tagged ``confirm``, handled like the drift
check's second baseline), and once one has run the strategy is not asked again. A pair starts
only when the budgets allow both its starts (``confirm.Budget``); a begun pair is finished
whatever the budget then says (``Confirmer.owes``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.cluster.jobs import (
    Cell,
    Failed,
    Measured,
    Started,
    TrialEvent,
    TrialJob,
)
from autotune.cluster.pools import Pool
from autotune.engine._base import (
    EngineConfig,
    EngineInfo,
    Measurement,
    MeasureSettings,
)
from autotune.errors import StoreError
from autotune.evidence.objectives import level_medians, study_objective
from autotune.search.confirm import CONFIRM, Budget, Confirmer, Step, confirm_cell
from autotune.search.model_strategy import ModelStrategy, OptunaState
from autotune.search.objective import metric_name, objective_unit
from autotune.search.reporting import Reporter, RunSummary, SilentReporter
from autotune.search.samplers import (
    OptunaMirror,
    OptunaStrategy,
    make_sampler,
    make_strategy,
)
from autotune.search.space import SearchSpace
from autotune.search.strategy import (
    SearchState,
    Strategy,
    can_measure,
    drift_check_enabled,
    plan_cells,
    protocol_cell,
    repeat_limits,
    short_of_repeats,
)
from autotune.search.wall_budget import WALL_BUDGET_STATUS, WallBudget
from autotune.search.workloads import prepare_workloads
from autotune.spec.labels import Labels
from autotune.spec.loader import ResolvedStudy
from autotune.spec.methods import BASELINE, config_id
from autotune.store import FINISHED_STATES, MeasurementRecord, Store, StudyRecord


@dataclass
class _Trial:
    """A config whose engine is running: what it reported so far."""

    trial_id: int
    config: EngineConfig
    info: EngineInfo | None = None
    measurements: list[Measurement] = field(default_factory=list)
    drift: bool = False
    """The drift check's second baseline run."""
    confirm: bool = False
    """A confirmation start (:mod:`autotune.search.confirm`)."""

    @property
    def again(self) -> bool:
        """A config's second (or later) run: its value, the mirror and the strategy stay."""
        return self.drift or self.confirm

    @property
    def engine_seconds(self) -> float:
        start = self.info.engine_start_s if self.info else 0.0
        return start + sum(m.measure_s for m in self.measurements)


class Tuner:
    """Runs one study on a pool until its strategy is done, its budget is spent or it is
    stopped. The caller holds the study's lease (:func:`autotune.search.protocol.run_protocol`)."""

    def __init__(
        self,
        store: Store,
        study: StudyRecord,
        pool_factory: Callable[[ResolvedStudy], Pool],
        reporter: Reporter | None = None,
        prepare_workload: Callable[..., Any] | None = None,
        strategy: Strategy | None = None,
    ):
        self.store = store
        self.record = study
        self.study = ResolvedStudy.from_json(study.resolved_json)
        self.space = SearchSpace(self.study)
        self._objective = study_objective(self.study.spec)
        self.pool_factory = pool_factory
        self.reporter = reporter or SilentReporter()
        self._unit = objective_unit(self.study.spec)
        if hasattr(self.reporter, "unit"):  # the CLI's reporters print the trial value
            self.reporter.unit = self._unit
        # The study's config names (its knob variants told apart), for every line it prints.
        self.labels = Labels(c.speculative_config() for c in self.space.configs())
        if hasattr(self.reporter, "labels"):
            self.reporter.labels = self.labels
        self._prepare = prepare_workload
        self.strategy = strategy
        self.summary = RunSummary()
        self.done: dict[str, float | None] = {}
        """Config key -> trial value (None: failed), for every finished trial."""
        self.everywhere: set[str] = set()
        """Configs measured at every level: the ones "best so far" compares."""
        self.inflight: dict[int, _Trial] = {}
        self._rows: list[MeasurementRecord] = []
        """The finished trials' stored measurements, as ``Store.measurements`` reads them: read
        once at the start, then each finished trial's own added (in the store's order)."""
        self.started = 0
        self.engine_seconds = 0.0
        self.finished = 0
        """Trials finished in this run (the strategy is asked again after each)."""
        self.runs_of: dict[str, int] = defaultdict(int)
        """Config key -> finished (complete or failed) trials: 2 for a drift-checked baseline."""
        self._running: dict[int, list[MeasurementRecord]] = {}
        """Trial in flight -> its stored measurements (as ``Store.add_measurement`` returned
        them): the other engines' cell plans see them, and the finished trial's join _rows."""
        self.interrupted: dict[str, int] = {}
        """Config key -> the latest trial a dead driver left interrupted: reopened, not redone."""

    def run(self, max_configs: int | None = None) -> RunSummary:
        self.wall = WallBudget(self.study.spec.budget.max_wall_minutes)
        self._max_configs = max_configs
        strategy = self._open()
        self.summary.replay_note = short_of_repeats(self.study, self.space)
        job = self._job_template()
        pool = self.pool_factory(self.study)
        self.reporter.begin(strategy.planned(self._state()), len(self.done))
        self.store.set_study_status(self.record.name, "running")
        stop, status, final = "", "", "interrupted"
        asked: tuple[int, int] | None = None  # (trials finished, free slots) at the last ask
        ended = False
        try:
            while True:
                self.store.check_lease()
                if not stop and self.summary.baseline_failure is not None:
                    why = self.summary.baseline_failure
                    stop, status = f"the baseline could not start: {why}", "stopped: baseline"
                # A confirmation pair whose first start has begun is finished whole.
                if not stop and not self.confirmer.owes(self._measurements):
                    stop, status = self._budget_hit(max_configs)
                free = pool.slots - pool.busy
                if max_configs is not None:  # K configs, not K per slot
                    free = min(free, max_configs - self.summary.trials_started)
                # The strategy sees finished trials only: ask again once one finished or a
                # slot freed up, not on every poll.
                if not stop and free > 0 and asked != (self.finished, free):
                    asked = (self.finished, free)
                    searching = not self.confirmer.begun
                    proposals = strategy.propose(self._state(), free) if searching else []
                    for config in proposals:
                        self._submit(pool, job, config, strategy)
                    drift = self._drift_due() if not proposals and not self.inflight else None
                    confirm = self._confirm_due(free) if not proposals and drift is None else []
                    for step in confirm:
                        self._submit(pool, job, step.config, strategy, confirm=step)
                    if drift is not None:
                        self._submit(pool, job, drift, strategy, drift=True)
                    elif not proposals and not confirm and not self.inflight:
                        stop, status = strategy.reason or "nothing left to measure", "done"
                        if self.confirmer.stop[0]:  # the budget skipped a confirmation pair
                            stop, status = self.confirmer.stop
                if stop and not self.inflight:
                    break
                for event in pool.poll(timeout_s=1.0):
                    self._handle(event, strategy)
            if status == WALL_BUDGET_STATUS:
                left = self._still_to_start(strategy)
                if left:
                    self.summary.unmeasured = left
                else:  # the budget ran out with the search: it is done, not stopped
                    stop, status = strategy.reason or "nothing left to measure", "done"
            final = status
            ended = True
        finally:
            pool.shutdown()
            self.reporter.end()
            # After a failure (a lost lease, a full disk) the first error is the one to report.
            with contextlib.suppress(*(() if ended else (StoreError,))):
                if final == "interrupted":
                    # Stopped (Ctrl-C, SIGTERM, an error): the trials in flight did not finish;
                    # a resume reopens them and measures only their missing cells.
                    self.store.abandon_running_trials(self.record)
                self.store.set_study_status(self.record.name, final)
        return self._summarize(stop, strategy)

    def _summarize(self, stop: str, strategy: Strategy) -> RunSummary:
        """The run's summary, completed once the loop ended: why it stopped, what confirmation
        and the wall clock spent, and the repeated proposals an Optuna sampler made."""
        self.summary.stop_reason = stop
        self.summary.confirm_starts = self.confirmer.starts
        self.summary.confirm_engine_seconds = self.confirmer.engine_seconds
        self.summary.confirm_wall_s = self.confirmer.wall_s
        self.summary.confirm_note = self.confirmer.note()
        self.summary.wall_seconds = self.wall.elapsed_s
        self.summary.wall_spent = self.wall.spent()
        self.summary.startup_s = self.wall.startup_s
        if isinstance(strategy, OptunaStrategy):
            self.summary.trials_skipped = strategy.repeated_proposals
        return self.summary

    # --- the steps of the loop ----------------------------------------------------------------

    def _open(self) -> Strategy:
        """Load what earlier runs finished; open the Optuna mirror and the strategy."""
        spec = self.study.spec
        self.mirror = OptunaMirror(
            self.store.optuna_storage(),
            self.record.optuna_study_name,
            self.space,
            make_sampler(spec.sampler, spec.seed),
            metric_name(spec),
        )
        rows: dict[int, list[MeasurementRecord]] = defaultdict(list)
        self._rows = self.store.measurements(study=self.record.name)
        for r in self._rows:
            rows[r.trial_id].append(r)
        first_runs = []
        trials = self.store.trials(self.record)
        self.confirmer = Confirmer(self.study, self.space, trials)
        for t in trials:
            if t.state == "interrupted":
                self.interrupted[t.config_key] = t.id
            if t.state not in FINISHED_STATES:
                continue
            self.started += 1
            self.engine_seconds += t.engine_seconds or 0.0
            self.runs_of[t.config_key] += 1
            if self.runs_of[t.config_key] > 1:
                continue  # the drift check's second baseline: the config's value is the first's
            if t.state == "failed" and t.method == BASELINE and t.engine_start_s is None:
                self.summary.baseline_failure = t.failure_reason or "unknown reason"
            self.done[t.config_key] = self._objective(rows[t.id]) if t.state != "failed" else None
            first_runs.append(t)
            if len(level_medians(rows[t.id])) == self._num_levels:
                self.everywhere.add(t.config_key)
        # A driver that died (or lost its lease, or its disk) between finishing a trial in the
        # store and telling Optuna left the mirror one trial short: record it now.
        configs = {c.key(): c for c in self.space.configs()}
        recorded = self.mirror.recorded()
        for t in first_runs:
            config = configs.get(t.config_key)
            if config is not None and self.space.params_for(config) not in recorded:
                why = t.failure_reason if t.state == "failed" else None
                self.mirror.record(config, self.done[t.config_key], rows[t.id], why)
        strategy = self.strategy or make_strategy(spec.sampler, self.study, self.mirror)
        if isinstance(strategy, ModelStrategy):  # its decisions live in the store
            strategy.keep_state_in(OptunaState(self.mirror.study))
        return strategy

    def _state(self, leave_out: int | None = None) -> SearchState:
        # Stored rows of finished trials: they change only when a trial finishes.
        rows = self._rows
        return SearchState(
            study=self.study,
            space=self.space,
            rows=[r for r in rows if r.trial_id != leave_out],
            done=dict(self.done),
            in_flight=frozenset(t.config.key() for t in self.inflight.values()),
        )

    def _running_rows(self, leave_out: int) -> list[MeasurementRecord]:
        """The stored measurements of the trials in flight but ``leave_out``."""
        out: list[MeasurementRecord] = []
        for trial_id in self.inflight:
            if trial_id != leave_out:
                out += self._running.get(trial_id, ())
        return out

    def _submit(
        self,
        pool: Pool,
        job: Callable[..., TrialJob],
        config: EngineConfig,
        strategy: Strategy,
        drift: bool = False,
        confirm: Step | None = None,
    ) -> None:
        again = drift or confirm is not None
        number = None if again else self.mirror.number(config)
        resumed: list[Measurement] = []
        reopen = self.interrupted.pop(config.key(), None)
        if reopen is not None:  # an interrupted run of this config: keep its cells, add the rest
            self.store.reopen_trial(reopen, number)
            trial_id = reopen
            stored = self.store.trial_measurements(reopen)
            self._running[trial_id] = list(stored)
            resumed = list(stored)
        else:
            purpose = "drift" if drift else CONFIRM if confirm is not None else None
            trial_id = self.store.start_trial(self.record, config, number, purpose)
        self.inflight[trial_id] = _Trial(
            trial_id, config, measurements=list(resumed), drift=drift, confirm=confirm is not None
        )
        self.wall.trial_started(trial_id)
        self.started += 1
        self.summary.trials_started += 1

        def plan(measured: Sequence[Measurement]) -> Cell | None:
            # Runs in the driver before each cell: it sees the store as it is then. A driver
            # that lost its lease stops here, before its engine measures one more cell.
            self.store.check_lease()
            running = self._running_rows(leave_out=trial_id)
            limits = repeat_limits(self.study, config, [*self._rows, *running], trial_id)
            if confirm is not None:  # the protocol at the close levels only
                return confirm_cell(self.study, confirm.levels, measured, limits)
            if drift:  # the second baseline takes the full protocol at every level
                return protocol_cell(self.study, measured, limits)
            state = self._state(leave_out=trial_id)
            # The other engines' cells so far count too: a running config's engine can be
            # screened (or cancelled) by what its rivals measured before they finished.
            if running:
                state = dataclasses.replace(state, rows=[*state.rows, *running])
            cell = strategy.next_cell(state, config, measured)
            if cell is None:
                self._store_cancel(trial_id, config, strategy, measured)
            if cell is not None and not can_measure(
                limits, (cell.workload, cell.concurrency), measured
            ):
                return None  # a replay past its recorded repeats would serve a copy
            return cell

        # A replay engine draws past the repeats the config's earlier trials drew.
        mine = config_id(config.speculative_config())
        drawn = [
            r
            for r in self._rows
            if r.trial_id != trial_id and config_id(r.speculative_config) == mine
        ]
        pool.submit(
            job(
                trial_id=trial_id,
                config=config,
                plan=plan,
                resumed=tuple(resumed),
                drawn=tuple(drawn),
            )
        )
        self.reporter.trial_started(config)

    def _store_cancel(
        self,
        trial_id: int,
        config: EngineConfig,
        strategy: Strategy,
        measured: Sequence[Measurement],
    ) -> None:
        """The strategy stopped the engine because the evidence ruled its config out: store
        the trial as ``cancelled`` with the reason now, not when the engine has stopped, so a
        driver that dies in between leaves it cancelled (as an uninterrupted run ends it), not
        interrupted. Only once every measurement of the engine is stored; ``_finish`` stores
        the same again."""
        why = strategy.cancel_reason(config)
        run = self.inflight.get(trial_id)
        if why is None or run is None or len(run.measurements) != len(measured):
            return
        self.store.finish_trial(
            trial_id, state="cancelled", engine_seconds=run.engine_seconds, failure_reason=why
        )

    def _handle(self, event: TrialEvent, strategy: Strategy) -> None:
        run = self.inflight.get(event.trial_id)
        if run is None:
            return
        if isinstance(event, Started):
            run.info = event.info
            self.store.record_engine(run.trial_id, event.info)
        elif isinstance(event, Measured):
            assert run.info is not None
            run.measurements.append(event.measurement)
            stored = self.store.add_measurement(
                run.trial_id, event.measurement, run.info, run.config
            )
            self._running.setdefault(run.trial_id, []).append(stored)
            self.summary.measurements += 1
            self.reporter.measured(run.config, event.measurement)
        else:
            self._finish(run, event.reason if isinstance(event, Failed) else None, strategy)

    def _finish(self, run: _Trial, reason: str | None, strategy: Strategy) -> None:
        del self.inflight[run.trial_id]
        seconds = run.engine_seconds
        # Engine time apart from the run's one-time start-up (Ray, model builds).
        self.wall.trial_finished(run.trial_id, seconds)
        stored = self._running.pop(run.trial_id, [])
        self.engine_seconds += seconds
        self.summary.engine_seconds += seconds
        value = None if reason is not None else self._objective(run.measurements)
        # Stopped early because the evidence ruled it out: its measurements count as any
        # complete trial's, the state and reason say why it has fewer cells.
        cancelled = None if reason is not None or run.drift else strategy.cancel_reason(run.config)
        self.store.finish_trial(
            run.trial_id,
            state="failed" if reason is not None else "cancelled" if cancelled else "complete",
            engine_seconds=seconds,
            failure_reason=reason or cancelled,
        )
        key = run.config.key()
        self.runs_of[key] += 1
        self.finished += 1
        if reason is None and stored:  # complete or cancelled: Store.measurements reads it now
            self._rows = sorted([*self._rows, *stored], key=lambda r: r.id)
        if run.confirm:
            self.confirmer.done(key, seconds)
        if not run.again:
            self.done[key] = value
        if (
            reason is not None
            and run.info is None
            and run.config.method == BASELINE
            and not run.again
        ):
            self.summary.baseline_failure = reason
        if reason is not None:
            self.summary.trials_failed += 1
            self.summary.failures.append((run.config.label(self.labels), reason))
        else:
            self.summary.trials_run += 1
            if len(level_medians(run.measurements)) == self._num_levels:
                self.everywhere.add(key)
        if not run.again:
            self.mirror.record(run.config, value, run.measurements, reason)
            strategy.observe(run.config, value)
        self.reporter.trial_finished(run.config, value, reason, self._best())
        self.reporter.planned(strategy.planned(self._state()))

    # --- helpers ------------------------------------------------------------------------------

    def _drift_due(self) -> EngineConfig | None:
        """The baseline, when the drift check should run it once more now: the study checks
        drift, has a baseline whose first run completed, and its second run has neither
        finished (complete or failed: not retried, like any failed trial) nor started. An
        interrupted second run is not finished, so a resume runs it again."""
        if not drift_check_enabled(self.study):
            return None
        base = self.space.baseline()
        if base is None:
            return None
        key = base.key()
        if self.done.get(key) is None or self.runs_of[key] >= 2:
            return None
        if any(t.config.key() == key for t in self.inflight.values()):
            return None
        return base

    def _confirm_due(self, free: int) -> list[Step]:
        """The confirmation starts to submit now: none while a search or drift trial runs."""
        if not self.confirmer.enabled or any(not t.confirm for t in self.inflight.values()):
            return []
        b = self.study.spec.budget
        budget = Budget(  # what is left, so a pair starts only when both its starts fit
            started=self.started,
            run_started=self.summary.trials_started,
            engine_seconds=self.engine_seconds,
            finished=sum(self.runs_of.values()),
            max_configs=self._max_configs,
            max_engine_configs=b.max_engine_configs,
            max_engine_hours=b.max_engine_hours,
            wall=self.wall,
            wall_status=WALL_BUDGET_STATUS,
        )
        return self.confirmer.due(self._rows, free, budget)

    def _measurements(self) -> list[MeasurementRecord]:
        return self.store.measurements(study=self.record.name)

    def _job_template(self) -> Callable[..., TrialJob]:
        """A TrialJob with everything but the trial, its config and its cell plan."""
        m = self.study.spec.measurement
        return functools.partial(
            TrialJob,
            workloads=prepare_workloads(self.study, self._prepare, self.record.name),
            cells=plan_cells(self.study),
            settings=MeasureSettings.of(m),
            warmup_requests=m.warmup_requests,
            start_timeout_s=m.start_timeout_s,
        )

    @property
    def _num_levels(self) -> int:
        return len(self.study.measured_names()) * len(self.study.spec.concurrency)

    def _best(self) -> str | None:
        """The config with the highest objective among those measured at every level."""
        scored = [(v, k) for k, v in self.done.items() if v is not None and k in self.everywhere]
        if not scored:
            return None
        value, key = max(scored)
        label = next((c.label(self.labels) for c in self.space.configs() if c.key() == key), key)
        shown = f"{value:,.0f}" if self._unit == "tok/s" else f"{value:,.2f}"  # req/s are small
        return f"{label} ({shown} {self._unit})"

    def _budget_hit(self, max_configs: int | None) -> tuple[str, str]:
        """(why the run stops, the study's status), or ("", "") while within budget."""
        budget = self.study.spec.budget
        if budget.max_engine_configs is not None and self.started >= budget.max_engine_configs:
            return f"budget: {budget.max_engine_configs} engine configs", "stopped: budget"
        hours = budget.max_engine_hours
        if hours is not None and self.engine_seconds >= hours * 3600:
            return f"budget: {hours} engine-hours", "stopped: budget"
        wall = self.wall.exceeded()
        if wall:
            return wall, WALL_BUDGET_STATUS
        if max_configs is not None and self.summary.trials_started >= max_configs:
            return f"--max-configs {max_configs}", "stopped: --max-configs"
        return "", ""

    def _still_to_start(self, strategy: Strategy) -> int:
        """Engine configs a stopped run leaves to the next: those the strategy still plans
        beyond the finished ones, and the drift check's second baseline run when it is due."""
        planned = strategy.planned(self._state())
        base = self.space.baseline()
        drift = (
            drift_check_enabled(self.study)
            and base is not None
            and self.runs_of[base.key()] < 2
            and not (base.key() in self.done and self.done[base.key()] is None)  # failed
        )
        return max(0, planned - len(self.done)) + int(drift) + self.confirmer.left()
