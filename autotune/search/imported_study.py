"""``autotune import``: a sweep vLLM's or SGLang's benchmark already ran becomes a finished study
(engine kind ``imported``: one complete trial per engine config, its runs as measurements) or a
landscape CSV, so ``recommend``, ``report`` and ``recommend --format dsd`` work on it.

The readers are :mod:`autotune.engine.readers.vllm_sweep` and
:mod:`autotune.engine.readers.sglang_bench`. Every input is read and checked, and the study
resolved against the catalog, before anything is written; bad input is one SpecError naming the
file and field (exit 2).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.engine.readers.imported import SGLANG_BENCH, ImportedSweep
from autotune.errors import SpecError
from autotune.search.landscape_study import _model_name, method_entries
from autotune.spec.methods import BASELINE

if TYPE_CHECKING:
    from autotune.store import Store, StudyRecord


@dataclass(frozen=True)
class Imported:
    """What an import wrote: the study (None with ``landscape``) or the landscape's rows."""

    sweep: ImportedSweep
    study: StudyRecord | None = None
    landscape: Path | None = None
    rows: int = 0


def read_sweep(
    *,
    vllm_sweep: Path | None = None,
    sglang_bench: Path | None = None,
    model: str | None = None,
    method: str | None = None,
    draft: str | None = None,
    workload: str | None = None,
) -> ImportedSweep:
    """Read exactly one of a vLLM sweep directory and an SGLang bench JSONL."""
    if (vllm_sweep is None) == (sglang_bench is None):
        raise SpecError("give exactly one of --vllm-sweep DIR and --sglang-bench FILE")
    if vllm_sweep is not None:
        if method is not None or draft is not None:
            raise SpecError(
                "--method and --draft go with --sglang-bench (a vLLM sweep records its "
                "--speculative-config)"
            )
        from autotune.engine.readers.vllm_sweep import read_vllm_sweep

        return read_vllm_sweep(vllm_sweep, workload=workload, model=model)
    from autotune.engine.readers.sglang_bench import read_sglang_bench

    assert sglang_bench is not None
    if method is None:
        raise SpecError(
            "bench_speculative.py does not record the speculative algorithm: give --method",
            source=str(sglang_bench),
        )
    return read_sglang_bench(
        sglang_bench, model=model, method=method, draft=draft, workload=workload
    )


def study_data(sweep: ImportedSweep, name: str) -> dict[str, Any]:
    """The study (as ``autotune.api.create_study(data=...)`` takes it) the sweep measured: its
    model, workloads, concurrency levels, methods with the N and knobs it ran, and its source."""
    methods = method_entries(
        (
            (
                r.config.method,
                r.config.draft,
                r.config.num_speculative_tokens,
                tuple(sorted(r.config.method_params.items())),
            )
            for r in sweep.runs
        ),
        str(sweep.path),
    )
    return {
        "name": name,
        "description": f"imported from {sweep.tool} output {sweep.path}",
        "model": {"name": _model_name(sweep.model), "allow_rocm_mla_override": True},
        "workloads": list(dict.fromkeys(r.measurement.workload for r in sweep.runs)),
        "concurrency": sorted({r.measurement.concurrency for r in sweep.runs}),
        "methods": methods,
        "baseline": any(r.config.method == BASELINE for r in sweep.runs),
        "repeats": max(r.measurement.repeat for r in sweep.runs) + 1,
        "engine": {"kind": "imported", "tool": sweep.tool, "path": str(sweep.path)},
    }


def import_sweep(
    store: Store | None,
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
    """Read the sweep (:func:`read_sweep`), then write it as a landscape CSV (``landscape``) or
    as the finished study ``name`` (default: the sweep's folder or file name), its
    recommendations saved."""
    sweep = read_sweep(
        vllm_sweep=vllm_sweep,
        sglang_bench=sglang_bench,
        model=model,
        method=method,
        draft=draft,
        workload=workload,
    )
    if landscape is not None:
        if sweep.tool == SGLANG_BENCH:
            raise SpecError(
                "bench_speculative.py records no measurement time, which a landscape row needs "
                "(measure_s): import it into a study instead",
                source="--landscape",
            )
        if landscape.exists() and not force:
            raise SpecError(
                "exists; pass --force to overwrite it (nothing written)", source=str(landscape)
            )
        from autotune.engine.readers.landscape import write_landscape

        return Imported(
            sweep, landscape=landscape, rows=write_landscape(landscape, sweep.landscape_points())
        )
    assert store is not None
    from autotune.search.protocol import save_recommendations

    study = write_study(store, sweep, name or _default_name(sweep), replace)
    save_recommendations(store, study)
    return Imported(sweep, study=study)


def _default_name(sweep: ImportedSweep) -> str:
    stem = sweep.path.stem if sweep.path.is_file() else sweep.path.name
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in stem)[:60] or "imported"


def write_study(store: Store, sweep: ImportedSweep, name: str, replace: bool) -> StudyRecord:
    """Create the study and one complete trial per engine config, holding its lease."""
    from autotune.engine.resolution import engine_facts
    from autotune.spec.loader import resolve_study, validate
    from autotune.spec.study import StudySpec

    source = str(sweep.path)
    spec = validate(StudySpec, study_data(sweep, name), source)
    resolved = resolve_study(spec, source, engine=engine_facts())
    info = sweep.engine_info()
    by_config: dict[str, list[Any]] = defaultdict(list)
    for r in sweep.runs:
        by_config[r.config.key()].append(r)
    order = sorted(
        by_config.values(), key=lambda rs: (rs[0].config.method != BASELINE, rs[0].config.label())
    )
    store.ensure_optuna_schema()
    with store.lease(name) if replace else contextlib.nullcontext():
        record = store.create_study(
            name=name,
            description=resolved.spec.description,
            model_alias=resolved.model_alias,
            model=resolved.model,
            source=source,
            resolved_json=resolved.to_json(),
            replace=replace,
        )
        if replace:  # the replaced study's Optuna copy goes with it
            import optuna

            with contextlib.suppress(KeyError):
                optuna.delete_study(
                    study_name=record.optuna_study_name, storage=store.optuna_storage()
                )
    with store.lease(name):
        for runs in order:
            config = dataclasses.replace(runs[0].config, model=resolved.model)  # alias → target
            trial = store.start_trial(record, config, None)
            store.record_engine(trial, info)
            for r in sorted(
                runs,
                key=lambda r: (
                    r.measurement.workload,
                    r.measurement.concurrency,
                    r.measurement.repeat,
                ),
            ):
                store.add_measurement(trial, r.measurement, info, config)
            store.finish_trial(
                trial, state="complete", engine_seconds=sum(r.measurement.measure_s for r in runs)
            )
        store.set_study_status(name, "done")
    return store.get_study(name)
