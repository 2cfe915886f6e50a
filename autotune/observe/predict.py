"""What the live traffic's acceptance means for the choice of N: the study's perf model
(``autotune.perf``) fitted to the study's measurements, its step cost t_step(N, c) kept, and the
acceptance of the deployed method replaced by the one the server's counters show.

    T(N, c) = c · (1 + E_live(N)) / t_step(N, c)

Each N of the deployed method (and the baseline, N = 0) is predicted at every concurrency level
the study measured; the levels count by the share of the window the server spent nearest to
them (``vllm:num_requests_running``, nearest in log c). The gain of a config is the
traffic-weighted geometric mean of its throughput over the deployed config's, both at the live
acceptance; its range comes from the model's ranges (every step-cost line the measurements
allow, and the acceptance bounds past the positions the server drafted). Other methods are not
predicted: the server shows the acceptance of its own method only.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.evidence.objectives import geometric_mean
from autotune.evidence.points import point
from autotune.perf import PerfModel, Point, extend_acceptance, pool_acceptance
from autotune.spec.methods import BASELINE, METHODS


@dataclass(frozen=True)
class Candidate:
    """One N of the deployed method (0: speculation off), predicted for the live traffic."""

    num_speculative_tokens: int
    per_level: Mapping[int, tuple[float, float, float]]
    """concurrency -> predicted tok/s (center, low, high)."""
    gain: float
    """Traffic-weighted geometric mean of tok/s over the deployed config's, minus 1."""
    gain_low: float
    gain_high: float


@dataclass(frozen=True)
class LivePrediction:
    method: str
    deployed_n: int
    weights: Mapping[int, float]
    """Study concurrency level -> share of the busy window nearest to it."""
    candidates: tuple[Candidate, ...]
    best: Candidate
    dsd_table: tuple[tuple[int, int, int], ...]
    """``num_speculative_tokens_per_batch_size`` rows [lo, hi, N] predicted best per level."""
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "deployed_num_speculative_tokens": self.deployed_n,
            "level_weights": {str(c): w for c, w in self.weights.items()},
            "best_num_speculative_tokens": self.best.num_speculative_tokens,
            "predicted_gain": self.best.gain,
            "predicted_gain_range": [self.best.gain_low, self.best.gain_high],
            "num_speculative_tokens_per_batch_size": [list(r) for r in self.dsd_table],
            "candidates": [
                {
                    "num_speculative_tokens": c.num_speculative_tokens,
                    "gain": c.gain,
                    "gain_range": [c.gain_low, c.gain_high],
                    "per_level_tok_s": {str(k): list(v) for k, v in c.per_level.items()},
                }
                for c in self.candidates
            ],
            "notes": list(self.notes),
        }


def family_points(rows: Sequence[Any], method: str) -> list[Point]:
    """Model points of the deployed family (its rows, any N) and the baseline: per (N,
    concurrency) the median throughput, the spread and the pooled a_i of the repeats."""
    groups: dict[tuple[int, int], list[Any]] = defaultdict(list)
    for r in rows:
        if r.output_throughput_tok_s > 0:
            groups[(r.num_speculative_tokens if r.speculative_config else 0, r.concurrency)].append(
                r
            )
    return [point(group, method, n) for (n, _), group in sorted(groups.items())]


def study_acceptance(points: Sequence[Point], method: str, n: int) -> tuple[float, ...]:
    """The study's a_1..a_n of the family: its runs at exactly n pooled, else (prefix-consistent
    drafters) the positions of every longer run."""
    exact = [p for p in points if p.method == method and p.num_speculative_tokens == n]
    runs = exact or [
        p
        for p in points
        if p.method == method and p.num_speculative_tokens >= n and _prefix(method)
    ]
    curve = pool_acceptance(
        (p.acceptance_per_pos, float(p.num_repeats)) for p in runs if p.acceptance_per_pos
    )
    return tuple(float(a) for a in curve[:n])


def level_weights(busy: Mapping[int, float], levels: Sequence[int]) -> dict[int, float]:
    """Each running-request count's share, moved to the nearest study level in log c."""
    out: dict[int, float] = {c: 0.0 for c in levels}
    for running, share in busy.items():
        nearest = min(levels, key=lambda c: (abs(math.log(c / running)), c))
        out[nearest] += share
    return {c: w for c, w in out.items() if w > 0}


def predict_live(
    points: Sequence[Point],
    method: str,
    deployed_n: int,
    live_acceptance: Sequence[float],
    busy: Mapping[int, float],
) -> LivePrediction:
    """Every N of ``method`` (and off) at the live acceptance, for the live traffic mix."""
    model = PerfModel.fit(points)
    levels = [c for c in model.concurrencies if model.step_time_s(method, deployed_n, c)]
    if not levels or not busy:
        raise ValueError("nothing to predict: no measured level or no busy sample")
    weights = level_weights(busy, levels)
    notes: list[str] = []
    measured_n = model.measured_num_speculative_tokens(method)
    ns = list(range(1, max(max(measured_n), deployed_n) + 1)) if _prefix(method) else [deployed_n]
    if not _prefix(method):
        notes.append(f"{method} drafts all positions at once: only N={deployed_n} is predicted")
    curve = list(live_acceptance)

    def acc(n: int) -> tuple[float, float, float]:
        center, low, high = extend_acceptance(curve, n)
        return float(center.sum()), float(low.sum()), float(high.sum())

    def at(n: int, c: int) -> tuple[float, float, float] | None:
        if n == 0:
            p = model.predict(BASELINE, 0, c)
            return (p.throughput_tok_s, p.low, p.high) if p.known else None
        step = model.step_time_s(method, n, c)
        if step is None:
            return None
        (t, t_lo, t_hi), (e, e_lo, e_hi) = step, acc(n)
        mid = c * (1 + e) / t
        return mid, min(c * (1 + e_lo) / t_hi, mid), max(c * (1 + e_hi) / t_lo, mid)

    deployed = {c: at(deployed_n, c) for c in levels}
    ref = {c: d[0] for c, d in deployed.items() if d is not None}
    if any(c not in ref for c in weights):
        raise ValueError(f"the study's measurements predict no {method} N={deployed_n}")

    def gmean(values: Mapping[int, tuple[float, float, float]], i: int) -> float:
        ratios = [max(values[c][i], 1e-12) / ref[c] for c in weights]
        return geometric_mean(ratios, list(weights.values())) - 1.0

    candidates = []
    for n in [0, *ns]:
        per = {c: v for c in levels if (v := at(n, c)) is not None}
        if any(c not in per for c in weights):
            continue
        if n == deployed_n:
            candidates.append(Candidate(n, per, 0.0, 0.0, 0.0))
        else:
            candidates.append(Candidate(n, per, gmean(per, 0), gmean(per, 1), gmean(per, 2)))
    best = max(candidates, key=lambda c: (round(c.gain, 6), -c.num_speculative_tokens))
    table: list[tuple[int, int]] = []
    for c in levels:
        scored = [cand for cand in candidates if c in cand.per_level]
        if scored:
            top = max(scored, key=lambda k: (k.per_level[c][0], -k.num_speculative_tokens))
            table.append((c, top.num_speculative_tokens))
    from autotune.recommend.render import ranges

    dsd = tuple((r[0], r[1], r[2]) for r in ranges(table))
    return LivePrediction(method, deployed_n, weights, tuple(candidates), best, dsd, tuple(notes))


def _prefix(method: str) -> bool:
    rule = METHODS.get(method)
    return bool(rule and rule.prefix_consistent)
