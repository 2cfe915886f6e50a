"""Per-position acceptance a_i: pooling it over measured runs, and extending it past the longest.

vLLM accepts a draft as a prefix (position i counts only when 1..i-1 were accepted), so every
curve is non-increasing; pooling and extrapolation keep it that way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from autotune.perf.records import Point
from autotune.spec.methods import METHODS

AcceptanceLike = Sequence[float] | np.ndarray


def expected_accepted(a: AcceptanceLike, n: int) -> float:
    """E(N) = a_1 + ... + a_N, the expected accepted draft tokens per step."""
    arr = np.asarray(a, dtype=float)
    if n < 0:
        raise ValueError(f"N must be >= 0, got {n}")
    if n > arr.size:
        raise ValueError(f"acceptance is known for {arr.size} positions, not N={n}")
    return float(arr[:n].sum())


def mean_acceptance_length(a: AcceptanceLike, n: int) -> float:
    """1 + E(N): tokens per sequence per step, the bonus token included (vLLM's convention)."""
    return 1.0 + expected_accepted(a, n)


def pool_acceptance(runs: Iterable[tuple[AcceptanceLike, float]]) -> np.ndarray:
    """Pool (curve, weight) runs of one prefix-consistent drafter into one curve.

    a_1 is the weighted mean over runs; each later a_i is a_(i-1) times the pooled conditional
    rate sum(w·a_i) / sum(w·a_(i-1)) over the runs that reached position i. A short run then
    sharpens the early positions without dragging the tail of a long run towards its own
    (possibly noisier) a_1, and exactly consistent runs pool to themselves.
    """
    curves = [(np.asarray(a, dtype=float), float(w)) for a, w in runs]
    curves = [(a, w) for a, w in curves if a.size > 0 and w > 0]
    if not curves:
        return np.zeros(0)
    length = max(a.size for a, _ in curves)
    out = np.zeros(length)
    for i in range(length):
        reach = [(a, w) for a, w in curves if a.size > i]
        num = sum(w * a[i] for a, w in reach)
        if i == 0:
            out[0] = num / sum(w for _, w in reach)
            continue
        den = sum(w * a[i - 1] for a, w in reach)
        rate = num / den if den > 0 else 0.0
        out[i] = out[i - 1] * min(max(rate, 0.0), 1.0)
    return out


def run_weight(acceptance: AcceptanceLike, num_repeats: int) -> float:
    """How much a run's a_i counts when pooling: its repeats times its drafts per output token.

    Without ``num_drafts`` in a point, a run of the same workload makes about
    output_tokens / (1 + E(N)) drafts per sequence, so a longer N measures each position on fewer
    drafts.
    """
    return num_repeats / (1.0 + float(np.sum(acceptance)))


def geometric_tail(curve: np.ndarray) -> float:
    """The per-position decay used to extend a curve: a_L / a_(L-1), or a_1 for one position."""
    if curve.size >= 2:
        rate = curve[-1] / curve[-2] if curve[-2] > 0 else 0.0
    elif curve.size == 1:
        rate = curve[0]
    else:
        raise ValueError("cannot extend an empty acceptance curve")
    return float(min(max(rate, 0.0), 1.0))


def extend_acceptance(curve: AcceptanceLike, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(center, low, high) of a_1..a_N from a measured curve.

    Measured positions are exact. Past them the center decays geometrically at the curve's tail
    rate; the bounds are 0 (nothing more accepted) and the last measured a_i (a prefix-accepted
    curve cannot rise).
    """
    known = np.asarray(curve, dtype=float)
    if n <= known.size:
        head = known[:n].copy()
        return head, head.copy(), head.copy()
    rate = geometric_tail(known)
    extra = n - known.size
    center = np.concatenate([known, known[-1] * rate ** np.arange(1, extra + 1)])
    low = np.concatenate([known, np.zeros(extra)])
    high = np.concatenate([known, np.full(extra, known[-1])])
    return center, low, high


def acceptance_curve(
    points: Iterable[Point],
    method: str,
    *,
    concurrency: int | None = None,
    num_speculative_tokens: int | None = None,
) -> np.ndarray:
    """Pooled a_1..a_Nmax of ``method`` over the measured points (one concurrency if given).

    For prefix-consistent drafters every run contributes to the positions it reached. For the
    others a run's a_i holds only for its own N, so only runs at ``num_speculative_tokens``
    (default: the largest measured N) are pooled.
    """
    rule = METHODS.get(method)
    runs = [
        p
        for p in points
        if p.method == method
        and p.acceptance_per_pos
        and (concurrency is None or p.concurrency == concurrency)
    ]
    if rule is None or not rule.prefix_consistent:
        if not runs:
            return np.zeros(0)
        n = num_speculative_tokens
        if n is None:
            n = max(p.num_speculative_tokens for p in runs)
        runs = [p for p in runs if p.num_speculative_tokens == n]
    return pool_acceptance(
        (p.acceptance_per_pos, run_weight(p.acceptance_per_pos, p.num_repeats)) for p in runs
    )
