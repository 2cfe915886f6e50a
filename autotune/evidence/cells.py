"""Which measurements are evidence for a level: cells and levels, the newest prompt set, and
the baseline's runs and drift.

A cell is a (workload, concurrency) with measurements; only the workload's newest prompt set
(:func:`latest_digest`) counts there, so older prompt sets never mix with it. :class:`Evidence`
applies that rule once to a study's rows (the one place it is applied) and hands out cells;
every reader of the rows (choosing, SLOs, goodput, drift, reports, observe, verify, export, the
search) takes its rows from it. The baseline runs
twice per level with the drift check (the first and the last engine of a study): its median in
each run is :func:`baseline_runs`, and how far it moved between them is :class:`Drift`.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

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
class Evidence:
    """A study's rows of each workload's newest prompt set, built once (:meth:`of`), with its
    cells: what every rule reads instead of the raw rows."""

    rows: tuple[MeasuredRow, ...]
    """The measurements of each workload's newest prompt set, in the given order."""
    digests: Mapping[str, str]
    """Workload -> its newest prompt set's digest."""
    by_cell: Mapping[tuple[str, int], tuple[MeasuredRow, ...]] = field(repr=False)

    @classmethod
    def of(cls, rows: Iterable[MeasuredRow] | Evidence) -> Evidence:
        """The evidence in ``rows`` (itself when already built)."""
        if isinstance(rows, Evidence):
            return rows
        rows = list(rows)
        digests = {}
        for w in {r.workload for r in rows}:
            d = latest_digest(rows, w)
            if d is not None:
                digests[w] = d
        kept = tuple(r for r in rows if digests.get(r.workload) == r.workload_digest)
        grouped: dict[tuple[str, int], list[MeasuredRow]] = defaultdict(list)
        for r in kept:
            grouped[(r.workload, r.concurrency)].append(r)
        return cls(kept, digests, {k: tuple(v) for k, v in grouped.items()})

    def digest(self, workload: str) -> str | None:
        return self.digests.get(workload)

    def workload(self, workload: str) -> list[MeasuredRow]:
        """Every current measurement of ``workload``."""
        return [r for r in self.rows if r.workload == workload]

    def cell(self, workload: str, concurrency: int) -> tuple[MeasuredRow, ...]:
        """The current measurements of one (workload, concurrency)."""
        return self.by_cell.get((workload, concurrency), ())

    def cells(self) -> list[tuple[str, int]]:
        return sorted(self.by_cell)


Rows: TypeAlias = Sequence["MeasuredRow"] | Evidence
"""What the rules accept: a study's rows, or the :class:`Evidence` built from them once."""


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
    rows: Rows, value: Callable[[MeasuredRow], float | None] | None = None
) -> list[Drift]:
    """Every level where the baseline ran twice (current prompt sets only), sorted; by output
    throughput, or by ``value`` per measurement (a study's objective: None leaves a measurement
    out)."""
    evidence = Evidence.of(rows)
    out = []
    for workload, concurrency in evidence.cells():
        runs = baseline_runs(evidence.cell(workload, concurrency), value)
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
