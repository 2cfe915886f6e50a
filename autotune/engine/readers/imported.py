"""A sweep another tool ran, read into autotune's records: one engine config and one measurement
per recorded run, with where it came from (``autotune import``; the readers are
:mod:`autotune.engine.readers.vllm_sweep` and :mod:`autotune.engine.readers.sglang_bench`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.engine._base import EngineConfig, EngineInfo, Measurement
from autotune.engine.readers.landscape import LandscapePoint
from autotune.errors import SpecError
from autotune.spec.knobs import ALL_DRAFTING, check_value

VLLM_SWEEP = "vllm bench sweep serve"
SGLANG_BENCH = "sglang bench_speculative.py"


@dataclass(frozen=True)
class ImportedRun:
    """One recorded run: the engine config it ran on and what it measured."""

    config: EngineConfig
    measurement: Measurement


@dataclass(frozen=True)
class ImportedSweep:
    """Every run of one imported sweep, and its provenance."""

    tool: str
    """:data:`VLLM_SWEEP` or :data:`SGLANG_BENCH`."""
    label: str
    """The reading reader's short name of its tool (``sweep``, ``sglang``): the stored
    provenance reads ``imported LABEL:NAME`` in place of a vLLM version."""
    path: Path
    """The sweep directory or result file, absolute."""
    model: str
    runs: tuple[ImportedRun, ...]

    def engine_info(self) -> EngineInfo:
        """The provenance stored with every imported measurement: the tool and the source in
        place of a vLLM version and a device (neither tool records them)."""
        return EngineInfo(
            engine_start_s=0.0,
            vllm_version=f"imported {self.label}:{self.path.name}"[:64],
            device_name=f"{self.tool} output {self.path}"[:256],
            device_arch="imported",
            platform="imported",
        )

    def landscape_points(self) -> list[LandscapePoint]:
        """The runs as landscape rows (docs/landscapes.md). Neither tool records an engine start
        time: ``engine_start_s`` is 0."""
        return [
            LandscapePoint(
                model=self.model,
                workload=r.measurement.workload,
                method=r.config.method,
                draft=r.config.draft,
                num_speculative_tokens=r.config.num_speculative_tokens,
                concurrency=r.measurement.concurrency,
                repeat=r.measurement.repeat,
                output_throughput_tok_s=r.measurement.output_throughput_tok_s,
                mean_acceptance_length=r.measurement.mean_acceptance_length,
                acceptance_per_pos=r.measurement.acceptance_per_pos,
                engine_start_s=0.0,
                measure_s=r.measurement.measure_s,
                params=tuple(sorted(r.config.method_params.items())),
                p99_tpot_ms=r.measurement.p99_tpot_ms,
                p99_ttft_ms=r.measurement.p99_ttft_ms,
                p99_itl_ms=r.measurement.p99_itl_ms,
            )
            for r in self.runs
        ]


def config_from_speculative(
    model: str, spec: Any, *, source: str, field: str = "speculative_config"
) -> EngineConfig:
    """The engine config of a ``--speculative-config`` dict (None or empty: the baseline).
    Raises SpecError naming ``source`` and the field on what autotune cannot map."""
    if not spec:
        return EngineConfig(model=model)
    if not isinstance(spec, dict):
        raise SpecError(
            f"must be a JSON object, not {type(spec).__name__}", source=source, field=field
        )
    method = spec.get("method")
    if method not in ALL_DRAFTING:
        known = ", ".join(sorted(ALL_DRAFTING))
        raise SpecError(
            f"method {method!r} is not one autotune maps (known: {known})",
            source=source,
            field=f"{field}.method",
        )
    n = spec.get("num_speculative_tokens")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise SpecError(
            "missing or not a positive integer",
            source=source,
            field=f"{field}.num_speculative_tokens",
        )
    draft = spec.get("model")
    if draft is not None and not isinstance(draft, str):
        raise SpecError("must be a string", source=source, field=f"{field}.model")
    params = {
        k: v
        for k, v in sorted(spec.items())
        if k not in ("method", "model", "num_speculative_tokens")
    }
    for key, value in params.items():
        why = check_value(key, value, str(method))
        if why is not None:
            raise SpecError(why, source=source, field=f"{field}.{key}")
    return EngineConfig(
        model=model, method=str(method), num_speculative_tokens=n, draft=draft, method_params=params
    )


def check_cells(runs: list[ImportedRun], source: str) -> None:
    """Refuse a sweep with two runs for the same (config, workload, concurrency, repeat): it
    varied something autotune does not map (a serve or bench parameter besides the speculative
    config, the dataset and the concurrency), and mixing them would average unlike runs."""
    seen = Counter(
        (
            r.config.key(),
            r.measurement.workload,
            r.measurement.concurrency,
            r.measurement.repeat,
        )
        for r in runs
    )
    dup = next((cell for cell, n in seen.items() if n > 1), None)
    if dup is not None:
        label = next(r.config.label() for r in runs if r.config.key() == dup[0])
        raise SpecError(
            f"two runs of {label} on {dup[1]} at concurrency {dup[2]}, repeat {dup[3]}: the sweep "
            "varies a parameter autotune does not map (import one setting of it at a time)",
            source=source,
        )
