"""Two studies side by side (`autotune compare A B`): per (workload, concurrency) each study's
answer, its speedup and confidence, and what changed from A to B beyond the measured noise.

A change is judged by the one rule recommend judges by (:func:`autotune.evidence.decide.verdict`):
each side's median carries a 95% Student-t interval on log values
(:func:`autotune.evidence.scores.median_ci_halfwidth_pct`), and a change is *beyond noise* when
it is decided: past the 1 % tie band, with the 95% interval of the ratio B/A excluding 1. A *regression* is a
fall beyond noise and beyond ``tolerance_pct``: of the throughput and the speedup (over each
study's own "off") of the config A answers, or of the mean acceptance length of any drafter
measured in both. Acceptance is a ratio of counters (exact at temperature 0), speedup a ratio of
two medians from the same machine, so those two stay meaningful across machines; throughput does
not (compare H200 with MI300X by speedup and acceptance, not tok/s).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.evidence.cells import Evidence, Rows
from autotune.evidence.decide import halfwidth_log, margin_pct, verdict
from autotune.evidence.scores import STATABLE_PCT, ConfigScore
from autotune.spec.methods import config_id

if TYPE_CHECKING:
    from autotune.recommend.choose import Choice
    from autotune.store.records import MeasurementRecord as MeasuredRow

DEFAULT_TOLERANCE_PCT = 5.0
"""How far a metric may fall (beyond noise) before `compare` calls it a regression."""

METRICS = ("output_throughput_tok_s", "speedup_vs_off", "mean_acceptance_length")


@dataclass(frozen=True)
class Change:
    """One metric of one config at one cell, in A and in B."""

    metric: str
    """One of :data:`METRICS`."""
    config: str
    a: float
    b: float
    halfwidth_pct: float
    """± percent of the 95% interval of the ratio b / a (``inf``: a side has one value)."""
    tolerance_pct: float

    @property
    def change_pct(self) -> float:
        return margin_pct(self.b, self.a) if self.a > 0 else math.inf

    @property
    def undecided(self) -> bool:
        """Whether the interval is too wide to state (the ties' rule, ``STATABLE_PCT``)."""
        return not math.isfinite(self.halfwidth_pct) or self.halfwidth_pct > STATABLE_PCT

    @property
    def beyond_noise(self) -> bool:
        """Whether the one rule decides B from A (:func:`autotune.evidence.decide.verdict`):
        beyond the 1 % tie band, with the ratio's 95% interval excluding 1 (an exact counter
        ratio, interval 0, changes on any difference past the band)."""
        if self.undecided or self.a <= 0 or self.b <= 0:
            return False
        contains_one = abs(math.log(self.b / self.a)) <= math.log1p(self.halfwidth_pct / 100.0)
        return verdict(margin_pct(self.b, self.a), contains_one) == "decided"

    @property
    def regression(self) -> bool:
        return self.beyond_noise and self.change_pct < -self.tolerance_pct

    def cell(self) -> str:
        """``-3.2% ±1.1`` (``*`` beyond noise, ``!`` a regression), or ``... undecided``."""
        noise = "undecided" if self.undecided else f"±{self.halfwidth_pct:.1f}"
        mark = "!" if self.regression else "*" if self.beyond_noise else ""
        return f"{self.change_pct:+.1f}% {noise}{mark}"

    def as_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "config": self.config,
            "a": round(self.a, 6),
            "b": round(self.b, 6),
            "change_pct": round(self.change_pct, 3),
            "within_pct": None if self.undecided else round(self.halfwidth_pct, 3),
            "undecided": self.undecided,
            "beyond_noise": self.beyond_noise,
            "regression": self.regression,
        }


@dataclass(frozen=True)
class Side:
    """One study's answer at one cell."""

    choice: Choice
    low_confidence: tuple[str, ...]

    @property
    def answer(self) -> str:
        return self.choice.best.label()

    def as_json(self) -> dict[str, Any]:
        c = self.choice
        return {
            "answer": c.best.label(),
            "speculative_config": c.best.speculative_config,
            "output_throughput_tok_s": round(c.best.median_tok_s, 3),
            "speedup_vs_off": None if c.speedup is None else round(c.speedup, 4),
            "mean_acceptance_length": c.best.mean_acceptance_length,
            "acceptance_per_pos": [round(a, 4) for a in c.best.acceptance_per_pos],
            "tie": c.tie,
            "low_confidence": list(self.low_confidence),
        }


@dataclass(frozen=True)
class CellComparison:
    workload: str
    concurrency: int
    a: Side
    b: Side
    changes: tuple[Change, ...]
    acceptance: dict[str, tuple[tuple[float, ...], tuple[float, ...]]]
    """Per drafter measured in both (by label): its acceptance per position in A and in B."""

    @property
    def answer_changed(self) -> bool:
        return config_id(self.a.choice.best.speculative_config) != config_id(
            self.b.choice.best.speculative_config
        )

    @property
    def regressions(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.regression)

    def change(self, metric: str, config: str) -> Change | None:
        return next((c for c in self.changes if (c.metric, c.config) == (metric, config)), None)

    def as_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "concurrency": self.concurrency,
            "a": self.a.as_json(),
            "b": self.b.as_json(),
            "answer_changed": self.answer_changed,
            "acceptance_per_pos": {
                k: {"a": [round(x, 4) for x in a], "b": [round(x, 4) for x in b]}
                for k, (a, b) in self.acceptance.items()
            },
            "changes": [c.as_json() for c in self.changes],
            "regression": bool(self.regressions),
        }


@dataclass(frozen=True)
class Comparison:
    """`autotune compare A B`: every cell measured by both studies."""

    study_a: str
    study_b: str
    tolerance_pct: float
    cells: tuple[CellComparison, ...]
    only_a: tuple[tuple[str, int], ...]
    only_b: tuple[tuple[str, int], ...]

    @property
    def regressions(self) -> tuple[tuple[CellComparison, Change], ...]:
        return tuple((c, r) for c in self.cells for r in c.regressions)

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.study_a,
            "b": self.study_b,
            "tolerance_pct": self.tolerance_pct,
            "cells": [c.as_json() for c in self.cells],
            "only_in_a": [{"workload": w, "concurrency": c} for w, c in self.only_a],
            "only_in_b": [{"workload": w, "concurrency": c} for w, c in self.only_b],
            "regression": bool(self.regressions),
        }


def _cell_rows(rows: Rows, workload: str, level: int) -> list[MeasuredRow]:
    return list(Evidence.of(rows).cell(workload, level))


def _acceptance_lengths(rows: Sequence[MeasuredRow]) -> list[float]:
    return [m for r in rows if (m := r.mean_acceptance_length) is not None]


def _change(metric: str, config: str, a: Sequence[float], b: Sequence[float], tol: float) -> Change:
    width = math.hypot(halfwidth_log(a), halfwidth_log(b))
    return Change(
        metric=metric,
        config=config,
        a=statistics.median(a),
        b=statistics.median(b),
        halfwidth_pct=100.0 * math.expm1(width) if math.isfinite(width) else math.inf,
        tolerance_pct=tol,
    )


def _speedup_change(
    config: str,
    same: tuple[ConfigScore, ConfigScore],
    off: tuple[ConfigScore, ConfigScore],
    tol: float,
) -> Change:
    """The speedup over off of one config in A and B: a ratio of ratios, whose interval combines
    all four medians' (each side's speedup is two medians from one machine)."""
    width = math.sqrt(sum(halfwidth_log(s.throughputs) ** 2 for s in (*same, *off)))
    return Change(
        metric="speedup_vs_off",
        config=config,
        a=same[0].median_tok_s / off[0].median_tok_s,
        b=same[1].median_tok_s / off[1].median_tok_s,
        halfwidth_pct=100.0 * math.expm1(width) if math.isfinite(width) else math.inf,
        tolerance_pct=tol,
    )


def _score_of(choice: Choice, key: str) -> ConfigScore | None:
    return next(
        (s for s in (*choice.ranked, *choice.screened) if config_id(s.speculative_config) == key),
        None,
    )


def compare_cell(
    workload: str,
    level: int,
    rows_a: Rows,
    rows_b: Rows,
    spreads: tuple[float, float],
    tolerance_pct: float,
) -> CellComparison | None:
    """One cell of both studies (None: a side has no usable measurements there)."""
    from autotune.recommend.choose import choose

    ca, cb = choose(rows_a, workload, level), choose(rows_b, workload, level)
    if ca is None or cb is None:
        return None
    cell_a, cell_b = _cell_rows(rows_a, workload, level), _cell_rows(rows_b, workload, level)
    by_a: dict[str, list[MeasuredRow]] = defaultdict(list)
    by_b: dict[str, list[MeasuredRow]] = defaultdict(list)
    for r in cell_a:
        by_a[config_id(r.speculative_config)].append(r)
    for r in cell_b:
        by_b[config_id(r.speculative_config)].append(r)
    changes: list[Change] = []
    answer_key = config_id(ca.best.speculative_config)
    label = ca.best.label()
    if answer_key in by_b:
        changes.append(
            _change(
                "output_throughput_tok_s",
                label,
                [r.output_throughput_tok_s for r in by_a[answer_key]],
                [r.output_throughput_tok_s for r in by_b[answer_key]],
                tolerance_pct,
            )
        )
        same_b = _score_of(cb, answer_key)
        if not ca.best.is_baseline and ca.baseline and cb.baseline and same_b is not None:
            changes.append(
                _speedup_change(label, (ca.best, same_b), (ca.baseline, cb.baseline), tolerance_pct)
            )
    acceptance: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {}
    for key in sorted(by_a.keys() & by_b.keys()):
        sa, sb = _score_of(ca, key), _score_of(cb, key)
        if sa is None or sb is None or sa.is_baseline:
            continue
        ala, alb = _acceptance_lengths(by_a[key]), _acceptance_lengths(by_b[key])
        if ala and alb:
            acceptance[sa.label()] = (sa.acceptance_per_pos, sb.acceptance_per_pos)
            changes.append(_change("mean_acceptance_length", sa.label(), ala, alb, tolerance_pct))
    from autotune.evidence.scores import DEFAULT_PRECISION_PCT

    return CellComparison(
        workload=workload,
        concurrency=level,
        a=Side(ca, ca.low_confidence(spreads[0], DEFAULT_PRECISION_PCT)),
        b=Side(cb, cb.low_confidence(spreads[1], DEFAULT_PRECISION_PCT)),
        changes=tuple(changes),
        acceptance=acceptance,
    )


def compare_rows(
    study_a: str,
    rows_a: Rows,
    study_b: str,
    rows_b: Rows,
    *,
    spreads: tuple[float, float],
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT,
    workload: str | None = None,
) -> Comparison:
    """Compare every (workload, concurrency) both studies measured (``workload``: that one
    only); ``spreads`` are the studies' ``measurement.max_spread_pct`` (the low-confidence
    rule)."""
    ev_a, ev_b = Evidence.of(rows_a), Evidence.of(rows_b)
    cells_a = {c for c in ev_a.cells() if workload in (None, c[0])}
    cells_b = {c for c in ev_b.cells() if workload in (None, c[0])}
    out = []
    for w, level in sorted(cells_a & cells_b):
        cell = compare_cell(w, level, ev_a, ev_b, spreads, tolerance_pct)
        if cell is not None:
            out.append(cell)
    return Comparison(
        study_a=study_a,
        study_b=study_b,
        tolerance_pct=tolerance_pct,
        cells=tuple(out),
        only_a=tuple(sorted(cells_a - cells_b)),
        only_b=tuple(sorted(cells_b - cells_a)),
    )
