"""The Python API the CLI wraps: create, inspect, run and delete studies; recommend.

Every function validates all input before it writes anything, so bad input leaves the store
exactly as it was.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import NoResultError, NotFoundError, SpecError
from autotune.spec.loader import (
    ResolvedStudy,
    load_study_file,
    resolve_study,
    validate,
)
from autotune.spec.methods import config_id
from autotune.spec.study import ReplayEngineSpec, StudySpec, VLLMEngineSpec

if TYPE_CHECKING:
    # Imported where used: SQLAlchemy costs a read-only command ~0.2 s, and a published answer
    # (recommend on a fresh install) never needs it.
    from autotune.search.preflight import Preflight
    from autotune.store import MeasurementRecord, Store, StudyRecord, TrialRecord


@dataclass(frozen=True)
class Created:
    study: StudyRecord
    resolved: ResolvedStudy


def create_study(
    store: Store,
    path: Path | None = None,
    *,
    data: dict[str, Any] | None = None,
    source: str | None = None,
    replace: bool = False,
) -> Created:
    """Create a study from a YAML file, or from ``data`` (the quick-study flags)."""
    if path is not None:
        spec = load_study_file(path)
        source = source or str(path)
    elif data is not None:
        source = source or "command line"
        spec = validate(StudySpec, data, source)
    else:
        raise SpecError("give a study file or --model/--workload", source="study create")
    resolved = resolve_study(spec, source)
    from autotune.datasets._base import check_study_sources
    from autotune.search.space import validate_study

    check_study_sources(resolved)  # exists, regular, UTF-8: now, not first at `run`
    validate_study(resolved, source)  # vLLM's verdict now, so recommend never imports vLLM
    check_prompts(resolved)
    resolved = build_context_buckets(resolved, source)
    store.ensure_optuna_schema()  # both schemas exist before anything else is written
    # --replace deletes the study's trials: never under a live driver (StudyBusyError).
    with store.lease(spec.name) if replace else contextlib.nullcontext():
        record = store.create_study(
            name=spec.name,
            description=spec.description,
            model_alias=resolved.model_alias,
            model=resolved.model,
            source=source,
            resolved_json=resolved.to_json(),
            replace=replace,
        )
        if replace:
            _delete_optuna_study(store, record.optuna_study_name)
    return Created(record, resolved)


def check_prompts(resolved: ResolvedStudy) -> None:
    """Load every workload of the study as it will be measured (a bad request log fails here,
    before anything is written) and refuse one whose prompts look like random tokens
    (:mod:`autotune.datasets.prompt_check`). Hub datasets (``kind: hf``) are left to the run:
    the hub may be reachable only there."""
    from autotune.datasets import prepare
    from autotune.datasets.prompt_check import random_prompts

    for name in resolved.workloads:
        spec, base_dir = resolved.measured_workload(name)
        if spec.source.kind == "hf":
            continue
        origin = f"workload {name}"
        prepared = prepare(spec, base_dir, origin=origin)
        verdict = random_prompts([p.text for p in prepared.prompts])
        if verdict is not None:
            raise SpecError(verdict.line(), source=origin, field="source")


def degenerate_lines(store: Store, study: str) -> list[str]:
    """One line per cell of the study whose replies were mostly loops (the guard,
    :mod:`autotune.engine.degeneracy`): what `study run` and `report` note, so a flagged cell
    never decides a winner silently."""
    from autotune.engine.degeneracy import flag_line
    from autotune.report.frames import degenerate_cells, frame_from_records

    cells = degenerate_cells(frame_from_records(store.measurements(study=study)))
    return [
        flag_line(
            c["loop_share"], c["distinct_4gram_ratio"], f"{c['workload']} c={c['concurrency']}"
        )
        for c in cells
    ]


def build_context_buckets(resolved: ResolvedStudy, source: str) -> ResolvedStudy:
    """The study with its context-length buckets built (``autotune.datasets.context``) and their
    real token counts recorded, so a workload too short for a bucket is refused at create."""
    if not resolved.spec.context_lengths or resolved.landscape is not None:
        return resolved
    from autotune.datasets.context import load_target_tokenizer, prepare_measured
    from autotune.spec.context import split_bucket
    from autotune.spec.loader import ContextBucket

    tokenizer = load_target_tokenizer(resolved)
    buckets: dict[str, ContextBucket] = {}
    for name in resolved.measured_names():
        prepared, stats = prepare_measured(resolved, name, tokenizer, origin=source)
        buckets[name] = ContextBucket(
            workload=split_bucket(name)[0],
            context_length=stats.context_length,
            num_prompts=stats.num_prompts,
            prompt_tokens_mean=stats.prompt_tokens_mean,
            prompt_tokens_min=stats.prompt_tokens_min,
            prompt_tokens_max=stats.prompt_tokens_max,
            digest=prepared.digest,
        )
    return resolved.model_copy(update={"context_buckets": buckets})


def create_replay_study(
    store: Store,
    landscape: Path,
    name: str,
    *,
    sampler: str = "model",
    repeats: int | None = None,
    replace: bool = False,
) -> Created:
    """A study that replays a recorded sweep (docs/landscapes.md): the landscape's model,
    workloads, concurrency levels, methods and N ranges, on the ``replay`` engine."""
    from autotune.search.landscape_study import study_from_landscape

    data = study_from_landscape(landscape, name, sampler=sampler, repeats=repeats)
    return create_study(store, data=data, source=str(landscape), replace=replace)


def get_study(store: Store, name: str) -> tuple[StudyRecord, ResolvedStudy, list[TrialRecord]]:
    record = store.get_study(name)
    return record, ResolvedStudy.from_json(record.resolved_json), store.trials(record)


def delete_study(store: Store, name: str) -> None:
    """Delete a study; refused (StudyBusyError, exit 2) while a live driver runs it."""
    record = store.get_study(name)
    with store.lease(name):
        store.delete_study(name)
        _delete_optuna_study(store, record.optuna_study_name)


def _delete_optuna_study(store: Store, optuna_name: str) -> None:
    import optuna

    with contextlib.suppress(KeyError):  # never run: Optuna has no such study
        optuna.delete_study(study_name=optuna_name, storage=store.optuna_storage())


def _fail_dead_optuna_trials(store: Store, optuna_name: str) -> int:
    """Optuna trials a dead driver left RUNNING become FAIL (their engines are gone). Called
    only while holding the study's lease, so no live driver owns them."""
    import optuna

    try:
        ostudy = optuna.load_study(study_name=optuna_name, storage=store.optuna_storage())
    except KeyError:  # never run yet
        return 0
    running = ostudy.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    for t in running:
        ostudy.tell(t.number, state=optuna.trial.TrialState.FAIL)
    return len(running)


def run_study(
    store: Store,
    name: str,
    *,
    ray_address: str | None = None,
    max_engines: int | None = None,
    max_configs: int | None = None,
    reporter: Any = None,
    log_to_driver: bool = False,
    num_gpus: int | None = None,
    replay_time_scale: float | None = None,
    wait: bool = False,
    on_wait: Callable[[str], None] | None = None,
    lease_ttl_s: float | None = None,
) -> Any:
    """Run (or resume) a study until its space or budget is exhausted.

    ``num_gpus`` starts the local Ray cluster with that many logical GPUs; replay engines sleep
    for their recorded times × ``replay_time_scale`` (see ``_pool_factory``).

    The driver holds the study's lease throughout (``Store.lease``, ``lease_ttl_s`` seconds
    without a heartbeat before another driver may take it over): a second driver on the same
    study gets StudyBusyError (exit 2) naming the first, or with ``wait`` waits for it. Every
    write checks the lease in its own transaction: a driver whose lease was taken over writes
    nothing more, stops its engines and raises LeaseLostError. Only with the lease held are a
    dead driver's trials marked interrupted (their measurements kept: the resume measures only
    the missing cells), so a live driver's trial is never touched.
    """
    from autotune.search.tuner import Tuner
    from autotune.store import LEASE_TTL_S
    from autotune.store.store import check_lease_ttl

    ttl_s = LEASE_TTL_S if lease_ttl_s is None else lease_ttl_s
    check_lease_ttl(ttl_s)
    record = store.get_study(name)
    resolved = ResolvedStudy.from_json(record.resolved_json)
    from autotune.search.preflight import refuse

    refuse(resolved, name, ray_address)  # what cannot work stops here: nothing written
    factory = _pool_factory(
        resolved,
        record,
        ray_address,
        max_engines,
        log_to_driver,
        num_gpus=num_gpus,
        replay_time_scale=replay_time_scale,
    )
    store.ensure_optuna_schema()  # Optuna's tables, created under the schema lock
    with store.lease(name, ttl_s=ttl_s, wait=wait, on_wait=on_wait):
        record = store.get_study(name)
        store.abandon_running_trials(record)
        _fail_dead_optuna_trials(store, record.optuna_study_name)
        tuner = Tuner(store, record, factory, reporter=reporter)
        summary = tuner.run(max_configs=max_configs)
        store.check_lease()
        save_recommendations(store, record)
    return summary


def preflight_study(
    store: Store,
    name: str,
    *,
    ray_address: str | None = None,
    num_gpus: int | None = None,
    max_engines: int | None = None,
    check_hub: bool = False,
) -> Preflight:
    """``study run --dry-run``: the next run's plan and what would stop it (``.problems``),
    without starting anything or writing; the hub is asked only with ``check_hub``."""
    from autotune.search.preflight import preflight

    return preflight(
        store,
        store.get_study(name),
        ray_address=ray_address,
        num_gpus=num_gpus,
        max_engines=max_engines,
        check_hub_now=check_hub,
    )


def _pool_factory(
    resolved: ResolvedStudy,
    record: StudyRecord,
    ray_address: str | None,
    max_engines: int | None,
    log_to_driver: bool,
    *,
    num_gpus: int | None = None,
    replay_time_scale: float | None = None,
) -> Callable[[ResolvedStudy], Any]:
    """The pool a study runs on.

    vLLM engines always run in Ray actors. A replay study runs in-process (one engine at a time,
    no Ray) unless a Ray address or logical GPUs are given: then it goes through the same Ray
    pool as real engines, N / TP replay engines at once on disjoint devices, which is how the
    scale-out path is tested without vLLM.
    """
    engine = resolved.spec.engine
    kind: str = engine.kind
    options: dict[str, Any] = {}
    if isinstance(engine, VLLMEngineSpec) and engine.client == "server":
        kind = "vllm-serve"  # autotune.engine.serve: vllm serve + vllm bench serve
    if isinstance(engine, ReplayEngineSpec):
        landscape = Path(resolved.landscape or engine.landscape)
        options = {"landscape": str(landscape), "seed": resolved.spec.seed}
        if replay_time_scale:
            options["time_scale"] = replay_time_scale
        if ray_address is None and num_gpus is None:
            from autotune.cluster.local import LocalPool
            from autotune.engine.replay import ReplayEngine

            def replay_pool(_: ResolvedStudy) -> Any:
                return LocalPool(lambda: ReplayEngine(**options))

            return replay_pool

    def ray_pool(study: ResolvedStudy) -> Any:
        from autotune.cluster.ray_pool import RayPool

        return RayPool(
            engine_kind=kind,
            engine_options=options,
            tensor_parallel_size=study.tensor_parallel_size,
            address=ray_address,
            max_engines=max_engines,
            num_gpus=num_gpus,
            log_to_driver=log_to_driver,
        )

    return ray_pool


def save_recommendations(store: Store, record: StudyRecord) -> int:
    """Store the current choice for every measured (workload, concurrency) of a study,
    replacing what an earlier run of the study stored."""
    from autotune.recommend.choose import cells, choose

    rows = store.measurements(study=record.name)
    items: list[dict[str, Any]] = []
    for workload, concurrency in cells(rows):
        choice = choose(rows, workload, concurrency)
        if choice is None:
            continue
        items.append(
            {
                "workload": workload,
                "workload_digest": choice.workload_digest,
                "concurrency": concurrency,
                "trial_id": choice.best.trial_ids[0],
                "speculative_config": choice.best.speculative_config,
                "output_throughput_tok_s": choice.best.median_tok_s,
                "baseline_tok_s": choice.baseline.median_tok_s if choice.baseline else None,
                "speedup": choice.speedup,
            }
        )
    return store.replace_recommendations(record, items)


FINISHED = "done"
"""The only status of a study whose strategy finished (space exhausted or nothing can beat the
best). Budget-stopped studies read ``stopped: budget`` / ``stopped: --max-configs`` /
``stopped: --max-engines``, interrupted ones ``interrupted``; a killed run stays ``running``."""


@dataclass(frozen=True)
class Coverage:
    """How much of a study's search space was measured."""

    measured: int
    """Engine configs that finished (completed or failed)."""
    planned: int
    """Engine configs in the study's search space."""
    status: str

    @property
    def exhausted(self) -> bool:
        return self.status == FINISHED or self.measured >= self.planned

    def line(self, study: str) -> str:
        return (
            f"study {study!r} is {self.status}: {self.measured} of the {self.planned} configs "
            f"its search planned were measured; the answer may change when it finishes "
            f"(autotune study resume {study})"
        )


def coverage(store: Store, record: StudyRecord) -> Coverage:
    """Finished configs vs the configs in the study's search space."""
    from autotune.search.space import SearchSpace

    resolved = ResolvedStudy.from_json(record.resolved_json)
    planned = len(SearchSpace(resolved).configs())
    # Distinct configs: the drift check's second baseline run is the same config.
    measured = len(
        {t.config_key for t in store.trials(record) if t.state in ("complete", "failed")}
    )
    return Coverage(measured=measured, planned=planned, status=record.status)


@dataclass(frozen=True)
class Selected:
    """The study an answer comes from, and why, when it is not a finished one."""

    study: StudyRecord
    rows: Sequence[MeasurementRecord]
    notes: tuple[str, ...]
    """Lines for stderr: which partial study is used and how much of it was measured."""
    coverage: Coverage | None
    """None for a finished study (status ``done``)."""


def select_study(store: Store, model: str, workload: str, study: str | None = None) -> Selected:
    """The study `recommend` and `check` answer from.

    ``study`` picks one explicitly. Otherwise, among the studies of ``model`` that measured
    ``workload``: the finished one (status ``done``) with the newest measurement; when none is
    finished, the partial one with the newest measurement, with a note saying so. Either way, a
    study whose search space was not exhausted gets a note with its coverage.
    """
    studies = [
        s
        for s in store.list_studies()
        if (study is None or s.name == study) and model in (s.model_alias, s.model)
    ]
    if study is not None and not studies:
        raise NotFoundError(f"no study named {study!r} for model {model!r}")
    candidates = []
    for s in studies:
        rows = store.measurements(study=s.name, workload=workload)
        if rows:
            candidates.append((s.status == FINISHED, max(r.created_at for r in rows), s, rows))
    if not candidates:
        raise NoResultError(
            f"nothing measured for model {model!r} and workload {workload!r} yet; "
            f"create and run a study first (autotune study create / autotune study run)"
        )
    finished, _, record, rows = max(candidates, key=lambda c: (c[0], c[1]))
    notes: list[str] = []
    if study is None and not finished:
        notes.append(
            f"no finished study of {model} measured {workload}; answering from the partial "
            f"study {record.name!r} (status {record.status}), the one measured most recently"
        )
    # A finished study's strategy ended by itself; only a partial one needs its coverage (and
    # computing it imports the search package, a good part of a read-only command's time).
    cov = None if record.status == FINISHED else coverage(store, record)
    if cov is not None and not cov.exhausted:
        notes.append(cov.line(record.name))
    return Selected(record, rows, tuple(notes), cov)


def measured_buckets(
    store: Store, model: str, workload: str, study: str | None = None
) -> dict[int, str]:
    """The context-length buckets (``WORKLOAD@ctxL``) of ``workload`` measured for ``model``
    (in ``study`` only, when given): context length -> measured workload name."""
    from autotune.spec.context import buckets_of

    return buckets_of(workload, measured_workload_names(store, model, study))


def measured_workload_names(store: Store, model: str, study: str | None = None) -> set[str]:
    """Every workload name measured for ``model`` (in ``study`` only, when given)."""
    names: set[str] = set()
    for s in store.list_studies():
        if (study is None or s.name == study) and model in (s.model_alias, s.model):
            names.update(r.workload for r in store.measurements(study=s.name))
    return names


def per_context_only(store: Store, model: str, workload: str, study: str | None = None) -> str:
    """Why a question about ``workload`` without ``--context`` has no single answer ("" when it
    has one): it was measured per context-length bucket only."""
    from autotune.spec.context import buckets_of

    names = measured_workload_names(store, model, study)
    found = buckets_of(workload, names)
    if not found or workload in names:
        return ""
    return (
        f"workload {workload!r} of {model} was measured per context length only (buckets of "
        f"{', '.join(map(str, found))} prompt tokens): give --context L (the prompt tokens of "
        "the requests to answer for), or --format dsd for one table per bucket"
    )


def context_bucket(
    store: Store, model: str, workload: str, context: int, study: str | None = None
) -> Any:
    """The measured bucket that answers for requests of ``context`` prompt tokens
    (``autotune.spec.context.BucketPick``): the smallest at or above it, else the largest."""
    from autotune.spec.context import pick_bucket

    found = measured_buckets(store, model, workload, study)
    pick = pick_bucket(workload, context, found.values())
    if pick is None:
        raise NoResultError(
            f"no context-length bucket of workload {workload!r} was measured for model "
            f"{model!r}; measure some with context_lengths: [...] in a study file, or drop "
            "--context"
        )
    return pick


@dataclass(frozen=True)
class LowConfidence:
    """A level whose answer the measurements cannot back (``Choice.low_confidence``)."""

    concurrency: int
    reason: str
    """Every reason, joined with "; "."""

    def line(self) -> str:
        """The stderr note (after ``note: ``) of `recommend` and `check`."""
        return f"low confidence at concurrency {self.concurrency}: {self.reason}"

    def as_json(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "reason": self.reason}


def low_confidence(
    choices: Sequence[Any], max_spread_pct: float, precision_pct: float | None = None
) -> tuple[LowConfidence, ...]:
    """The low-confidence levels among per-level ``choices`` (``autotune.recommend.choose``),
    judged against the study's ``measurement.max_spread_pct`` and ``precision_pct`` (the
    baseline's drift limit; None: the default)."""
    from autotune.recommend.choose import DEFAULT_PRECISION_PCT

    out = []
    for c in choices:
        reasons = c.low_confidence(
            max_spread_pct, DEFAULT_PRECISION_PCT if precision_pct is None else precision_pct
        )
        if reasons:
            out.append(LowConfidence(c.concurrency, "; ".join(reasons)))
    return tuple(out)


@dataclass(frozen=True)
class Loss:
    """A level where an answer over several levels loses to that level's own answer."""

    concurrency: int
    answer: str
    winner: str
    winner_config: dict[str, Any] | None
    loss_pct: float
    answer_tok_s: float
    winner_tok_s: float

    def line(self) -> str:
        """The stderr note (after ``note: ``)."""
        return (
            f"at concurrency {self.concurrency} the answer {self.answer} loses to "
            f"{self.winner} by {self.loss_pct:.1f}% ({self.answer_tok_s:,.1f} vs "
            f"{self.winner_tok_s:,.1f} tok/s median); answer that level alone with "
            f"--concurrency {self.concurrency}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "winner": self.winner,
            "winner_speculative_config": self.winner_config,
            "loss_pct": round(self.loss_pct, 3),
        }


@dataclass(frozen=True)
class Recommendation:
    """What `autotune recommend` answers, with everything `--explain` shows."""

    model: str
    model_alias: str | None
    workload: str
    concurrency: int | None
    """None: one config for every measured level (see ``choose_overall``)."""
    choice: Any
    per_level: Sequence[Any]
    study: StudyRecord
    resolved: ResolvedStudy
    rows: Sequence[MeasurementRecord]
    notes: tuple[str, ...] = ()
    """Lines for stderr (partial study, coverage)."""
    coverage: Coverage | None = None
    engine_args: dict[str, Any] = field(default_factory=dict)
    """Every engine arg the recommended config's trial ran with (false and zero included)."""
    tensor_parallel_size: int = 1
    source: str = "measured"
    low_confidence_levels: tuple[LowConfidence, ...] = ()
    """Every level of ``per_level`` whose winner's margin is inside the noise or whose winner or
    baseline spread over the study's ``measurement.max_spread_pct`` (``Choice.low_confidence``)."""
    weights: dict[int, float] | None = None
    """The measured levels the answer weighs and how much (a traffic mix, or the two
    neighbours of an unmeasured ``concurrency``); None: ``concurrency`` alone, or every level
    equally."""
    traffic: dict[int, float] | None = None
    """The traffic mix asked for (concurrency -> share of time), normalised."""

    @property
    def speculative_config(self) -> dict[str, Any] | None:
        config: dict[str, Any] | None = self.choice.best.speculative_config
        return config

    def _answers(self, concurrency: int) -> bool:
        """Whether the measured level ``concurrency`` is one the answer draws on."""
        if self.weights is not None:
            return self.weights.get(concurrency, 0.0) > 0
        return self.concurrency is None or concurrency == self.concurrency

    @property
    def low_confidence(self) -> tuple[LowConfidence, ...]:
        """The low-confidence levels of the answer: ``concurrency``'s (or the levels it is
        answered from), else every level's (what `recommend` and `check` note on stderr and
        `--json` carries)."""
        return tuple(lc for lc in self.low_confidence_levels if self._answers(lc.concurrency))

    @property
    def ties(self) -> tuple[Any, ...]:
        """The tied levels of the answer (``Choice.tie``): ``concurrency``'s (or the levels it
        is answered from), else every level's."""
        return tuple(c for c in self.per_level if c.tie and self._answers(c.concurrency))

    @property
    def interpolated(self) -> bool:
        """Whether ``concurrency`` was not measured and is answered from its neighbours."""
        return self.concurrency is not None and self.weights is not None

    def losses(self) -> tuple[Loss, ...]:
        """The levels the answer draws on where another config beats it outside a tie (only
        for an answer over several levels: one level's answer is that level's best)."""
        if self.concurrency is not None and self.weights is None:
            return ()
        mine = config_id(self.speculative_config)
        out = []
        for lv in self.per_level:
            if not self._answers(lv.concurrency):
                continue
            if any(config_id(t.speculative_config) == mine for t in (lv.best, *lv.tied_with)):
                continue
            ours = next(
                (s for s in (*lv.ranked, *lv.screened) if config_id(s.speculative_config) == mine),
                None,
            )
            if ours is None or lv.best.median_tok_s <= 0:
                continue
            out.append(
                Loss(
                    concurrency=lv.concurrency,
                    answer=ours.label(),
                    winner=lv.best.label(),
                    winner_config=lv.best.speculative_config,
                    loss_pct=100.0 * (1.0 - ours.median_tok_s / lv.best.median_tok_s),
                    answer_tok_s=ours.median_tok_s,
                    winner_tok_s=lv.best.median_tok_s,
                )
            )
        return tuple(o for o in out if o.loss_pct > 0)

    def answered_from(self) -> str:
        """The stderr note saying which study (and which levels) answered."""
        where = ""
        if self.traffic is not None:
            mix = ", ".join(f"{c}: {share:.0%}" for c, share in sorted(self.traffic.items()))
            where = f" for the traffic mix {{{mix}}}"
        if self.interpolated and self.weights is not None:
            lo, hi = sorted(self.weights)
            where = (
                f" for concurrency {self.concurrency}, which was not measured: from its "
                f"neighbours {lo} and {hi}, weighted {self.weights[lo]:.2f}/"
                f"{self.weights[hi]:.2f} by distance in log-concurrency"
            )
        elif self.weights is not None:
            shares = ", ".join(f"{c}: {w:.2f}" for c, w in sorted(self.weights.items()))
            where += f" (weights on the measured levels {shares})"
        return f"answered from study {self.study.name!r} (status {self.study.status}){where}"

    @property
    def degenerate(self) -> tuple[Any, ...]:
        """The levels of the answer whose replies were mostly loops (``Choice.degenerate``):
        ``concurrency``'s, else every level's."""
        return tuple(
            c
            for c in self.per_level
            if c.degenerate and (self.concurrency is None or c.concurrency == self.concurrency)
        )

    def is_low_confidence(self, concurrency: int) -> bool:
        """Whether the level ``concurrency`` of ``per_level`` is low-confidence."""
        return any(lc.concurrency == concurrency for lc in self.low_confidence_levels)


def recommend(
    store: Store,
    model: str,
    workload: str,
    concurrency: int | None = None,
    study: str | None = None,
    slo: Any = None,
    traffic: dict[int, float] | None = None,
) -> Recommendation:
    """The measured recommendation for (model, workload[, concurrency]).

    A ``concurrency`` between two measured levels is answered from its two neighbours, each
    config's score ratio to the level's best weighted by distance in log-concurrency
    (:func:`autotune.recommend.choose.neighbour_weights`); outside the measured range it raises
    :class:`NoResultError`. A ``traffic`` mix (concurrency -> share of time, summing to 1)
    chooses the config with the best weighted geometric mean over the levels, unmeasured
    levels split over their neighbours the same way.

    Answers from the study ``select_study`` picks: finished studies first. Under a latency SLO
    (``slo``, an :class:`autotune.spec.slo.SLO`; else the study's own ``slo:`` block) only the
    configs whose p99 latencies meet it are chosen; none meeting it raises
    :class:`autotune.recommend.slo.NoConfigMeetsSLO` naming the closest. Each level is judged
    against the study's ``measurement.max_spread_pct`` (``low_confidence_levels``).
    """
    from autotune.recommend.choose import (
        choose,
        choose_overall,
        neighbour_weights,
        traffic_weights,
    )
    from autotune.recommend.slo import (
        NoConfigMeetsSLO,
        choose_goodput,
        choose_overall_slo,
        choose_slo,
        study_slo,
    )

    sel = select_study(store, model, workload, study)
    record, rows = sel.study, sel.rows
    levels = sorted({r.concurrency for r in rows})
    weights: dict[int, float] | None = None
    if traffic is not None:
        try:
            weights = traffic_weights(traffic, levels)
        except ValueError as exc:
            raise NoResultError(f"--traffic for {model}/{workload}: {exc}") from None
    elif concurrency is not None and concurrency not in levels:
        weights = neighbour_weights(concurrency, levels)
        if weights is None:
            raise NoResultError(
                f"concurrency {concurrency} lies outside the levels measured for "
                f"{model}/{workload} ({', '.join(map(str, levels))}); autotune answers "
                "between measured levels but does not extrapolate"
            )
    resolved = ResolvedStudy.from_json(record.resolved_json)
    slo = slo if slo else study_slo(resolved.spec, workload)

    # vLLM's goodput judges TTFT and TPOT only: an ITL-only SLO is chosen by choose_slo.
    goodput = resolved.spec.objective == "goodput" and (
        slo.p99_tpot_ms is not None or slo.p99_ttft_ms is not None
    )

    def at(level: int) -> Any:
        if goodput:  # rank by requests/s that met the SLO (vLLM's goodput)
            return choose_goodput(rows, workload, level, slo)
        if not slo:
            return choose(rows, workload, level)
        under = choose_slo(rows, workload, level, slo)
        return None if under is None else under.as_choice()

    per_level = []
    for lv in levels:
        try:
            if (c := at(lv)) is not None:
                per_level.append(c)
        except NoConfigMeetsSLO:
            if lv == concurrency:
                raise
    if concurrency is not None and weights is None:
        choice = at(concurrency)
    elif slo:
        choice = choose_overall_slo(rows, workload, levels, slo, weights=weights)
    else:
        choice = choose_overall(rows, workload, levels, weights=weights)
    if choice is None:
        raise NoResultError(f"no usable measurements for {model}/{workload}")
    # The printed command is the measured one: the engine args stored with the best's trial.
    trial = next((t for t in store.trials(record) if t.id in choice.best.trial_ids), None)
    return Recommendation(
        model=record.model,
        model_alias=record.model_alias,
        workload=workload,
        concurrency=concurrency,
        choice=choice,
        per_level=per_level,
        study=record,
        resolved=resolved,
        rows=rows,
        notes=sel.notes + ((f"under the latency SLO {slo.describe()}",) if slo else ()),
        coverage=sel.coverage,
        engine_args=dict(trial.engine_args if trial else resolved.engine_args),
        tensor_parallel_size=trial.tensor_parallel_size if trial else resolved.tensor_parallel_size,
        low_confidence_levels=low_confidence(
            per_level,
            resolved.spec.measurement.max_spread_pct,
            resolved.spec.measurement.precision_pct,
        ),
        weights=weights,
        traffic=dict(traffic) if traffic is not None else None,
    )


@dataclass(frozen=True)
class PriorRecommendation:
    """An answer from a published result or recipe, for a pair nothing was measured for."""

    point: Any  # autotune.spec.published.StartingPoint
    model: str
    """HF id of the catalog's target checkpoint."""
    tensor_parallel_size: int
    engine_args: dict[str, Any]
    source: str = "published"

    @property
    def result(self) -> Any:
        return self.point.result

    @property
    def speculative_config(self) -> dict[str, Any] | None:
        from autotune.spec.methods import speculative_config

        p = self.point
        params = {}
        entry = _catalog_entry(p.alias)
        if entry is not None and p.method in entry.methods:
            params = dict(entry.methods[p.method].params)
        return speculative_config(p.method, p.num_speculative_tokens, p.draft, params)

    def label(self) -> dict[str, Any]:
        """What `--json`/`--explain` and the stderr note carry about the source."""
        p = self.point
        r = p.result
        return {
            "source": "published",
            "citation": p.citation,
            "method": p.method,
            "num_speculative_tokens": p.num_speculative_tokens,
            "n_from": p.n_source,
            "speedup": r.speedup if r else None,
            "mean_acceptance_length": r.mean_acceptance_length if r else None,
            "dataset": r.dataset if r else None,
            "concurrency": r.concurrency if r else None,
            "hardware": p.hardware,
            "engine": r.engine if r else None,
            "measured_model": r.model if r else None,
            "date": str(r.date) if r and r.date else None,
            "labels": list(p.labels),
            "notes": r.notes if r else "",
        }


def _catalog_entry(alias: str) -> Any:
    from autotune.spec.catalog import load_catalog

    catalog = load_catalog()
    found = catalog.resolve(alias)
    return catalog.models.get(found[0] if found else alias)


def published_prior(
    model: str, workload: str, concurrency: int | None = None
) -> PriorRecommendation | None:
    """The published starting point `recommend` falls back to when nothing is measured."""
    from autotune.spec.published import starting_point

    point = starting_point(model, workload, concurrency)
    if point is None:
        return None
    entry = _catalog_entry(point.alias)
    return PriorRecommendation(
        point=point,
        model=entry.model if entry is not None else model,
        tensor_parallel_size=entry.tensor_parallel_size.get("default", 1) if entry else 1,
        engine_args=dict(entry.engine_args) if entry is not None else {},
    )


SOURCES = ("any", "measured", "published")


def answer(
    store: Store | Callable[[], Store] | None,
    model: str,
    workload: str,
    concurrency: int | None = None,
    study: str | None = None,
    source: str = "any",
    slo: Any = None,
    traffic: dict[int, float] | None = None,
) -> Recommendation | PriorRecommendation:
    """What `autotune recommend` prints: the measured recommendation, else (``source`` "any")
    the published starting point; ``source`` "measured"/"published" asks for one of them only.

    ``store`` may be a callable, so a published answer never opens (or creates) a database;
    None says there is no store yet (nothing measured), so it is not even imported.
    """
    if source not in SOURCES:
        raise SpecError(f"must be one of {', '.join(SOURCES)}", source="--source")
    if source == "published" and study is not None:
        raise SpecError("--study names a measured study; drop it or use --source measured")
    if source == "published" and traffic is not None:
        raise SpecError("--traffic weighs measured levels; drop it or use --source measured")
    if source != "published":
        try:
            if store is None:
                raise NoResultError(
                    f"nothing measured for model {model!r} and workload {workload!r} yet (the "
                    "store does not exist); create and run a study first (autotune study "
                    "create / autotune study run)"
                )
            opened = store() if callable(store) else store
            return recommend(
                opened, model, workload, concurrency, study=study, slo=slo, traffic=traffic
            )
        except NoResultError as exc:
            # A published result says nothing of latency or of a traffic mix: no fallback.
            if source == "measured" or study is not None or slo or traffic:
                raise
            measured_error: NoResultError | None = exc
    else:
        measured_error = None
    prior = published_prior(model, workload, concurrency)
    if prior is None:
        what = f"{measured_error}; n" if measured_error else "N"
        raise NoResultError(f"{what}o published result is known for model {model!r} either")
    return prior


def export_landscape(store: Store, study: str, path: Path) -> int:
    """Write a study's measurements as a landscape CSV, so a real sweep can be replayed."""
    from autotune.engine.landscape import LandscapePoint, write_landscape
    from autotune.spec.knobs import knob_params

    record = store.get_study(study)
    rows = store.measurements(study=study)
    if not rows:
        raise NoResultError(f"study {study!r} has no measurements to export")
    alias = record.model_alias or record.model
    points = [
        LandscapePoint(
            model=alias,
            workload=r.workload,
            method=r.method,
            draft=r.draft,
            num_speculative_tokens=r.num_speculative_tokens,
            concurrency=r.concurrency,
            repeat=r.repeat,
            output_throughput_tok_s=r.output_throughput_tok_s,
            mean_acceptance_length=r.mean_acceptance_length,
            acceptance_per_pos=tuple(a / r.num_drafts for a in r.accepted_per_pos)
            if r.num_drafts
            else (),
            engine_start_s=r.engine_start_s or 0.0,
            measure_s=r.measure_s,
            params=tuple(knob_params(r.speculative_config).items()),
        )
        for r in rows
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_landscape(path, points)


def next_steps(record: StudyRecord) -> list[str]:
    """The commands to run after a study run: look at the report, take the recommendation."""
    resolved = ResolvedStudy.from_json(record.resolved_json)
    alias = record.model_alias or record.model
    q = shlex.quote  # the lines are commands to paste: every user-given word quoted
    lines = [f"next: autotune report {q(record.name)} --html {q(record.name + '.html')}"]
    lengths = resolved.spec.context_lengths if resolved.landscape is None else None
    from autotune.spec.context import split_bucket

    for w in resolved.spec.workloads:
        base, length = split_bucket(w)  # a replayed landscape's bucket: ask by --context
        context = length or (lengths[-1] if lengths else None)
        flag = f" --context {context}" if context else ""
        lines.append(
            f"      autotune recommend --model {q(alias)} --workload {q(base)}{flag} --explain"
        )
    if lengths:
        lines += [
            f"      autotune recommend --model {q(alias)} --workload {q(w)} --format dsd"
            for w in resolved.spec.workloads
        ]
    return lines


@dataclass(frozen=True)
class CatalogMethod:
    """One method of a catalog model, with the N range autotune searches for it."""

    alias: str
    model: str
    tensor_parallel_size: dict[str, int]
    method: str | None
    draft: str | None
    n_max: int | None
    """None: no method, or a DSpark draft whose N is its trained block (read from its config)."""


def catalog_methods() -> list[CatalogMethod]:
    """Every (model, method) of the catalog with its N bound: the smaller of the catalog's
    ``n_max`` and what the method's rules allow for that model."""
    from autotune.spec.catalog import load_catalog
    from autotune.spec.methods import RuleContext, max_n

    out = []
    for alias, entry in load_catalog().models.items():
        tp = dict(entry.tensor_parallel_size)
        if not entry.methods:
            out.append(CatalogMethod(alias, entry.model, tp, None, None, None))
        for method, m in entry.methods.items():
            ctx = RuleContext(
                mtp_layers=entry.mtp_layers,
                block_size=m.block_size,
                mla_attention=entry.mla_attention,
            )
            hi: int | None = min(m.n_max or max_n(method, ctx), max_n(method, ctx))
            if method == "dspark" and m.block_size is None:
                hi = None
            out.append(CatalogMethod(alias, entry.model, tp, method, m.draft, hi))
    return out


@dataclass(frozen=True)
class WorkloadView:
    """A workload as `autotune workload show` prints it."""

    spec: Any
    path: Path
    prepared: Any
    tokenizer_name: str
    stats: dict[str, Any]
    origin: Any
    """Where the prompts come from (:func:`autotune.datasets.provenance`)."""
    prompt_lengths: list[int] = field(default_factory=list)
    """Each prompt's length in tokens (characters where no tokenizer loads)."""
    length_unit: str = "tokens"


def show_workload(name: str, tokenizer: str | None = None) -> WorkloadView:
    """A workload's prompts and token statistics, counted with ``tokenizer`` (HF id, path or
    ``tiny:NAME``) or, by default, the byte-level BPE of autotune's tiny CPU model."""
    from autotune.datasets import prepare, provenance, token_stats
    from autotune.datasets.stats import prompt_lengths
    from autotune.spec.loader import load_workload

    spec, path = load_workload(name)
    prepared = prepare(spec, Path(path).parent)
    tok_name = tokenizer or "autotune's tiny BPE; --tokenizer MODEL for your model's"
    tok = _load_tokenizer(tokenizer) if tokenizer else _default_tokenizer()
    stats = token_stats(list(prepared.prompts), tok)
    lengths = prompt_lengths(list(prepared.prompts), tok)
    unit = "tokens" if tok is not None else "chars"
    return WorkloadView(
        spec, Path(path), prepared, tok_name, stats, provenance(spec), lengths, unit
    )


def _default_tokenizer() -> Any:
    """The tiny CPU model's tokenizer (:func:`autotune.engine.default_tokenizer`)."""
    from autotune.engine import default_tokenizer

    return default_tokenizer()


def _load_tokenizer(name: str) -> Any:
    """A tokenizer with ``encode``; ``tiny:NAME`` resolves through the engine's model hooks."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    from autotune.engine import resolve_model

    name = resolve_model(name)
    try:
        return AutoTokenizer.from_pretrained(name)
    except Exception as exc:
        raise SpecError(
            f"cannot load tokenizer: {str(exc).splitlines()[0]}", source="--tokenizer"
        ) from None


def space_size(resolved: ResolvedStudy) -> int:
    """How many engine configs a study's search space holds."""
    from autotune.search.space import SearchSpace

    return len(SearchSpace(resolved))


@dataclass(frozen=True)
class StudyReport:
    """What `autotune report` shows and wrote: the measurements, their summary, the files."""

    frame: Any  # pandas.DataFrame, one row per measurement
    summary: Any  # pandas.DataFrame, one row per config × cell
    written: list[Path]
    notes: tuple[str, ...] = ()
    """Lines for stderr: how much of a partial study was measured."""
    trade_off: Any = None
    """pandas.DataFrame, per level every config's tok/s vs p99 latencies, goodput, SLO and
    Pareto-front flags (:func:`autotune.report.tradeoff.trade_off_frame`; empty without
    latencies)."""
    slo_text: dict[str, str] = field(default_factory=dict)
    """Workload -> the study's SLO for it, as text ("" where it sets none)."""
    drift: tuple[Any, ...] = ()
    """The baseline's drift per level (``autotune.recommend.choose.Drift``; the drift check)."""
    precision_pct: float = 3.0
    """The study's ``measurement.precision_pct`` (the drift limit)."""
    buckets: tuple[Any, ...] = ()
    """One ``autotune.report.context.BucketSection`` per context-length bucket measured."""


def report_study(
    store: Store,
    name: str,
    *,
    html: Path | None = None,
    png_dir: Path | None = None,
    csv: Path | None = None,
    parquet: Path | None = None,
) -> StudyReport:
    """A study's measurements and summary frames, writing the files asked for; refuses (before
    writing anything) when Parquet support is missing or nothing was measured yet."""
    from autotune.report import (
        measurements_frame,
        plot_png,
        require_parquet,
        summary_frame,
        write_csv,
        write_html,
        write_parquet,
    )

    if parquet is not None:
        require_parquet()
    df = measurements_frame(store, name)
    if df.empty:
        raise NoResultError(
            f"study {name!r} in {store.shown_url} has no measurements yet (autotune study run {name})"
        )
    written: list[Path] = []
    if csv is not None:
        written.append(write_csv(df, csv))
    if parquet is not None:
        written.append(write_parquet(df, parquet))
    if png_dir is not None:
        written.extend(plot_png(df, png_dir))
    if html is not None:
        written.append(write_html(df, html))
    record = store.get_study(name)
    cov = coverage(store, record) if record.status != FINISHED else None
    notes = () if cov is None or cov.exhausted else (cov.line(name),)
    from autotune.recommend.choose import DEFAULT_PRECISION_PCT, baseline_drift
    from autotune.report.tradeoff import slo_of, trade_off_frame

    slo_text = {str(w): slo_of(df, str(w)).describe() for w in sorted(df["workload"].unique())}
    from autotune.report.context import bucket_sections

    resolved = ResolvedStudy.from_json(record.resolved_json)
    precision = resolved.spec.measurement.precision_pct
    drift = tuple(baseline_drift(store.measurements(study=name)))
    summary = summary_frame(df)
    built = {k: v.model_dump() for k, v in resolved.context_buckets.items()}
    return StudyReport(
        df,
        summary,
        written,
        notes,
        trade_off_frame(df),
        slo_text,
        drift,
        DEFAULT_PRECISION_PCT if precision is None else precision,
        tuple(bucket_sections(df, summary, built)),
    )


def catalog_json() -> dict[str, Any]:
    """The model catalog as JSON-ready data, by alias."""
    from autotune.spec.catalog import load_catalog

    return {alias: e.model_dump(mode="json") for alias, e in load_catalog().models.items()}


def list_workloads() -> list[dict[str, Any]]:
    """The workloads autotune can find, with where each was found and whether its prompts are
    a real dataset, generated, or a file's."""
    from autotune.datasets import provenance
    from autotune.spec.loader import list_workload_names, load_workload

    rows: list[dict[str, Any]] = []
    for name in list_workload_names():
        spec, path = load_workload(name)
        rows.append(
            {
                "name": spec.name,
                "kind": spec.source.kind,
                "data": provenance(spec).label(),
                "num_prompts": spec.num_prompts,
                "max_tokens": spec.max_tokens,
                "description": spec.description,
                "path": str(path),
            }
        )
    return rows


def create_quick_study(
    store: Store,
    model: str,
    workloads: Sequence[str],
    *,
    name: str | None = None,
    concurrency: Sequence[int] = (),
    methods: Sequence[str] = (),
    repeats: int | None = None,
    replace: bool = False,
) -> Created:
    """A study from the quick-study flags: the catalog's methods and defaults for ``model``
    unless ``methods``/``concurrency``/``repeats`` are given."""
    data: dict[str, Any] = {
        "name": name or f"{model}-{'-'.join(workloads)}".lower().replace("/", "-"),
        "model": {"name": model},
        "workloads": list(workloads),
    }
    if concurrency:
        data["concurrency"] = list(concurrency)
    if methods:
        data["methods"] = [{"method": m} for m in methods]
    if repeats is not None:
        data["repeats"] = repeats
    return create_study(store, data=data, source="--model/--workload flags", replace=replace)


def export_speculators_data(
    store: Store,
    study: str,
    workload: str,
    output: Path,
    *,
    with_responses: bool = False,
) -> Any:
    """Write the prompt set ``study`` measured for ``workload`` as vLLM Speculators training
    data in ``output`` (an :class:`autotune.export.SpeculatorsExport` says what was written).

    ``prompts.jsonl`` holds the prompts (``conversations`` rows); with ``with_responses`` the
    study's target runs on the vLLM engine and ``responses.jsonl`` holds its greedy responses
    as speculator-format rows (``input_ids``, ``loss_mask``). ``README.md`` gives the commands
    that train an EAGLE-3 and a DFlash draft with Speculators, and ``measure-draft.yaml`` the
    study that measures them. Every input is checked before anything is written or started.
    """
    from autotune.export import speculators as sx
    from autotune.recommend.choose import latest_digest

    record = store.get_study(study)
    resolved = ResolvedStudy.from_json(record.resolved_json)
    sx.check_output(output)
    digest = latest_digest(store.measurements(study=study, workload=workload), workload)
    prepared = sx.measured_prompts(resolved, study, workload, [digest] if digest else [])
    prompts = sx.prompt_rows(study, prepared)
    sx.check_prompt_rows(prompts, sx.PROMPTS_FILE)
    responses: list[dict[str, Any]] = []
    if with_responses:
        generations = sx.generate_responses(resolved, prepared)
        responses = sx.response_rows(study, resolved.model, prepared, generations)
        sx.check_speculator_rows(responses, sx.RESPONSES_FILE)
    readme = sx.commands_readme(resolved, study, prepared, output, with_responses=with_responses)
    snippet = sx.study_snippet(resolved, workload, output)
    output.mkdir(parents=True, exist_ok=True)
    files = [output / sx.PROMPTS_FILE]
    sx.write_jsonl(files[0], prompts)
    if responses:
        files.append(output / sx.RESPONSES_FILE)
        sx.write_jsonl(files[-1], responses)
    files += [output / sx.STUDY_FILE, output / sx.README_FILE]
    sx.write_text(files[-2], snippet)
    sx.write_text(files[-1], readme)
    return sx.SpeculatorsExport(
        study=study,
        workload=workload,
        workload_digest=prepared.digest,
        output=output,
        files=tuple(files),
        prompts=len(prompts),
        responses=len(responses),
        response_tokens=sum(sum(r["loss_mask"]) for r in responses),
    )
