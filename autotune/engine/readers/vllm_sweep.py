"""Read the output of ``vllm bench sweep serve`` (vllm/benchmarks/sweep/serve.py, vLLM 0.32) into
:class:`~autotune.engine.readers.imported.ImportedSweep` records, with vLLM's own sweep code.

The sweep writes, under ``OUTPUT_DIR/EXPERIMENT_NAME/``, one folder per (serve, bench) parameter
combination (``SERVE-<name>-BENCH-<name>``) holding ``run=<i>.json`` per run and
``summary.json``, the list of those runs once the combination finished. Each run is the result
``vllm bench serve --save-result`` wrote, updated with ``run_number`` and the combination's serve
and bench overrides (``serve._update_run_data``). This reader finds the ``summary.json`` files
and loads them exactly as ``vllm bench sweep plot`` does (``plot._json_load_bytes``,
``plot._convert_inf_nan_strings``) and looks keys up as ``plot_pareto._first_present`` does
(``speculative_config`` or ``speculative-config``). A combination without a ``summary.json`` did
not finish and is left out, as vLLM's plots leave it out.

Mapping: the serve override ``speculative_config`` (method, ``model``, ``num_speculative_tokens``
and knobs) is the engine config, none is the baseline; ``max_concurrency`` is the concurrency
level; the workload is ``--workload`` or the bench override ``dataset_name``; ``run_number`` is
the repeat. The measurement is
:func:`autotune.engine.server.bench.measurement_from_bench` of the run, the same mapping the
``client: server`` engine uses (output_throughput, median/p99 TTFT, TPOT,
ITL, and the spec-decode counters the benchmark read from ``/metrics``). The result JSON records
neither the vLLM version, the device nor the engine start time.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from autotune.engine._base import PreparedWorkload
from autotune.engine.readers.imported import (
    VLLM_SWEEP,
    ImportedRun,
    ImportedSweep,
    check_cells,
    config_from_speculative,
)
from autotune.errors import SpecError

SUMMARY = "summary.json"
"""The file ``vllm bench sweep serve`` writes per finished combination (``_get_comb_run_path``)."""

RESULT_KEYS = ("output_throughput", "duration", "completed")
"""Keys every run must have (``vllm bench serve``'s result)."""

NOT_PROMPT_SET = frozenset(
    {"max_concurrency", "request_rate", "burstiness", "_benchmark_name", "run_number"}
)
"""Bench overrides that do not change the prompt set (the rest go into the workload digest)."""


def read_vllm_sweep(
    path: Path | str, *, workload: str | None = None, model: str | None = None
) -> ImportedSweep:
    """Every finished run under ``path`` (an experiment directory or the ``--output-dir`` above
    it). Raises SpecError naming the file and field on anything that is not a sweep's output."""
    from vllm.benchmarks.sweep.plot import _convert_inf_nan_strings, _json_load_bytes

    root = Path(path).resolve()
    if not root.is_dir():
        raise SpecError(
            "not a directory (give the output folder of vllm bench sweep serve)", source=str(path)
        )
    files = sorted(root.rglob(f"**/{SUMMARY}"))
    if not files:
        raise SpecError(
            f"no {SUMMARY} under it: not the output of vllm bench sweep serve (or no combination "
            "finished)",
            source=str(path),
        )
    runs: list[ImportedRun] = []
    models: set[str] = set()
    for file in files:
        try:
            data = _json_load_bytes(file)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SpecError(f"not JSON: {exc}", source=str(file)) from None
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise SpecError(
                "not a list of run results (vllm bench sweep serve's summary)", source=str(file)
            )
        for i, run in enumerate(_convert_inf_nan_strings(data)):
            imported = _run(run, f"{file}", f"[{i}]", workload, model)
            models.add(imported.config.model)
            runs.append(imported)
    if len(models) > 1:
        raise SpecError(
            f"runs of several models ({', '.join(sorted(models))}): import one at a time",
            source=str(path),
            field="model_id",
        )
    check_cells(runs, str(path))
    return ImportedSweep(
        tool=VLLM_SWEEP, label="sweep", path=root, model=models.pop(), runs=tuple(runs)
    )


def _run(
    run: dict[str, Any], source: str, at: str, workload: str | None, model: str | None
) -> ImportedRun:
    from vllm.benchmarks.sweep.plot_pareto import _first_present

    from autotune.engine.server.bench import measurement_from_bench

    for key in RESULT_KEYS:
        if not isinstance(run.get(key), (int, float)) or isinstance(run.get(key), bool):
            raise SpecError("missing or not a number", source=source, field=f"{at}.{key}")
    concurrency = run.get("max_concurrency")
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise SpecError(
            "missing or not a positive integer (autotune compares configs at a fixed "
            "--max-concurrency)",
            source=source,
            field=f"{at}.max_concurrency",
        )
    repeat = run.get("run_number")
    if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 0:
        raise SpecError("missing or not a run number", source=source, field=f"{at}.run_number")
    target = model or run.get("model_id")
    if not isinstance(target, str) or not target:
        raise SpecError("missing (or give --model)", source=source, field=f"{at}.model_id")
    name = workload or _first_present(run, ["dataset_name"])
    if not isinstance(name, str) or not name:
        raise SpecError(
            "not recorded (the dataset was given in --bench-cmd, not --bench-params): name the "
            "workload with --workload",
            source=source,
            field=f"{at}.dataset_name",
        )
    spec = _first_present(run, ["speculative_config"])
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError:
            raise SpecError("not JSON", source=source, field=f"{at}.speculative_config") from None
    config = config_from_speculative(target, spec, source=source, field=f"{at}.speculative_config")
    prompt_set = {k: v for k, v in sorted(run.items()) if k in _bench_keys(run)}
    blob = json.dumps(
        [name, target, run.get("num_prompts"), prompt_set], sort_keys=True, default=str
    )
    prepared = PreparedWorkload(
        name=name,
        digest=f"vllm-sweep:{hashlib.sha256(blob.encode()).hexdigest()[:16]}",
        prompts=(),
    )
    measurement = measurement_from_bench(
        run,
        prepared,
        concurrency=concurrency,
        repeat=repeat,
        seed=int(run.get("seed") or 0),
        num_requests=int(run["completed"]),
    )
    return ImportedRun(config=config, measurement=measurement)


DATASET_PREFIXES = ("dataset", "random", "sharegpt", "custom", "sonnet", "hf", "prefix")
"""``vllm bench serve`` dataset flags (``--random-input-len``, ``--dataset-path``, ...)."""


def _bench_keys(run: dict[str, Any]) -> set[str]:
    """Dataset overrides a sweep may vary (``--bench-params``): kept apart in the digest."""
    return {
        k
        for k in run
        if k not in NOT_PROMPT_SET and k.replace("-", "_").split("_")[0] in DATASET_PREFIXES
    }
