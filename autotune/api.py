"""The Python API the CLI wraps: a typed facade over the layers that do the work.

Create, inspect, run and delete studies (run protocol: :mod:`autotune.search.protocol`; pools:
:mod:`autotune.cluster.pools`), answer (:mod:`autotune.recommend.answer`), report, export and
show workloads. Clients sit above it (the CLI, :mod:`autotune.bench`, ``verify``, ``observe``);
the facade imports none of them. Every function validates all input before it writes anything,
so bad input leaves the store as it was. The layers are imported where used: SQLAlchemy costs a
read-only command ~0.2 s, and a published answer (recommend on a fresh install) never needs it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import NoResultError, SpecError
from autotune.recommend import answer as _answer
from autotune.recommend import studies as _studies
from autotune.recommend.answer import Recommendation as Recommendation
from autotune.recommend.published import PriorRecommendation as PriorRecommendation
from autotune.recommend.published import published_prior as published_prior
from autotune.recommend.studies import NextSteps as NextSteps
from autotune.recommend.studies import measured_buckets as measured_buckets
from autotune.recommend.studies import next_steps as next_steps
from autotune.recommend.studies import per_context_only as per_context_only
from autotune.spec.catalog import catalog_methods as catalog_methods
from autotune.spec.loader import ResolvedStudy, load_study_file, resolve_study, validate
from autotune.spec.options import planned_configs
from autotune.spec.study import StudySpec

if TYPE_CHECKING:
    from autotune.datasets.show import WorkloadView
    from autotune.export.speculators import SpeculatorsExport
    from autotune.recommend.answer import StoredCheck
    from autotune.recommend.compare import Comparison
    from autotune.recommend.rate import RateAnswer
    from autotune.recommend.studies import Coverage, Selected
    from autotune.report.study import StudyReport
    from autotune.search.imported_study import Imported
    from autotune.search.preflight import Preflight
    from autotune.search.reporting import Reporter, RunSummary
    from autotune.spec.context import BucketPick
    from autotune.spec.slo import SLO
    from autotune.store import Store, StudyRecord, TrialRecord


@dataclass(frozen=True)
class Created:
    study: StudyRecord
    resolved: ResolvedStudy


def create_study(
    store: Store,
    path: Path | None = None,
    *,
    data: Mapping[str, object] | None = None,
    source: str | None = None,
    replace: bool = False,
) -> Created:
    """Create a study from a YAML file, or from ``data`` (the quick-study flags)."""
    if path is not None:
        spec = load_study_file(path)
        source = source or str(path)
    elif data is not None:
        source = source or "command line"
        spec = validate(StudySpec, dict(data), source)
    else:
        raise SpecError("give a study file or --model/--workload", source="study create")
    from autotune.datasets._base import check_study_sources
    from autotune.datasets.study import build_context_buckets, check_prompts
    from autotune.engine.resolution import engine_facts
    from autotune.search.space import validate_study

    resolved = resolve_study(spec, source, engine=engine_facts())

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
            from autotune.search.protocol import delete_optuna_study

            delete_optuna_study(store, record.optuna_study_name)
    return Created(record, resolved)


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
    from autotune.search.protocol import delete_optuna_study

    with store.lease(name):
        store.delete_study(name)
        delete_optuna_study(store, record.optuna_study_name)


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
    """A study from the quick-study flags (:func:`autotune.spec.loader.quick_study_data`)."""
    from autotune.spec.loader import quick_study_data

    data = quick_study_data(model, workloads, name, concurrency, methods, repeats)
    return create_study(store, data=data, source="--model/--workload flags", replace=replace)


def run_study(
    store: Store,
    name: str,
    *,
    ray_address: str | None = None,
    max_engines: int | None = None,
    max_configs: int | None = None,
    reporter: Reporter | None = None,
    log_to_driver: bool = False,
    num_gpus: int | None = None,
    replay_time_scale: float | None = None,
    wait: bool = False,
    on_wait: Callable[[str], None] | None = None,
    lease_ttl_s: float | None = None,
) -> RunSummary:
    """Run (or resume) a study until its space or budget is exhausted.

    ``num_gpus`` starts the local Ray cluster with that many logical GPUs; replay engines sleep
    for their recorded times × ``replay_time_scale`` (:func:`autotune.cluster.pools.pool_factory`).

    The driver holds the study's lease throughout (``Store.lease``, ``lease_ttl_s`` seconds
    without a heartbeat before another driver may take it over): a second driver on the same
    study gets StudyBusyError (exit 2) naming the first, or with ``wait`` waits for it; the run
    protocol is :mod:`autotune.search.protocol`'s.
    """
    from autotune.cluster.pools import pool_factory
    from autotune.search.preflight import refuse
    from autotune.search.protocol import run_protocol
    from autotune.store import LEASE_TTL_S
    from autotune.store.leases import check_lease_ttl

    ttl_s = LEASE_TTL_S if lease_ttl_s is None else lease_ttl_s
    check_lease_ttl(ttl_s)
    resolved = ResolvedStudy.from_json(store.get_study(name).resolved_json)
    refuse(resolved, name, ray_address)  # what cannot work stops here: nothing written
    factory = pool_factory(
        resolved,
        ray_address,
        max_engines,
        log_to_driver,
        num_gpus=num_gpus,
        replay_time_scale=replay_time_scale,
    )
    return run_protocol(
        store,
        name,
        factory,
        ttl_s=ttl_s,
        max_configs=max_configs,
        reporter=reporter,
        wait=wait,
        on_wait=on_wait,
    )


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


def space_size(resolved: ResolvedStudy) -> int:
    """How many engine configs a study's search space holds (what its coverage counts
    against: :func:`autotune.spec.options.planned_configs`)."""
    return planned_configs(resolved)


def coverage(store: Store, record: StudyRecord) -> Coverage:
    """Finished configs vs the configs in the study's search space."""
    return _studies.coverage(store, record)


def select_study(store: Store, model: str, workload: str, study: str | None = None) -> Selected:
    """The study `recommend` and `check` answer from (:func:`autotune.recommend.studies.
    select_study`)."""
    return _studies.select_study(store, model, workload, study)


def context_bucket(
    store: Store, model: str, workload: str, context: int, study: str | None = None
) -> BucketPick:
    """The measured context-length bucket that answers for requests of ``context`` tokens."""
    return _studies.context_bucket(store, model, workload, context, study)


def recommend(
    store: Store,
    model: str,
    workload: str,
    concurrency: int | None = None,
    study: str | None = None,
    slo: SLO | None = None,
    traffic: dict[int, float] | None = None,
) -> Recommendation:
    """The measured recommendation for (model, workload[, concurrency]), under ``slo`` or the
    study's own, for a ``traffic`` mix (:func:`autotune.recommend.answer.recommend`)."""
    return _answer.recommend(store, model, workload, concurrency, study, slo, traffic)


def answer(
    store: Store | Callable[[], Store] | None,
    model: str,
    workload: str,
    concurrency: int | None = None,
    study: str | None = None,
    source: str = "any",
    slo: SLO | None = None,
    traffic: dict[int, float] | None = None,
) -> Recommendation | PriorRecommendation:
    """What `autotune recommend` prints: measured, else published (``source`` "any"); a callable
    or None ``store`` is opened only when needed (:func:`autotune.recommend.answer.answer`)."""
    return _answer.answer(store, model, workload, concurrency, study, source, slo, traffic)


def check(
    store: Store,
    model: str,
    workload: str,
    deployed: dict[str, object] | None,
    *,
    concurrency: int | None = None,
    tolerance_pct: float = 1.0,
    study: str | None = None,
) -> StoredCheck:
    """`autotune check`: is ``deployed`` within ``tolerance_pct`` of the stored recommendation
    (:func:`autotune.recommend.answer.check_stored`)?"""
    return _answer.check_stored(store, model, workload, deployed, concurrency, tolerance_pct, study)


def report_study(
    store: Store,
    name: str,
    *,
    html: Path | None = None,
    png_dir: Path | None = None,
    csv: Path | None = None,
    parquet: Path | None = None,
) -> StudyReport:
    """A study's frames, writing the files asked for (:mod:`autotune.report.study`)."""
    from autotune.report.study import report_study as build

    return build(store, name, html=html, png_dir=png_dir, csv=csv, parquet=parquet)


def acceptance_prior_lines(rec: Recommendation) -> list[str]:
    """``recommend --explain``'s lines on the search's acceptance priors for ``rec``'s model
    and workload: each published curve's scale and its prediction error at the measured N."""
    from autotune.search.acceptance_prior import explain_lines

    return explain_lines(rec.model, rec.model_alias, rec.workload, rec.rows)


def degenerate_lines(store: Store, study: str) -> list[str]:
    """One line per cell of the study whose replies were mostly loops."""
    from autotune.report.study import degenerate_lines as lines

    return lines(store, study)


def export_landscape(store: Store, study: str, path: Path) -> int:
    """Write a study's measurements as a landscape CSV, so a real sweep can be replayed."""
    from autotune.export.landscape import export_landscape as export

    return export(store, study, path)


def export_speculators_data(
    store: Store, study: str, workload: str, output: Path, *, with_responses: bool = False
) -> SpeculatorsExport:
    """Write ``study``'s prompt set for ``workload`` (and, ``with_responses``, the target's
    greedy responses) as vLLM Speculators training data in ``output``
    (:func:`autotune.export.training_data.export_training_data`)."""
    from autotune.export.training_data import export_training_data

    return export_training_data(store, study, workload, output, with_responses=with_responses)


def catalog_json() -> dict[str, dict[str, object]]:
    """The model catalog as JSON-ready data, by alias."""
    from autotune.spec.catalog import load_catalog

    return {alias: e.model_dump(mode="json") for alias, e in load_catalog().models.items()}


def list_workloads() -> list[dict[str, str | int | None]]:
    """The workloads autotune can find (:func:`autotune.datasets.show.list_workloads`)."""
    from autotune.datasets.show import list_workloads as rows

    return rows()


def show_workload(name: str, tokenizer: str | None = None) -> WorkloadView:
    """A workload's prompts and token statistics (:mod:`autotune.datasets.show`)."""
    from autotune.datasets.show import show_workload as show

    return show(name, tokenizer)


def import_sweep(
    store: Store | None,
    *,
    vllm_sweep: Path | None = None,
    sglang_bench: Path | None = None,
    name: str | None = None,
    landscape: Path | None = None,
    force: bool = False,
    replace: bool = False,
    workload: str | None = None,
    model: str | None = None,
    method: str | None = None,
    draft: str | None = None,
) -> Imported:
    """``autotune import``: a sweep ``vllm bench sweep serve`` or SGLang's bench_speculative.py
    ran, as a finished study with its recommendations saved, or (``landscape``) as a landscape
    CSV (:func:`autotune.search.imported_study.import_sweep`)."""
    from autotune.search.imported_study import import_sweep as read_and_write

    return read_and_write(
        store,
        vllm_sweep,
        sglang_bench,
        name,
        landscape,
        force,
        replace,
        workload,
        model,
        method,
        draft,
    )


def compare_studies(
    store: Store,
    study_a: str,
    study_b: str,
    *,
    tolerance_pct: float = 5.0,
    workload: str | None = None,
    store_b: Store | None = None,
) -> Comparison:
    """`autotune compare A B`: both studies' answers per (workload, concurrency) and what changed
    beyond noise from A to B (:mod:`autotune.recommend.compare`); B from ``store_b`` when given
    (another machine's store)."""
    from autotune.recommend.compare import compare_rows

    stores = (store, store_b or store)
    records = [s.get_study(name) for s, name in zip(stores, (study_a, study_b), strict=True)]
    rows = [s.measurements(study=r.name) for s, r in zip(stores, records, strict=True)]
    for record, measured in zip(records, rows, strict=True):
        if not measured:
            raise NoResultError(f"study {record.name!r} has no measurements yet")
    spreads = tuple(
        ResolvedStudy.from_json(r.resolved_json).spec.measurement.max_spread_pct for r in records
    )
    return compare_rows(
        study_a,
        rows[0],
        study_b,
        rows[1],
        spreads=(spreads[0], spreads[1]),
        tolerance_pct=tolerance_pct,
        workload=workload,
    )


def recommend_at_rate(
    store: Store,
    model: str,
    workload: str,
    request_rate: float | Mapping[float, float],
    study: str | None = None,
) -> tuple[Selected, RateAnswer]:
    """`recommend --request-rate R`: the concurrency each config would run at for R requests/s
    (Little's law on its measured latency per level) and the answer there, from the study
    ``select_study`` picks (:mod:`autotune.recommend.rate`); a mapping is a mix of rates
    ({rate: share of time})."""
    from autotune.recommend.rate import answer_at_rate

    sel = select_study(store, model, workload, study)
    return sel, answer_at_rate(sel.rows, workload, request_rate)
