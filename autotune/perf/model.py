"""The fitted performance model: acceptance × step cost → predicted throughput, with ranges.

:meth:`PerfModel.fit` takes the measured points of one (model, workload); the tuner asks it which
engine configs could still beat the incumbent and which one is predicted best.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from autotune.perf.acceptance import (
    acceptance_curve,
    extend_acceptance,
    geometric_tail,
    pool_acceptance,
    run_weight,
)
from autotune.perf.cost import StepCost, StepSample, fit_step_cost
from autotune.perf.prefix import PrefixRatio
from autotune.perf.records import UNKNOWN, Point, Prediction
from autotune.spec.methods import BASELINE, METHODS


@dataclass(frozen=True)
class _Cell:
    """All points of one (method, N, concurrency), merged."""

    throughput_tok_s: float
    half_width: float
    acceptance: tuple[float, ...]
    num_repeats: int


def _merge(group: list[Point]) -> tuple[float, float | None, tuple[float, ...], int]:
    repeats = np.array([p.num_repeats for p in group], dtype=float)
    tput = np.array([p.output_throughput_tok_s for p in group])
    center = float(np.sum(repeats * tput) / np.sum(repeats))
    widths = [p.spread / 2 for p in group if p.num_repeats > 1 or p.spread > 0]
    if len(group) > 1:
        # Separate points of one cell are repeats too: their range is a spread.
        widths.append(float(tput.max() - tput.min()) / (2 * center))
    half_width = max(widths) if widths else None
    with_acc = [p for p in group if p.acceptance_per_pos]
    acc: tuple[float, ...] = ()
    if with_acc:
        w = np.array([p.num_repeats for p in with_acc], dtype=float)
        a = np.array([p.acceptance_per_pos for p in with_acc])
        acc = tuple(float(x) for x in (w[:, None] * a).sum(axis=0) / w.sum())
    return center, half_width, acc, int(repeats.sum())


class PerfModel:
    """Predicts output throughput of (method, N, concurrency) from measured points.

    Build it with :meth:`fit`; it is immutable afterwards. Points must come from one model and
    one workload.
    """

    def __init__(self, cells: Mapping[tuple[str, int, int], _Cell]) -> None:
        self._cells = dict(cells)
        self._costs: dict[tuple[str, int], StepCost | None] = {}
        self._predictions: dict[tuple[str, int, int], Prediction] = {}
        """(method, N, c) -> its prediction: the model is immutable, so each is made once."""
        self._curves: dict[tuple[str, int | None], np.ndarray] = {}
        """(method, concurrency) -> its pooled acceptance curve (handed out as copies)."""

    @classmethod
    def fit(cls, points: Iterable[Point], *, noise_floor: float = 0.0) -> PerfModel:
        """Fit the model to measured points.

        ``noise_floor`` is the smallest relative half-width any throughput is trusted to. A
        single-repeat point without a spread borrows the median half-width of the points that
        have one, or gets ``noise_floor`` when none has.

        The same points (in the same order) and floor give the same model, so a recent fit of
        them is returned again with the predictions it made (a search refits after every
        measurement, and most of its models' points did not change).
        """
        if noise_floor < 0:
            raise ValueError("noise_floor must be >= 0")
        return _fit(tuple(points), float(noise_floor))

    @classmethod
    def _fit_new(cls, points: tuple[Point, ...], noise_floor: float) -> PerfModel:
        groups: dict[tuple[str, int, int], list[Point]] = defaultdict(list)
        for p in points:
            groups[(p.method, p.num_speculative_tokens, p.concurrency)].append(p)
        merged = {key: _merge(group) for key, group in groups.items()}
        known = [m[1] for m in merged.values() if m[1] is not None]
        fallback = float(np.median(known)) if known else noise_floor
        cells = {
            key: _Cell(tput, max(fallback if h is None else h, noise_floor), acc, repeats)
            for key, (tput, h, acc, repeats) in merged.items()
        }
        return cls(cells)

    # --- what was measured -------------------------------------------------------------------

    @property
    def methods(self) -> tuple[str, ...]:
        """The speculative methods with at least one point (the baseline excluded)."""
        return tuple(sorted({m for m, _, _ in self._cells if m != BASELINE}))

    @property
    def concurrencies(self) -> tuple[int, ...]:
        return tuple(sorted({c for _, _, c in self._cells}))

    def measured_num_speculative_tokens(self, method: str) -> tuple[int, ...]:
        return tuple(sorted({n for m, n, _ in self._cells if m == method}))

    def acceptance_curve(self, method: str, concurrency: int | None = None) -> np.ndarray:
        """Pooled a_1..a_Nmax of ``method`` (see :func:`autotune.perf.acceptance_curve`)."""
        key = (method, concurrency)
        if key not in self._curves:
            self._curves[key] = acceptance_curve(self._as_points(), method, concurrency=concurrency)
        return self._curves[key].copy()

    # --- predictions -------------------------------------------------------------------------

    def predict(self, method: str, num_speculative_tokens: int, concurrency: int) -> Prediction:
        """Throughput of (method, N, concurrency): measured if it was, predicted otherwise.

        N = 0 is the baseline whatever the method (the Dynamic SD convention).
        """
        n, c = num_speculative_tokens, concurrency
        if method == BASELINE and n != 0:
            raise ValueError(f"the baseline has N = 0, not {n}")
        if n < 0 or c < 1:
            raise ValueError(f"N must be >= 0 and concurrency >= 1, got N={n}, c={c}")
        key = (method, n, c)
        made = self._predictions.get(key)
        if made is None:
            made = self._predictions[key] = self._predict(method, n, c)
        return made

    def _predict(self, method: str, n: int, c: int) -> Prediction:
        base = self._cells.get((BASELINE, 0, c))
        if n == 0:
            if base is None:
                return UNKNOWN
            return self._measured(base, base)
        cell = self._cells.get((method, n, c))
        if cell is not None:
            return self._measured(cell, base)
        acc = self._acceptance(method, n, c)
        cost = self._cost(method, c)
        if acc is None or cost is None:
            return UNKNOWN
        (e_mid, e_lo, e_hi), (center, fits) = acc, cost
        t_mid = center.step_s(n)
        ranges = [f.step_range_s(n) for f in fits]
        t_lo, t_hi = min(r[0] for r in ranges), max(r[1] for r in ranges)
        tput = c * (1 + e_mid) / t_mid
        return Prediction(
            throughput_tok_s=tput,
            low=min(c * (1 + e_lo) / t_hi, tput),
            high=max(c * (1 + e_hi) / t_lo, tput),
            speedup_vs_baseline=tput / base.throughput_tok_s if base else None,
            measured=False,
            mean_acceptance_length=1 + e_mid,
        )

    def step_time_s(
        self, method: str, num_speculative_tokens: int, concurrency: int
    ) -> tuple[float, float, float] | None:
        """The fitted t_step(N, c) in seconds as (center, low, high); None when unknown."""
        cost = self._cost(method, concurrency)
        if cost is None:
            return None
        center, fits = cost
        ranges = [f.step_range_s(num_speculative_tokens) for f in fits]
        mid = center.step_s(num_speculative_tokens)
        return mid, min(r[0] for r in ranges), max(r[1] for r in ranges)

    def best(
        self, concurrency: int, candidates: Mapping[str, Iterable[int]] | None = None
    ) -> tuple[str, int, Prediction]:
        """The (method, N, prediction) with the highest predicted throughput at ``concurrency``.

        ``candidates`` maps a method to the N values to consider; by default every N from 1 to
        the largest measured one for prefix-consistent drafters, and the measured N for the
        others. The baseline is a candidate whenever it was measured at this concurrency.
        """
        if candidates is None:
            candidates = {m: self._default_n(m) for m in self.methods}
        pairs = [(m, n) for m, ns in candidates.items() if m != BASELINE for n in ns if n > 0]
        if (BASELINE, 0, concurrency) in self._cells:
            pairs.append((BASELINE, 0))
        scored = [(m, n, self.predict(m, n, concurrency)) for m, n in pairs]
        scored = [s for s in scored if s[2].known]
        if not scored:
            raise ValueError(f"nothing to predict at concurrency {concurrency}")
        return max(scored, key=lambda s: (s[2].throughput_tok_s, s[2].measured, -s[1]))

    def could_beat(
        self,
        method: str,
        num_speculative_tokens: int,
        concurrency: int,
        incumbent_tok_s: float,
        noise_pct: float,
    ) -> bool:
        """Whether (method, N) may still beat the incumbent by more than the noise.

        True when the prediction's upper bound exceeds incumbent × (1 + noise_pct / 100), and
        always when the model knows nothing about the cell.
        """
        pred = self.predict(method, num_speculative_tokens, concurrency)
        if not pred.known:
            return True
        return pred.high > incumbent_tok_s * (1 + noise_pct / 100)

    # --- internals ---------------------------------------------------------------------------

    def _measured(self, cell: _Cell, base: _Cell | None) -> Prediction:
        tput, h = cell.throughput_tok_s, cell.half_width
        return Prediction(
            throughput_tok_s=tput,
            low=tput * max(1 - h, 0.0),
            high=tput * (1 + h),
            speedup_vs_baseline=tput / base.throughput_tok_s if base else None,
            measured=True,
            mean_acceptance_length=1 + sum(cell.acceptance) if cell.acceptance else None,
        )

    def _as_points(self) -> list[Point]:
        return [
            Point(m, n, c, cell.throughput_tok_s, cell.acceptance, cell.num_repeats)
            for (m, n, c), cell in self._cells.items()
        ]

    def _default_n(self, method: str) -> list[int]:
        measured = self.measured_num_speculative_tokens(method)
        if _prefix_consistent(method):
            return list(range(1, max(measured) + 1))
        return list(measured)

    def _acceptance(self, method: str, n: int, c: int) -> tuple[float, float, float] | None:
        """(center, low, high) of E(N) at concurrency c.

        A run at N measures a_1..a_N for that N only: another N follows another decoding
        trajectory, so its a_i lies within the method's ``prefix_ratio`` of the run's (fitted
        from the recorded sweeps). Runs at N itself are used when there are any; otherwise the
        bounds widen by that ratio, so a smaller N that may accept more stays in reach.
        """
        runs = [
            (key, cell) for key, cell in self._cells.items() if key[0] == method and cell.acceptance
        ]
        ratio = _prefix_ratio(method)
        if not _prefix_consistent(method):
            measured_n = sorted({key[1] for key, _ in runs})
            if not measured_n:
                return None
            if n not in measured_n:
                # a_i of another N does not carry over: center on the nearest measured N (the
                # longer on a tie); the bounds are the method's fitted ratio where it has one,
                # else anything from no acceptance to full.
                nearest = min(measured_n, key=lambda m: (abs(m - n), -m))
                pooled = _pool([cell for key, cell in runs if key[1] == nearest])
                center, low, high = extend_acceptance(pooled, n)
                if ratio == (1.0, 1.0):
                    return float(center.sum()), 0.0, float(n)
                lo_m, hi_m = _ratio_bounds(ratio, [nearest], n)
                low, high = low * lo_m, np.minimum(high * hi_m, 1.0)
                return float(center.sum()), float(low.sum()), float(high.sum())
            runs = [(key, cell) for key, cell in runs if key[1] == n]
        widen: tuple[float, float] | None = None
        same_n = [(key, cell) for key, cell in runs if key[1] == n]
        if same_n:
            runs = same_n
        elif runs and ratio != (1.0, 1.0):
            widen = _ratio_bounds(ratio, [key[1] for key, _ in runs], n)
        by_c: dict[int, list[_Cell]] = defaultdict(list)
        for key, cell in runs:
            by_c[key[2]].append(cell)
        pooled_all = _pool([cell for _, cell in runs])
        if pooled_all.size == 0:
            return None
        per_c = {cc: _pool(cells) for cc, cells in by_c.items()}
        own = per_c.get(c, np.zeros(0))
        mid, lo, hi = np.zeros(n), np.zeros(n), np.zeros(n)
        for i in range(n):
            if i < own.size:
                # Measured at this concurrency: exact (throughput noise dominates).
                mid[i] = lo[i] = hi[i] = own[i]
            elif i < pooled_all.size:
                # Measured at other concurrencies only: their spread bounds the value.
                if i == 0:
                    firsts = [cv[0] for cv in per_c.values()]
                    mid[0], lo[0], hi[0] = pooled_all[0], min(firsts), max(firsts)
                    continue
                rates = [_rate(cv, i) for cv in per_c.values() if cv.size > i]
                mid[i] = mid[i - 1] * _rate(pooled_all, i)
                lo[i], hi[i] = lo[i - 1] * min(rates), hi[i - 1] * max(rates)
            else:
                # Past every measured position: geometric center, bounds 0 and the last a_i.
                mid[i] = mid[i - 1] * geometric_tail(pooled_all)
                lo[i], hi[i] = 0.0, hi[i - 1]
        if widen is not None:
            lo *= widen[0]
            hi = np.minimum(hi * widen[1], 1.0)
        return float(mid.sum()), float(lo.sum()), float(hi.sum())

    def _cost(self, method: str, c: int) -> tuple[StepCost, list[StepCost]] | None:
        """The step-cost line at c and every line whose range counts: (center, fits)."""
        direct = self._direct_cost(method, c)
        if direct is not None:
            return direct, [direct]
        # Not measured at c: carry the step-time ratio to the baseline over from the measured
        # concurrencies (nearest in log c for the center, all of them for the range).
        base = self._baseline_step(c)
        if base is None:
            return None
        borrowed: list[tuple[int, StepCost]] = []
        for other in self.concurrencies:
            fit, other_base = self._direct_cost(method, other), self._baseline_step(other)
            if fit is not None and other_base is not None:
                borrowed.append((other, fit.scaled(base[0] / other_base[0])))
        if not borrowed:
            return None
        nearest = min(borrowed, key=lambda x: (abs(math.log(x[0] / c)), -x[0]))
        return nearest[1], [fit for _, fit in borrowed]

    def _direct_cost(self, method: str, c: int) -> StepCost | None:
        key = (method, c)
        if key not in self._costs:
            self._costs[key] = self._fit_cost(method, c)
        return self._costs[key]

    def _fit_cost(self, method: str, c: int) -> StepCost | None:
        samples = [
            StepSample(
                num_speculative_tokens=n,
                step_s=c * (1 + sum(cell.acceptance)) / cell.throughput_tok_s,
                half_width=cell.half_width,
                weight=cell.num_repeats,
            )
            for (m, n, cc), cell in self._cells.items()
            if m == method and cc == c and cell.acceptance
        ]
        if not samples:
            return None
        base = self._baseline_step(c)
        share = 0.0
        if len({s.num_speculative_tokens for s in samples}) == 1:
            share = self._fixed_share(method, c, samples[0], base)
        return _step_cost(
            tuple(samples), base[0] if base else None, base[1] if base else 0.0, share
        )

    def _fixed_share(
        self, method: str, c: int, sample: StepSample, base: tuple[float, float] | None
    ) -> float:
        """With one N at c: which part of the extra step cost is fixed (a prior or a donor)."""
        n1 = sample.num_speculative_tokens
        if base is None:
            # Nothing anchors N -> 0: split evenly; the range spans every split.
            return 0.5
        # Shared shape: a concurrency where two or more N were measured fixes the split there.
        donors: list[tuple[int, float]] = []
        for other in self.concurrencies:
            other_base = self._baseline_step(other)
            ns = {n for m, n, cc in self._cells if m == method and cc == other}
            if other == c or other_base is None or len(ns) < 2:
                continue
            fit = self._direct_cost(method, other)
            if fit is None:
                continue
            fixed = max(fit.fixed_s - other_base[0], 0.0)
            total = fixed + fit.per_token_s * n1
            if total > 0:
                donors.append((other, fixed / total))
        if donors:
            return min(donors, key=lambda d: (abs(math.log(d[0] / c)), -d[0]))[1]
        if not _parallel_draft(method):
            # Chain drafter: one draft step per token, so the extra cost scales with N.
            return 0.0
        # Parallel drafter: the draft pass is fixed; only verification grows with N, estimated
        # from how the baseline's step grows with the number of tokens in the batch.
        extra = sample.step_s - base[0]
        slope = self._verify_slope(c, n1)
        if slope is None or extra <= 0:
            return 1.0
        return min(max(1.0 - slope * n1 / extra, 0.0), 1.0)

    def _verify_slope(self, c: int, n: int) -> float | None:
        """Per-N verification cost at c from the baseline: (g(c·(N+1)) - g(c)) / N.

        g(b) is the baseline step time with b sequences (piecewise linear, extended with its
        last slope). It overstates verification a little (the extra query tokens of one
        sequence share its KV reads), which keeps the prior on the cautious side.
        """
        steps = sorted(
            (cc, c_step[0])
            for cc in self.concurrencies
            if (c_step := self._baseline_step(cc)) is not None
        )
        if len(steps) < 2:
            return None
        xs = np.array([s[0] for s in steps], dtype=float)
        ys = np.array([s[1] for s in steps])

        def g(b: float) -> float:
            if b <= xs[-1]:
                return float(np.interp(b, xs, ys))
            last = max((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]), 0.0)
            return float(ys[-1] + (b - xs[-1]) * last)

        return max(g(c * (n + 1)) - g(c), 0.0) / n

    def _baseline_step(self, c: int) -> tuple[float, float] | None:
        """(t_base(c) = c / T_baseline(c), its relative half-width) or None."""
        cell = self._cells.get((BASELINE, 0, c))
        if cell is None:
            return None
        return c / cell.throughput_tok_s, cell.half_width


@functools.lru_cache(maxsize=1024)
def _fit(points: tuple[Point, ...], noise_floor: float) -> PerfModel:
    """:meth:`PerfModel.fit`, the recent fits kept (a model is immutable, so it is shared)."""
    return PerfModel._fit_new(points, noise_floor)


@functools.lru_cache(maxsize=4096)
def _step_cost(
    samples: tuple[StepSample, ...], baseline_s: float | None, half_width: float, share: float
) -> StepCost:
    """:func:`fit_step_cost`, the recent fits kept: models refitted after a measurement
    elsewhere keep most of their (method, concurrency) samples."""
    fit = fit_step_cost(
        samples, baseline_s=baseline_s, baseline_half_width=half_width, fixed_share=share
    )
    fit.vertices.flags.writeable = False  # shared by every model that asks again
    return fit


def _pool(cells: list[_Cell]) -> np.ndarray:
    """The cells' pooled acceptance (read-only: it is shared, see :func:`_pooled`)."""
    return _pooled(tuple(cells))


@functools.lru_cache(maxsize=4096)
def _pooled(cells: tuple[_Cell, ...]) -> np.ndarray:
    curve = pool_acceptance(
        (cell.acceptance, run_weight(cell.acceptance, cell.num_repeats)) for cell in cells
    )
    curve.flags.writeable = False
    return curve


def _rate(curve: np.ndarray, i: int) -> float:
    return float(curve[i] / curve[i - 1]) if curve[i - 1] > 0 else 0.0


def _prefix_consistent(method: str) -> bool:
    rule = METHODS.get(method)
    return rule.prefix_consistent if rule else False


def _prefix_ratio(method: str) -> tuple[float, float]:
    rule = METHODS.get(method)
    return rule.prefix_ratio if rule else (1.0, 1.0)


def _ratio_bounds(ratio: tuple[float, float], run_ns: Iterable[int], n: int) -> tuple[float, float]:
    """Multipliers taking the a_i of runs at ``run_ns`` to the range of N = ``n``'s a_i: the
    fitted ratio from a larger-N run, its inverse from a smaller-N run, both when runs of both
    sides are pooled."""
    fit = PrefixRatio(ratio[0], ratio[1], 0)
    sides = [fit.bounds(from_larger=m > n) for m in set(run_ns) if m != n]
    if not sides:
        return 1.0, 1.0
    return min(s[0] for s in sides), max(s[1] for s in sides)


def _parallel_draft(method: str) -> bool:
    rule = METHODS.get(method)
    return rule.parallel_draft if rule else False
