"""A study's measurements written as a landscape CSV (docs/landscapes.md), so a real sweep can be
replayed by the ``replay`` engine and the search benchmark. The measured p99 latencies go into
the landscape's latency columns (``p99_tpot_ms``, ``p99_ttft_ms``, ``p99_itl_ms``, vLLM's
spelling), so the replay is searched and chosen under the study's ``slo:`` as the original was."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import NoResultError

if TYPE_CHECKING:
    from autotune.store import Store


def export_landscape(store: Store, study: str, path: Path) -> int:
    """Write a study's measurements as a landscape CSV, so a real sweep can be replayed."""
    from autotune.engine.readers.landscape import LandscapePoint, write_landscape
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
            # the p99 latencies where measured: the exported landscape replays under an SLO
            p99_tpot_ms=r.p99_tpot_ms,
            p99_ttft_ms=r.p99_ttft_ms,
            p99_itl_ms=r.p99_itl_ms,
        )
        for r in rows
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_landscape(path, points)
