"""How far a drafter's acceptance at one N predicts its acceptance at another: the prefix ratio.

A chain drafter's token at position i does not depend on N, but the decoding trajectory does: a
different N accepts different tokens, so the target continues from other text and the drafter
sees other contexts. Recorded sweeps show it (the tiny Llama's n-gram on code accepts
a_1 = 0.771 at N = 1 and 0.707 at N = 4). This module fits, per method, the range of
``a_i(N) / a_i(N')`` for N < N' over every (config, workload, concurrency) a sweep measured at
both, so the performance model can widen its bounds by what the data shows instead of assuming
an exact prefix. Pure numpy; the reading of landscape files stays with the caller.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PrefixRatio:
    """The range of ``a_i(N) / a_i(N')`` (N < N') one method showed over recorded sweeps."""

    low: float
    """Smallest ratio seen (< 1: the smaller N accepted less than the larger N's run)."""
    high: float
    """Largest ratio seen (> 1: the smaller N accepted more)."""
    pairs: int
    """How many (position, N, N') comparisons the range rests on."""

    def bounds(self, from_larger: bool) -> tuple[float, float]:
        """Multipliers that take a run's a_i to the range of another N's a_i: from a larger-N
        run as fitted, from a smaller-N run the inverse."""
        if from_larger:
            return self.low, self.high
        return 1.0 / self.high, 1.0 / self.low

    def rounded(self) -> PrefixRatio:
        """Outward to two decimals, as the method table states it."""
        return PrefixRatio(
            math.floor(self.low * 100) / 100, math.ceil(self.high * 100) / 100, self.pairs
        )


Run = tuple[str, Hashable, int, Sequence[float], int]
"""(method, cell key, N, a_1..a_N, repeats): one measured point; the cell key groups what must
match for two runs to compare (config knobs, workload, concurrency)."""


def fit_prefix_ratios(runs: Iterable[Run], min_acceptance: float = 0.05) -> dict[str, PrefixRatio]:
    """Per method, the range of a_i(N) / a_i(N') over every cell measured at both N < N'.

    Repeats of one (cell, N) are pooled first (their mean a_i), so the range reflects the
    trajectory effect and acceptance noise together, as the model meets them. Positions whose
    larger-N acceptance is below ``min_acceptance`` carry no usable ratio and are skipped.
    """
    pooled: dict[tuple[str, Hashable, int], list[np.ndarray]] = defaultdict(list)
    for method, cell, n, acceptance, repeats in runs:
        if n < 1 or len(acceptance) < n:
            continue
        curve = np.asarray(acceptance[:n], dtype=float)
        pooled[(method, cell, n)].extend([curve] * max(1, repeats))
    means = {key: np.mean(np.stack(curves), axis=0) for key, curves in pooled.items()}
    ratios: dict[str, list[float]] = defaultdict(list)
    for (method, cell, n), small in means.items():
        for (method2, cell2, n2), large in means.items():
            if method2 != method or cell2 != cell or n2 <= n:
                continue
            for i in range(n):
                if large[i] >= min_acceptance:
                    ratios[method].append(float(small[i] / large[i]))
    return {
        method: PrefixRatio(min(values), max(values), len(values))
        for method, values in sorted(ratios.items())
    }
