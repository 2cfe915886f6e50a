"""One cell's measured repeats as a performance-model point (:class:`autotune.perf.Point`).

The model (:mod:`autotune.perf`) reads one point per (method, N, concurrency): the median
output throughput of the repeats, their relative spread and the acceptance a_i pooled over
their drafts (capped at 1). Rows whose acceptance does not cover every position (a run that
made no drafts) give the point no acceptance.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from autotune.perf import Point
from autotune.spec.methods import BASELINE

if TYPE_CHECKING:
    from autotune.store.records import MeasurementRecord as MeasuredRow


def point(group: Sequence[MeasuredRow], method: str, num_speculative_tokens: int) -> Point:
    """The repeats in ``group`` (one config at one concurrency, positive throughputs) as the
    model point of ``method`` at ``num_speculative_tokens`` (0: the baseline)."""
    n = num_speculative_tokens
    tputs = [r.output_throughput_tok_s for r in group]
    med = statistics.median(tputs)
    drafts = sum(r.num_drafts for r in group)
    acceptance: tuple[float, ...] = ()
    if n > 0 and drafts > 0 and all(len(r.accepted_per_pos) == n for r in group):
        acceptance = tuple(
            min(sum(r.accepted_per_pos[i] for r in group) / drafts, 1.0) for i in range(n)
        )
    return Point(
        method=BASELINE if n == 0 else method,
        num_speculative_tokens=n,
        concurrency=group[0].concurrency,
        output_throughput_tok_s=med,
        acceptance_per_pos=acceptance,
        num_repeats=len(tputs),
        spread=(max(tputs) - min(tputs)) / med,
    )
