"""Which measurements are evidence for a level: cells and levels, the newest prompt set, and
the baseline's runs and drift.

A cell is a (workload, concurrency) with measurements; only the workload's newest prompt set
(:func:`latest_digest`) counts there, so older prompt sets never mix with it. The baseline runs
twice per level with the drift check (the first and the last engine of a study): its median in
each run is :func:`baseline_runs`, and how far it moved between them is :class:`Drift`.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.store.records import MeasurementRecord as MeasuredRow


def cells(rows: Iterable[MeasuredRow]) -> list[tuple[str, int]]:
    """The (workload, concurrency) cells present in ``rows``, sorted."""
    return sorted({(r.workload, r.concurrency) for r in rows})


def latest_digest(rows: Iterable[MeasuredRow], workload: str) -> str | None:
    """The prompt-set digest of the newest measurement of ``workload``: older prompt sets never
    mix with it."""
    newest = None
    for r in rows:
        if r.workload == workload and (newest is None or r.created_at >= newest.created_at):
            newest = r
    return newest.workload_digest if newest else None


@dataclass(frozen=True)
class Drift:
    """The baseline's drift at one level between its first and last run (the drift check)."""

    workload: str
    concurrency: int
    runs: tuple[float, ...]
    """Median throughput in each run (trial), oldest first."""

    @property
    def drift_pct(self) -> float:
        return 100.0 * (self.runs[-1] / self.runs[0] - 1.0) if self.runs[0] > 0 else 0.0

    def line(self, precision_pct: float) -> str:
        """One line for `report`."""
        over = abs(self.drift_pct) > precision_pct
        verdict = "over" if over else "within"
        return (
            f"baseline drift {self.workload} c={self.concurrency}: {self.drift_pct:+.1f}% "
            f"({self.runs[0]:,.1f} then {self.runs[-1]:,.1f} tok/s; {verdict} the study's "
            f"precision of ±{precision_pct:g}%{', low confidence' if over else ''})"
        )


def baseline_drift(
    rows: Sequence[MeasuredRow], value: Callable[[MeasuredRow], float | None] | None = None
) -> list[Drift]:
    """Every level where the baseline ran twice (current prompt sets only), sorted; by output
    throughput, or by ``value`` per measurement (a study's objective: None leaves a measurement
    out)."""
    out = []
    for workload, concurrency in cells(rows):
        digest = latest_digest(rows, workload)
        cell = [
            r
            for r in rows
            if (r.workload, r.concurrency, r.workload_digest) == (workload, concurrency, digest)
        ]
        runs = baseline_runs(cell, value)
        if len(runs) > 1:
            out.append(Drift(workload, concurrency, runs))
    return out


def baseline_runs(
    cell: Sequence[MeasuredRow], value: Callable[[MeasuredRow], float | None] | None = None
) -> tuple[float, ...]:
    """The baseline's median throughput in each trial that measured it at this cell, oldest
    trial first (two with the drift check). A confirmation start of the baseline
    (:mod:`autotune.search.confirm`) is left out: the drift stays the one the drift check
    measured, between the first engine of the study and the last of its search; the baseline's
    score pools every start."""
    by_trial: dict[int, list[float]] = defaultdict(list)
    for r in cell:
        if r.speculative_config is None and getattr(r, "purpose", None) != "confirm":
            v = r.output_throughput_tok_s if value is None else value(r)
            if v is not None:
                by_trial[r.trial_id].append(v)
    return tuple(statistics.median(by_trial[t]) for t in sorted(by_trial))
