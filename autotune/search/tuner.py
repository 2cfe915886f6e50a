"""The ask/tell tuner loop: the driver process alone talks to Optuna and writes the store.

Each Optuna trial is one engine config. Its job (start, warm up, every workload × concurrency ×
repeat, stop) runs on a pool; measurements are stored as they arrive; the trial's value is the
geometric mean over cells of the median throughput. Completed and failed configs are never
measured twice, so an interrupted study resumes where it stopped.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from autotune.cluster.jobs import (
    Cell,
    CellPlan,
    Failed,
    Finished,
    Measured,
    Started,
    TrialEvent,
    TrialJob,
)
from autotune.engine._base import (
    EngineConfig,
    EngineInfo,
    Measurement,
    MeasureSettings,
    PreparedWorkload,
)
from autotune.search.samplers import make_sampler, make_strategy
from autotune.search.space import SearchSpace
from autotune.spec.loader import ResolvedStudy
from autotune.store import MeasurementRecord, Store, StudyRecord


class Pool(Protocol):
    slots: int

    @property
    def busy(self) -> int: ...

    def submit(self, job: TrialJob) -> None: ...

    def poll(self, timeout_s: float = ...) -> list[TrialEvent]: ...

    def shutdown(self) -> None: ...


class Reporter(Protocol):
    """Progress callbacks (the CLI draws a rich progress bar from them)."""

    def begin(self, total_configs: int, done_configs: int) -> None: ...

    def trial_started(self, config: EngineConfig) -> None: ...

    def measured(self, config: EngineConfig, m: Measurement) -> None: ...

    def trial_finished(
        self, config: EngineConfig, value: float | None, reason: str | None, best: str | None
    ) -> None: ...

    def end(self) -> None: ...


class SilentReporter:
    def begin(self, total_configs: int, done_configs: int) -> None:
        pass

    def trial_started(self, config: EngineConfig) -> None:
        pass

    def measured(self, config: EngineConfig, m: Measurement) -> None:
        pass

    def trial_finished(
        self, config: EngineConfig, value: float | None, reason: str | None, best: str | None
    ) -> None:
        pass

    def end(self) -> None:
        pass


@dataclass
class RunSummary:
    """What one `study run` did."""

    trials_run: int = 0
    trials_failed: int = 0
    trials_skipped: int = 0
    measurements: int = 0
    engine_seconds: float = 0.0
    stop_reason: str = ""
    failures: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class SearchState:
    """What a strategy sees when a pool slot is free."""

    study: ResolvedStudy
    space: SearchSpace
    rows: Sequence[MeasurementRecord]
    """Every stored measurement of completed trials of this study."""
    done: Mapping[str, float | None]
    """Config key -> trial value (None: the config failed)."""
    in_flight: frozenset[str]
    """Config keys being measured now."""


class Strategy(Protocol):
    """Decides which engine config to start next (the default, model-guided search)."""

    def propose(self, state: SearchState) -> EngineConfig | None:
        """The next config to start, or None when nothing is worth starting now (the tuner
        stops once nothing is in flight either)."""
        ...

    def next_cell(
        self, state: SearchState, config: EngineConfig, measured: Sequence[Measurement]
    ) -> Cell | None:
        """The next cell to measure on ``config``'s warm engine, given what it ``measured`` so
        far (``state.rows`` holds every other trial's rows), or None to stop the engine."""
        ...


@dataclass
class _InFlight:
    trial_id: int
    optuna_number: int
    config: EngineConfig
    info: EngineInfo | None = None
    measurements: list[Measurement] = field(default_factory=list)


class _Throughput(Protocol):
    @property
    def workload(self) -> str: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def output_throughput_tok_s(self) -> float: ...


def objective_value(measurements: Sequence[_Throughput]) -> float:
    """Geometric mean over the measured (workload, concurrency) cells of the median output
    throughput (Optuna's trial value; the model-guided search leaves out cells where a config
    cannot win, so compare values only between configs measured at the same cells)."""
    cells: dict[tuple[str, int], list[float]] = defaultdict(list)
    for m in measurements:
        cells[(m.workload, m.concurrency)].append(m.output_throughput_tok_s)
    medians = [statistics.median(v) for v in cells.values()]
    if not medians or any(v <= 0 for v in medians):
        return 0.0
    return math.exp(sum(math.log(v) for v in medians) / len(medians))


def plan_cells(study: ResolvedStudy) -> list[Cell]:
    """Repeats outermost, so drift on a long-running engine spreads over every cell."""
    return [
        Cell(workload=w, concurrency=c, repeat=r)
        for r in range(study.spec.repeats)
        for w in study.spec.workloads
        for c in study.spec.concurrency
    ]


class Tuner:
    """Runs one study to completion (or budget) on a pool."""

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
        self.pool_factory = pool_factory
        self.reporter = reporter or SilentReporter()
        self._prepare = prepare_workload
        self.strategy = strategy or make_strategy(self.study.spec.sampler, self.study)
        self._everywhere: set[str] = set()

    # --- the loop -----------------------------------------------------------------------------

    def run(self, max_configs: int | None = None) -> RunSummary:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        summary = RunSummary()
        self.store.abandon_running_trials(self.record)
        spec = self.study.spec
        ostudy = optuna.create_study(
            study_name=self.record.optuna_study_name,
            storage=self._optuna_storage(),
            sampler=make_sampler(spec.sampler, spec.seed),
            direction="maximize",
            load_if_exists=True,
        )
        for t in ostudy.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            # Trials of a killed driver: their engines are gone.
            ostudy.tell(t.number, state=optuna.trial.TrialState.FAIL)

        # Configs already measured (or failed for a reason of their own) are never run again.
        trials = [t for t in self.store.trials(self.record) if t.state in ("complete", "failed")]
        stored = self.store.measurements(study=self.record.name)
        done: dict[str, float | None] = {
            t.config_key: objective_value([m for m in stored if m.trial_id == t.id])
            if t.state == "complete"
            else None
            for t in trials
        }
        # Configs measured at every (workload, concurrency): the ones "best so far" compares
        # (the model-guided search measures most configs only where they could win).
        self._everywhere = {
            t.config_key
            for t in trials
            if len({(m.workload, m.concurrency) for m in stored if m.trial_id == t.id})
            == self._num_levels
        }
        all_keys = {c.key() for c in self.space.configs()}
        engine_seconds = sum(t.engine_seconds or 0.0 for t in trials)
        started = len(trials)

        baseline = self.space.baseline()
        if baseline is not None and baseline.key() not in done:
            opt = self.space.option("none")
            ostudy.enqueue_trial(self.space.params(opt, 0), skip_if_exists=True)

        workloads = self._prepare_workloads()
        cells = plan_cells(self.study)
        settings = MeasureSettings(
            requests_per_concurrency=spec.measurement.requests_per_concurrency,
            timeout_s=spec.measurement.timeout_s,
        )
        self.reporter.begin(len(all_keys), len(all_keys & done.keys()))
        self.store.set_study_status(self.record.name, "running")

        pool = self.pool_factory(self.study)
        inflight: dict[int, _InFlight] = {}
        in_flight_keys: set[str] = set()
        exhausted = False
        duplicates = 0
        stop_reason = ""
        try:
            while True:
                # Fill free slots.
                while not exhausted and pool.busy < pool.slots:
                    budget_hit = self._budget_hit(started, engine_seconds, summary, max_configs)
                    if budget_hit:
                        stop_reason = budget_hit
                        exhausted = True
                        break
                    if all_keys <= done.keys() | in_flight_keys:
                        stop_reason = stop_reason or "every engine config in the space was measured"
                        exhausted = True
                        break
                    if self.strategy is not None and not self._waiting(ostudy):
                        proposal = self.strategy.propose(
                            SearchState(
                                study=self.study,
                                space=self.space,
                                rows=self.store.measurements(study=self.record.name),
                                done=dict(done),
                                in_flight=frozenset(in_flight_keys),
                            )
                        )
                        if proposal is None:
                            if not inflight:
                                stop_reason = "no unmeasured config can beat the measured best"
                                exhausted = True
                            break  # wait for the configs in flight, then ask again
                        ostudy.enqueue_trial(self.space.params_for(proposal))
                    trial = ostudy.ask()
                    config = self.space.suggest(trial)
                    key = config.key()
                    if key in done or key in in_flight_keys:
                        # Samplers may propose a config again: answer from the store.
                        duplicates += 1
                        summary.trials_skipped += 1
                        self._tell(ostudy, trial.number, done.get(key))
                        if duplicates > 20 * len(self.space):
                            stop_reason = "the sampler keeps proposing measured configs"
                            exhausted = True
                        continue
                    duplicates = 0
                    trial_id = self.store.start_trial(self.record, config, trial.number)
                    inflight[trial_id] = _InFlight(trial_id, trial.number, config)
                    in_flight_keys.add(key)
                    started += 1
                    pool.submit(
                        TrialJob(
                            trial_id=trial_id,
                            config=config,
                            workloads=workloads,
                            cells=cells,
                            settings=settings,
                            warmup_requests=spec.measurement.warmup_requests,
                            start_timeout_s=spec.measurement.start_timeout_s,
                            plan=self._plan(trial_id, config, done, in_flight_keys),
                        )
                    )
                    self.reporter.trial_started(config)
                if not inflight:
                    break
                for event in pool.poll(timeout_s=1.0):
                    run = inflight.get(event.trial_id)
                    if run is None:
                        continue
                    if isinstance(event, Started):
                        run.info = event.info
                        self.store.record_engine(run.trial_id, event.info)
                    elif isinstance(event, Measured):
                        assert run.info is not None
                        run.measurements.append(event.measurement)
                        self.store.add_measurement(
                            run.trial_id, event.measurement, run.info, run.config
                        )
                        summary.measurements += 1
                        self.reporter.measured(run.config, event.measurement)
                    elif isinstance(event, Finished | Failed):
                        seconds = (run.info.engine_start_s if run.info else 0.0) + sum(
                            m.measure_s for m in run.measurements
                        )
                        engine_seconds += seconds
                        summary.engine_seconds += seconds
                        key = run.config.key()
                        in_flight_keys.discard(key)
                        del inflight[run.trial_id]
                        if isinstance(event, Finished):
                            value = objective_value(run.measurements)
                            self.store.finish_trial(
                                run.trial_id, state="complete", engine_seconds=seconds
                            )
                            done[key] = value
                            if len({(m.workload, m.concurrency) for m in run.measurements}) == (
                                self._num_levels
                            ):
                                self._everywhere.add(key)
                            summary.trials_run += 1
                            self._tell(ostudy, run.optuna_number, value)
                            self.reporter.trial_finished(run.config, value, None, self._best(done))
                        else:
                            self.store.finish_trial(
                                run.trial_id,
                                state="failed",
                                engine_seconds=seconds,
                                failure_reason=event.reason,
                            )
                            done[key] = None
                            summary.trials_failed += 1
                            summary.failures.append((run.config.label(), event.reason))
                            self._tell(ostudy, run.optuna_number, None)
                            self.reporter.trial_finished(
                                run.config, None, event.reason, self._best(done)
                            )
        finally:
            pool.shutdown()
            self.reporter.end()
            status = "done" if exhausted and not inflight else "interrupted"
            self.store.set_study_status(self.record.name, status)
        summary.stop_reason = stop_reason
        return summary

    # --- helpers ------------------------------------------------------------------------------

    def _plan(
        self,
        trial_id: int,
        config: EngineConfig,
        done: Mapping[str, float | None],
        in_flight: set[str],
    ) -> CellPlan | None:
        """The strategy's cell plan for one trial (None: measure every cell, as Optuna's
        samplers do). It sees the store as it is when each cell is chosen, less this trial's
        own rows, which it gets as ``measured``."""
        strategy = self.strategy
        if strategy is None:
            return None

        def plan(measured: Sequence[Measurement]) -> Cell | None:
            rows = [
                r for r in self.store.measurements(study=self.record.name) if r.trial_id != trial_id
            ]
            state = SearchState(
                study=self.study,
                space=self.space,
                rows=rows,
                done=dict(done),
                in_flight=frozenset(in_flight),
            )
            return strategy.next_cell(state, config, measured)

        return plan

    def _optuna_storage(self) -> Any:
        import optuna

        kwargs: dict[str, Any] = {}
        if self.store.url.startswith("sqlite"):
            kwargs["engine_kwargs"] = {"connect_args": {"timeout": 30}}
        return optuna.storages.RDBStorage(self.store.url, **kwargs)

    @staticmethod
    def _waiting(ostudy: Any) -> bool:
        """Whether an enqueued trial waits (the baseline, or a proposal a stopped driver left).

        ask() serves it first, so the strategy is consulted only when none waits; otherwise each
        proposal would be asked one turn late and measured configs proposed again.
        """
        import optuna

        waiting = (optuna.trial.TrialState.WAITING,)
        return bool(ostudy.get_trials(deepcopy=False, states=waiting))

    @staticmethod
    def _tell(ostudy: Any, number: int, value: float | None) -> None:
        import optuna

        try:
            if value is None:
                ostudy.tell(number, state=optuna.trial.TrialState.FAIL)
            else:
                ostudy.tell(number, value)
        except RuntimeError as exc:
            # BruteForceSampler calls study.stop() once the space is exhausted, which Optuna
            # only allows inside optimize(); the tell itself is already stored by then.
            if "stop" not in str(exc):
                raise

    @property
    def _num_levels(self) -> int:
        return len(self.study.spec.workloads) * len(self.study.spec.concurrency)

    def _best(self, done: dict[str, float | None]) -> str | None:
        """The config with the highest objective among those measured at every level."""
        scored = [(v, k) for k, v in done.items() if v is not None and k in self._everywhere]
        if not scored:
            return None
        value, key = max(scored)
        label = next((c.label() for c in self.space.configs() if c.key() == key), key)
        return f"{label} ({value:,.0f} tok/s)"

    def _budget_hit(
        self, started: int, engine_seconds: float, summary: RunSummary, max_configs: int | None
    ) -> str:
        budget = self.study.spec.budget
        if budget.max_engine_configs is not None and started >= budget.max_engine_configs:
            return f"budget: {budget.max_engine_configs} engine configs"
        if budget.max_engine_hours is not None and engine_seconds >= budget.max_engine_hours * 3600:
            return f"budget: {budget.max_engine_hours} engine-hours"
        if max_configs is not None and summary.trials_run + summary.trials_failed >= max_configs:
            return f"--max-configs {max_configs}"
        return ""

    def _prepare_workloads(self) -> list[PreparedWorkload]:
        study = self.study
        if study.landscape is not None:
            from autotune.engine.landscape import digest

            d = digest(Path(study.landscape))
            return [
                PreparedWorkload(name=w, digest=f"landscape:{d}:{w}", prompts=())
                for w in study.spec.workloads
            ]
        prepare = self._prepare
        if prepare is None:
            from autotune.datasets import prepare as prepare_fn

            prepare = prepare_fn
        m = study.spec.measurement
        prepared = []
        for w in study.workloads.values():
            spec = w.spec
            caps: dict[str, Any] = {}
            if m.max_prompts is not None and m.max_prompts < spec.num_prompts:
                caps["num_prompts"] = m.max_prompts
            if m.max_tokens is not None and m.max_tokens < spec.max_tokens:
                caps["max_tokens"] = m.max_tokens
            prepared.append(prepare(spec.model_copy(update=caps), Path(w.base_dir)))
        return prepared
