"""The margin rule the search decides by (issue #31): two configs within 1 % are a tie; beyond
it, where the 95 % interval of the ratio of their medians still contains 1, the level is
undecided (more repeats may settle it); else decided. One small function, search-local until the
shared rule in :mod:`autotune.evidence` replaces it (the interval is ``ConfigScore.ties_with``'s)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Literal

from autotune.evidence.scores import median_ci_halfwidth_pct

TIE_BAND_PCT = 1.0
"""Margins within this are a tie, whatever the repeats say (vLLM's tuner, PR #49163: 1 %)."""

Verdict = Literal["tie", "undecided", "decided"]


def verdict(a: Sequence[float], b: Sequence[float]) -> Verdict:
    """How two configs' repeats at one level (throughputs, tok/s) compare: margin =
    median(a) / median(b) - 1; ``tie`` when |margin| <= 1 %, ``undecided`` when beyond 1 % the
    95 % interval of the ratio of the medians contains 1, else ``decided``."""
    ma, mb = statistics.median(a), statistics.median(b)
    if ma <= 0 or mb <= 0:
        return "decided"
    if abs(ma / mb - 1.0) <= TIE_BAND_PCT / 100.0:
        return "tie"
    width = math.hypot(_ci_log(a), _ci_log(b))
    return "undecided" if width > 0 and abs(math.log(ma / mb)) <= width else "decided"


def _ci_log(throughputs: Sequence[float]) -> float:
    """Half-width of the 95 % interval of the median in log units, as ``ConfigScore.ci_log``."""
    if len(throughputs) < 2 or any(t <= 0 for t in throughputs):
        return 0.0
    return math.log1p(median_ci_halfwidth_pct(throughputs) / 100.0)
