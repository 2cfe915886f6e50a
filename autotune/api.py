"""The Python API the CLI wraps: create, inspect, run and delete studies; recommend.

Every function validates all input before it writes anything, so bad input leaves the store
exactly as it was.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import NoResultError, NotFoundError, SpecError, StoreError
from autotune.spec.loader import (
    ResolvedStudy,
    load_study_file,
    resolve_study,
    validate,
)
from autotune.spec.study import StudySpec
from autotune.store import LEASE_TTL_S, MeasurementRecord, Store, StudyRecord, TrialRecord


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
    wait: bool = False,
    on_wait: Callable[[str], None] | None = None,
    lease_ttl_s: float = LEASE_TTL_S,
) -> Any:
    """Run (or resume) a study until its space or budget is exhausted.

    The driver holds the study's lease throughout (``Store.lease``): a second driver on the
    same study gets StudyBusyError (exit 2) naming the first, or with ``wait`` waits for it.
    Only with the lease held are a dead driver's trials marked interrupted and its partial
    measurements removed, so a live driver's trial is never touched.
    """
    from autotune.search.tuner import Tuner

    record = store.get_study(name)
    resolved = ResolvedStudy.from_json(record.resolved_json)
    factory = _pool_factory(resolved, record, ray_address, max_engines, log_to_driver)
    store.ensure_optuna_schema()  # Optuna's tables, created under the schema lock
    with store.lease(name, ttl_s=lease_ttl_s, wait=wait, on_wait=on_wait) as lease:
        record = store.get_study(name)
        store.abandon_running_trials(record)
        _fail_dead_optuna_trials(store, record.optuna_study_name)
        tuner = Tuner(store, record, factory, reporter=reporter)
        summary = tuner.run(max_configs=max_configs)
        if store.lease_lost(lease):
            raise StoreError(
                f"this driver lost the lease on study {name!r} during the run (no heartbeat "
                f"for {lease_ttl_s:.0f} s) and another driver took it over; its results are "
                "in the store, check them with `autotune study show`"
            )
        save_recommendations(store, record)
    return summary


def _pool_factory(
    resolved: ResolvedStudy,
    record: StudyRecord,
    ray_address: str | None,
    max_engines: int | None,
    log_to_driver: bool,
) -> Callable[[ResolvedStudy], Any]:
    engine = resolved.spec.engine
    if engine.kind == "replay":
        from autotune.cluster.local import LocalPool
        from autotune.engine.replay import ReplayEngine

        landscape = Path(resolved.landscape or engine.landscape)
        seed = resolved.spec.seed

        def replay_pool(_: ResolvedStudy) -> Any:
            return LocalPool(lambda: ReplayEngine(landscape=landscape, seed=seed))

        return replay_pool

    def ray_pool(study: ResolvedStudy) -> Any:
        from autotune.cluster.ray_pool import RayPool

        return RayPool(
            engine_kind="vllm",
            tensor_parallel_size=study.tensor_parallel_size,
            address=ray_address,
            max_engines=max_engines,
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


def recommend(
    store: Store,
    model: str,
    workload: str,
    concurrency: int | None = None,
    study: str | None = None,
) -> Recommendation:
    """The measured recommendation for (model, workload[, concurrency]).

    Uses the most recently updated study of that model that measured the workload.
    """
    from autotune.recommend.choose import choose, choose_overall

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
            candidates.append((max(r.created_at for r in rows), s, rows))
    if not candidates:
        raise NoResultError(
            f"nothing measured for model {model!r} and workload {workload!r} yet; "
            f"create and run a study first (autotune study create / autotune study run)"
        )
    _, record, rows = max(candidates, key=lambda c: c[0])
    levels = sorted({r.concurrency for r in rows})
    if concurrency is not None and concurrency not in levels:
        raise NoResultError(
            f"concurrency {concurrency} was not measured for {model}/{workload} "
            f"(measured: {', '.join(map(str, levels))})"
        )
    per_level = [c for c in (choose(rows, workload, lv) for lv in levels) if c is not None]
    choice = (
        choose(rows, workload, concurrency)
        if concurrency is not None
        else choose_overall(rows, workload, levels)
    )
    if choice is None:
        raise NoResultError(f"no usable measurements for {model}/{workload}")
    return Recommendation(
        model=record.model,
        model_alias=record.model_alias,
        workload=workload,
        concurrency=concurrency,
        choice=choice,
        per_level=per_level,
        study=record,
        resolved=ResolvedStudy.from_json(record.resolved_json),
        rows=rows,
    )


@dataclass(frozen=True)
class PriorRecommendation:
    """An answer from a published result, for a pair nothing was measured for."""

    result: Any  # autotune.spec.published.PublishedResult

    @property
    def speculative_config(self) -> dict[str, Any] | None:
        from autotune.spec.methods import speculative_config

        r = self.result
        if r.num_speculative_tokens is None:
            return None
        return speculative_config(r.method, r.num_speculative_tokens, r.draft, {})


def published_prior(
    model: str, workload: str, concurrency: int | None = None
) -> PriorRecommendation | None:
    """The published result `recommend` falls back to when nothing is measured."""
    from autotune.spec.published import best_prior

    result = best_prior(model, workload, concurrency)
    if result is None or result.num_speculative_tokens is None:
        return None
    return PriorRecommendation(result)


def export_landscape(store: Store, study: str, path: Path) -> int:
    """Write a study's measurements as a landscape CSV, so a real sweep can be replayed."""
    from autotune.engine.landscape import LandscapePoint, write_landscape

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
        )
        for r in rows
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_landscape(path, points)
