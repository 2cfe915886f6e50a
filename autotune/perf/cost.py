"""Step cost at one concurrency: t_step(N) = fixed_s + per_token_s · N, fitted from measured points.

Besides the best line, a fit keeps every line the measurements allow (the feasible polygon in
(fixed_s, per_token_s)), so a prediction's range is exactly what the data cannot rule out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Relative tolerance when testing polygon vertices against the constraints (float round-off).
_TOL = 1e-9


@dataclass(frozen=True)
class StepSample:
    """One measured engine config at this concurrency: its N and observed step time."""

    num_speculative_tokens: int
    step_s: float
    """c · (1 + E(N)) / throughput, with the run's own E(N)."""
    half_width: float
    """Relative half-width of the throughput (half the repeats' spread, or the noise floor)."""
    weight: float


@dataclass(frozen=True)
class StepCost:
    """t_step(N) = fixed_s + per_token_s · N, and the vertices of every line the data allow."""

    fixed_s: float
    per_token_s: float
    vertices: np.ndarray
    """(k, 2) array of (fixed_s, per_token_s) corners of the feasible polygon."""

    def step_s(self, n: float) -> float:
        return self.fixed_s + self.per_token_s * n

    def step_range_s(self, n: float) -> tuple[float, float]:
        values = self.vertices @ np.array([1.0, float(n)])
        return float(values.min()), float(values.max())

    def scaled(self, factor: float) -> StepCost:
        return StepCost(self.fixed_s * factor, self.per_token_s * factor, self.vertices * factor)


def _band(step_s: float, half_width: float) -> tuple[float, float]:
    # Throughput within ±h of its center puts the step time within [t/(1+h), t/(1-h)].
    h = min(half_width, 0.9)
    return step_s / (1.0 + h), step_s / (1.0 - h)


def _weighted_line(
    ns: np.ndarray, t: np.ndarray, w: np.ndarray, floor_s: float
) -> tuple[float, float]:
    """Least squares in relative error, subject to fixed_s >= floor_s and per_token_s >= 0."""
    rw = w / t**2

    def loss(a: float, b: float) -> float:
        return float(np.sum(rw * (a + b * ns - t) ** 2))

    candidates: list[tuple[float, float]] = []
    design = np.stack([np.ones_like(ns), ns], axis=1) * np.sqrt(rw)[:, None]
    sol, *_ = np.linalg.lstsq(design, t * np.sqrt(rw), rcond=None)
    if sol[0] >= floor_s and sol[1] >= 0:
        return float(sol[0]), float(sol[1])
    # The optimum lies on an active constraint: try each edge (clamped) and keep the best.
    b_edge = float(np.sum(rw * (t - floor_s) * ns) / np.sum(rw * ns**2))
    candidates.append((floor_s, max(b_edge, 0.0)))
    a_edge = float(np.sum(rw * t) / np.sum(rw))
    candidates.append((max(a_edge, floor_s), 0.0))
    return min(candidates, key=lambda ab: loss(*ab))


def _vertices(g: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Corners of the polygon {x : g @ x <= h} in two dimensions (empty if infeasible)."""
    tol = _TOL * max(float(np.abs(h).max()), 1e-300)
    found = []
    for i in range(len(h)):
        for j in range(i + 1, len(h)):
            m = g[[i, j]]
            det = m[0, 0] * m[1, 1] - m[0, 1] * m[1, 0]
            if abs(det) < 1e-12:
                continue
            x = np.linalg.solve(m, h[[i, j]])
            if np.all(g @ x <= h + tol):
                found.append(x)
    return np.array(found).reshape(-1, 2)


def fit_step_cost(
    samples: Sequence[StepSample],
    *,
    baseline_s: float | None,
    baseline_half_width: float = 0.0,
    fixed_share: float = 0.0,
) -> StepCost:
    """Fit t_step(N) = fixed_s + per_token_s · N at one concurrency.

    A speculative step does the baseline's work and more: fixed_s >= t_base (0 without a
    baseline) and per_token_s >= 0. With two or more distinct N the line is a weighted least
    squares fit; with one N, ``fixed_share`` says which part of the extra cost over the floor
    is fixed (0: all per token, the chain-drafter prior; 1: all fixed). The feasible polygon
    honours every sample's throughput band and the baseline's.
    """
    if not samples:
        raise ValueError("fit_step_cost needs at least one sample")
    ns = np.array([s.num_speculative_tokens for s in samples], dtype=float)
    t = np.array([s.step_s for s in samples])
    w = np.array([s.weight for s in samples])
    floor_s = baseline_s if baseline_s is not None else 0.0
    if np.unique(ns).size >= 2:
        fixed, per_token = _weighted_line(ns, t, w, floor_s)
    else:
        # One N: the step time there is the weighted mean; the split is a prior.
        t1, n1 = float(np.sum(w * t) / np.sum(w)), float(ns[0])
        extra = t1 - floor_s
        if extra <= 0:
            fixed, per_token = t1, 0.0
        else:
            share = min(max(fixed_share, 0.0), 1.0)
            fixed, per_token = floor_s + share * extra, (1.0 - share) * extra / n1

    floor_lo = floor_s
    if baseline_s is not None:
        floor_lo = _band(baseline_s, baseline_half_width)[0]
    rows: list[tuple[float, float, float]] = [(-1.0, 0.0, -floor_lo), (0.0, -1.0, 0.0)]
    for s in samples:
        lo, hi = _band(s.step_s, s.half_width)
        rows.append((1.0, float(s.num_speculative_tokens), hi))
        rows.append((-1.0, -float(s.num_speculative_tokens), -lo))
    g = np.array([r[:2] for r in rows])
    h = np.array([r[2] for r in rows])
    # Widen each constraint just enough to admit the fitted line, so the range always holds the
    # center. It only bites when the bands disagree with the fit (noise beyond the stated
    # spread, or a cost that is not linear in N).
    h = np.maximum(h, g @ np.array([fixed, per_token]))
    return StepCost(fixed, per_token, _vertices(g, h))
