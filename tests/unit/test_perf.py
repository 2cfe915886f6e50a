"""Unit tests of the acceptance × cost performance model against hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.perf import (
    PerfModel,
    Point,
    StepSample,
    acceptance_curve,
    expected_accepted,
    extend_acceptance,
    fit_step_cost,
    mean_acceptance_length,
)
from autotune.spec.methods import METHODS

# A known drafter and a known step cost: t_step(N) = T0_S + N · D_S at concurrency 1.
A = (0.8, 0.6, 0.4, 0.2)
T0_S = 0.010
D_S = 0.001


def exact_tput(n: int, c: int = 1, t0: float = T0_S, fixed: float = 0.0, d: float = D_S) -> float:
    """T = c · (1 + E(N)) / t_step(N), with t_step = t0 + fixed + N · d (fixed only for N > 0)."""
    step = t0 + (fixed if n > 0 else 0.0) + n * d
    return c * (1 + sum(A[:n])) / step


def chain_points(ns: tuple[int, ...], spread: float = 0.0, repeats: int = 1) -> list[Point]:
    pts = [Point("none", 0, 1, exact_tput(0), (), repeats, spread)]
    pts += [Point("eagle3", n, 1, exact_tput(n), A[:n], repeats, spread) for n in ns]
    return pts


# --- acceptance ---------------------------------------------------------------------------


def test_expected_accepted_and_acceptance_length():
    assert expected_accepted(A, 0) == 0.0
    assert expected_accepted(A, 3) == pytest.approx(0.8 + 0.6 + 0.4)
    assert mean_acceptance_length(A, 4) == pytest.approx(3.0)
    with pytest.raises(ValueError):
        expected_accepted(A, 5)


def test_acceptance_curve_pools_runs_by_position():
    # Two runs of a chain drafter that disagree: pooled a_1 is their weighted mean, and later
    # positions follow the pooled conditional rate of the runs that reached them.
    short, long_ = (0.9, 0.6), (0.7, 0.5, 0.3, 0.1)
    w_s, w_l = 1 / (1 + 1.5), 1 / (1 + 1.6)  # repeats / (1 + E): drafts per output token
    pts = [Point("eagle3", 2, 1, 100.0, short), Point("eagle3", 4, 1, 100.0, long_)]
    a1 = (w_s * 0.9 + w_l * 0.7) / (w_s + w_l)
    a2 = a1 * (w_s * 0.6 + w_l * 0.5) / (w_s * 0.9 + w_l * 0.7)
    a3 = a2 * 0.3 / 0.5
    a4 = a3 * 0.1 / 0.3
    np.testing.assert_allclose(acceptance_curve(pts, "eagle3"), [a1, a2, a3, a4])


def test_acceptance_curve_of_consistent_runs_is_exact():
    pts = [Point("mtp", 2, 1, 50.0, A[:2], 3), Point("mtp", 4, 8, 90.0, A, 1)]
    np.testing.assert_allclose(acceptance_curve(pts, "mtp"), A)
    np.testing.assert_allclose(acceptance_curve(pts, "mtp", concurrency=1), A[:2])


def test_non_prefix_consistent_method_pools_one_n_only():
    pts = [Point("suffix", 2, 1, 50.0, (0.9, 0.7)), Point("suffix", 4, 1, 60.0, A)]
    np.testing.assert_allclose(acceptance_curve(pts, "suffix"), A)
    at_two = acceptance_curve(pts, "suffix", num_speculative_tokens=2)
    np.testing.assert_allclose(at_two, (0.9, 0.7))


def test_extend_acceptance_past_the_longest_run():
    center, low, high = extend_acceptance(A, 6)
    # Geometric tail at the last rate a_4 / a_3 = 0.5; bounds are 0 and a_4.
    np.testing.assert_allclose(center, [*A, 0.1, 0.05])
    np.testing.assert_allclose(low, [*A, 0.0, 0.0])
    np.testing.assert_allclose(high, [*A, 0.2, 0.2])


# --- exact synthetic points ---------------------------------------------------------------


def best_n_by_marginal_rule(a: tuple[float, ...], t0: float, d: float) -> int:
    """Grow N while the next position's acceptance pays for its step cost.

    N -> N+1 helps iff (1 + E + a_(N+1)) / (t + d) > (1 + E) / t, i.e. a_(N+1) > d (1 + E) / t.
    """
    n, e = 0, 0.0
    while n < len(a) and a[n] > d * (1 + e) / (t0 + n * d):
        e += a[n]
        n += 1
    return n


def test_best_n_matches_the_marginal_rule():
    # By hand: a_3 = 0.4 > 1 ms · 2.4 / 12 ms = 0.2 (grow to 3); a_4 = 0.2 < 1 · 2.8 / 13 (stop).
    assert best_n_by_marginal_rule(A, T0_S, D_S) == 3
    model = PerfModel.fit(chain_points((4,)))
    method, n, pred = model.best(1)
    assert (method, n) == ("eagle3", 3)
    assert not pred.measured
    assert pred.throughput_tok_s == pytest.approx(2.8 / 0.013)


def test_exact_points_give_exact_predictions():
    # One run at N = 4 plus the baseline pins a chain drafter's line through t_base.
    model = PerfModel.fit(chain_points((4,)))
    for n in (1, 2, 3):
        pred = model.predict("eagle3", n, 1)
        assert pred.throughput_tok_s == pytest.approx(exact_tput(n), rel=1e-12)
        assert pred.low <= pred.throughput_tok_s <= pred.high
        assert pred.speedup_vs_baseline == pytest.approx(exact_tput(n) / exact_tput(0))
    step = model.step_time_s("eagle3", 2, 1)
    assert step is not None
    assert step[0] == pytest.approx(T0_S + 2 * D_S)


def test_prefix_consistency_run_at_n4_predicts_n2():
    model = PerfModel.fit(chain_points((4,)))
    pred = model.predict("eagle3", 2, 1)
    assert pred.mean_acceptance_length == pytest.approx(1 + 0.8 + 0.6)
    assert pred.throughput_tok_s == pytest.approx(2.4 / 0.012)


def test_baseline_speedup_is_one():
    model = PerfModel.fit(chain_points((4,)))
    base = model.predict("none", 0, 1)
    assert base.measured
    assert base.speedup_vs_baseline == 1.0
    assert base.throughput_tok_s == pytest.approx(100.0)
    # N = 0 switches speculation off whatever the method (Dynamic SD's convention).
    assert model.predict("eagle3", 0, 1) == base
    with pytest.raises(ValueError):
        model.predict("none", 2, 1)


def test_baseline_wins_when_speculation_is_too_costly():
    # Each token costs as much as a baseline step: N = 1 gives 1.8 / 2 = 0.9x.
    pts = [
        Point("none", 0, 4, exact_tput(0, c=4)),
        Point("eagle3", 4, 4, exact_tput(4, c=4, d=T0_S), A),
    ]
    method, n, pred = PerfModel.fit(pts).best(4)
    assert (method, n) == ("none", 0)
    assert pred.speedup_vs_baseline == 1.0


# --- parallel vs chain drafters -----------------------------------------------------------


def test_parallel_drafter_keeps_its_draft_cost_at_small_n():
    # The same measured point (N = 4, same throughput, same acceptance) for a chain drafter and
    # a parallel one. The chain's extra cost scales with N; the parallel drafter's draft pass is
    # fixed and, with a baseline at one concurrency only, no verification slope is known.
    t4 = exact_tput(4)
    pts = [
        Point("none", 0, 1, exact_tput(0)),
        Point("eagle3", 4, 1, t4, A),
        Point("dflash", 4, 1, t4, A),
    ]
    model = PerfModel.fit(pts)
    step4 = 3.0 / t4  # c (1 + E(4)) / T
    chain = model.predict("eagle3", 1, 1).throughput_tok_s
    parallel = model.predict("dflash", 1, 1).throughput_tok_s
    assert chain == pytest.approx(1.8 / (T0_S + (step4 - T0_S) / 4))
    assert parallel == pytest.approx(1.8 / step4)
    assert chain > parallel


def test_parallel_drafter_two_n_fit_centers_exactly_and_keeps_the_trajectory_range():
    # DFlash is not prefix-consistent: the center comes from the nearest measured N (exact on a
    # landscape built from one prefix curve), the range is the method's fitted prefix ratio.
    fixed, verify = 0.003, 0.0005  # draft pass, verification per token
    pts = [Point("none", 0, 1, exact_tput(0))]
    pts += [
        Point("dflash", n, 1, exact_tput(n, fixed=fixed, d=verify), A[:n], 3, 0.0) for n in (2, 4)
    ]
    model = PerfModel.fit(pts)
    low_ratio, high_ratio = METHODS["dflash"].prefix_ratio
    for n in (1, 3):
        pred = model.predict("dflash", n, 1)
        assert pred.throughput_tok_s == pytest.approx(exact_tput(n, fixed=fixed, d=verify))
        assert pred.low < pred.throughput_tok_s < pred.high
        # The acceptance bounds scale E(N) by at most the fitted range (and its inverse).
        assert pred.high / pred.throughput_tok_s < max(high_ratio, 1 / low_ratio) + 1e-9


def test_smaller_n_of_a_chain_drafter_is_bounded_by_the_fitted_prefix_ratio():
    # One eagle3 run at N = 4: N = 2's a_1, a_2 are the run's within the fitted ratio, so the
    # upper bound exceeds the prefix prediction and the lower bound falls below it.
    pts = [Point("none", 0, 1, exact_tput(0)), Point("eagle3", 4, 1, exact_tput(4), A, 3, 0.0)]
    pts.append(Point("eagle3", 3, 1, exact_tput(3), A[:3], 3, 0.0))
    model = PerfModel.fit(pts)
    pred = model.predict("eagle3", 2, 1)
    assert pred.low < pred.throughput_tok_s < pred.high
    # With a run at N itself the acceptance is that run's: no trajectory range on top.
    exact = PerfModel.fit([*pts, Point("eagle3", 2, 4, exact_tput(2), A[:2], 3, 0.0)])
    center, low, high = exact._acceptance("eagle3", 2, 4)
    assert low == pytest.approx(center) and high == pytest.approx(center)


def test_parallel_drafter_verification_prior_from_baseline_scaling():
    # Baseline steps 10 ms at c = 1 and 12 ms at c = 4, so verifying N = 3 extra tokens per
    # sequence at c = 1 (4 tokens in the batch) costs g(4) - g(1) = 2 ms, i.e. v = 2/3 ms per N.
    t_base1, t_base4 = 0.010, 0.012
    t3 = 0.015
    pts = [
        Point("none", 0, 1, 1 / t_base1),
        Point("none", 0, 4, 4 / t_base4),
        Point("dflash", 3, 1, 2.8 / t3, A[:3]),
    ]
    model = PerfModel.fit(pts)
    v = (t_base4 - t_base1) / 3
    expected_step1 = t3 - 2 * v  # same line through t(3), slope v
    pred = model.predict("dflash", 1, 1)
    assert pred.throughput_tok_s == pytest.approx(1.8 / expected_step1)


def test_one_n_borrows_the_split_fitted_at_another_concurrency():
    # At c = 1: t = 10 + 2 + 1 · N ms (fixed share at N = 4: 2 / (2 + 4) = 1/3).
    # At c = 8, only N = 4: t_base = 20 ms, t(4) = 29 ms -> same share -> t = 23 + 1.5 · N ms.
    def tput(n: int, c: int, step_ms: float) -> float:
        return c * (1 + sum(A[:n])) / (step_ms / 1000)

    pts = [
        Point("none", 0, 1, tput(0, 1, 10)),
        Point("eagle3", 2, 1, tput(2, 1, 14), A[:2]),
        Point("eagle3", 4, 1, tput(4, 1, 16), A),
        Point("none", 0, 8, tput(0, 8, 20)),
        Point("eagle3", 4, 8, tput(4, 8, 29), A),
    ]
    pred = PerfModel.fit(pts).predict("eagle3", 2, 8)
    assert pred.throughput_tok_s == pytest.approx(tput(2, 8, 26))


def test_unmeasured_concurrency_borrows_the_step_ratio():
    # eagle3 measured at c = 1 only; the baseline step doubles from c = 1 to c = 8.
    pts = [*chain_points((4,)), Point("none", 0, 8, 8 / (2 * T0_S))]
    model = PerfModel.fit(pts)
    pred = model.predict("eagle3", 2, 8)
    assert pred.throughput_tok_s == pytest.approx(8 * 2.4 / (2 * (T0_S + 2 * D_S)))
    assert not pred.measured


# --- uncertainty --------------------------------------------------------------------------


def test_uncertainty_shrinks_with_a_second_n_and_covers_the_truth():
    one = PerfModel.fit(chain_points((4,), spread=0.04, repeats=3)).predict("eagle3", 3, 1)
    two = PerfModel.fit(chain_points((2, 4), spread=0.04, repeats=3)).predict("eagle3", 3, 1)
    truth = exact_tput(3)
    for pred in (one, two):
        assert pred.low < truth < pred.high
    assert two.high - two.low < one.high - one.low


def test_range_with_one_n_spans_every_split_of_the_extra_cost():
    # No noise: at N = 2 the step lies between the all-per-token line (t_base + 2 d) and the
    # all-fixed one (t(4)); N = 2's a_1, a_2 are the N = 4 run's within eagle3's fitted prefix
    # ratio (another N follows another trajectory), so E(2) lies in 1.4 x [low, high].
    low, high = METHODS["eagle3"].prefix_ratio
    pred = PerfModel.fit(chain_points((4,))).predict("eagle3", 2, 1)
    assert pred.low == pytest.approx((1 + 1.4 * low) / (T0_S + 4 * D_S))
    assert pred.high == pytest.approx((1 + 1.4 * high) / (T0_S + 2 * D_S))


def test_extrapolated_n_uses_acceptance_bounds():
    pred = PerfModel.fit(chain_points((4,))).predict("eagle3", 5, 1)
    # Center: a_5 = 0.1 (geometric), t = t0 + 5 d. Low: a_5 = 0 and the dearest line. High:
    # a_5 = a_4 and the cheapest line (all cost fixed: t(5) = t(4)). A larger N than the run's
    # carries the inverse of the fitted prefix ratio on top.
    low, high = METHODS["eagle3"].prefix_ratio
    assert pred.throughput_tok_s == pytest.approx(3.1 / (T0_S + 5 * D_S))
    assert pred.low == pytest.approx((1 + 2.0 / high) / (T0_S + 5 * D_S))
    assert pred.high == pytest.approx((1 + 2.2 / low) / (T0_S + 4 * D_S))


def test_non_prefix_consistent_unmeasured_n_is_wide():
    pts = [
        Point("none", 0, 1, exact_tput(0)),
        Point("suffix", 2, 1, exact_tput(2), A[:2]),
        Point("suffix", 4, 1, exact_tput(4), A),
    ]
    pred = PerfModel.fit(pts).predict("suffix", 3, 1)
    # Centered on the nearest measured N (the longer on a tie), E anywhere in [0, 3].
    assert pred.mean_acceptance_length == pytest.approx(1 + 0.8 + 0.6 + 0.4)
    assert pred.low == pytest.approx(1.0 / (T0_S + 3 * D_S))
    assert pred.high == pytest.approx(4.0 / (T0_S + 3 * D_S))


def test_noisy_points_off_the_line_keep_the_center_inside_the_range():
    # Convex cost: 10 + 0.2 N^2 ms. No line passes through all three zero-spread points.
    pts = [Point("none", 0, 1, 1 / T0_S)]
    for n in (1, 2, 4):
        pts.append(Point("eagle3", n, 1, (1 + sum(A[:n])) / (T0_S + 0.0002 * n * n), A[:n]))
    pred = PerfModel.fit(pts).predict("eagle3", 3, 1)
    assert pred.low <= pred.throughput_tok_s <= pred.high


def test_measured_cell_returns_its_value_and_spread():
    model = PerfModel.fit([Point("none", 0, 1, 100.0), Point("mtp", 2, 1, 180.0, A[:2], 3, 0.1)])
    pred = model.predict("mtp", 2, 1)
    assert pred.measured
    assert (pred.throughput_tok_s, pred.low, pred.high) == pytest.approx((180.0, 171.0, 189.0))
    assert pred.speedup_vs_baseline == pytest.approx(1.8)
    assert pred.mean_acceptance_length == pytest.approx(2.4)


def test_repeats_given_as_separate_points_merge():
    pts = [Point("none", 0, 1, 90.0), Point("none", 0, 1, 110.0), Point("mtp", 1, 1, 150.0, A[:1])]
    model = PerfModel.fit(pts)
    base = model.predict("none", 0, 1)
    assert (base.throughput_tok_s, base.low, base.high) == pytest.approx((100.0, 90.0, 110.0))
    # The single-repeat mtp point borrows the median half-width (here the baseline's 10 %).
    mtp = model.predict("mtp", 1, 1)
    assert (mtp.low, mtp.high) == pytest.approx((135.0, 165.0))


# --- could_beat ---------------------------------------------------------------------------


def test_could_beat_uses_the_upper_bound_and_the_noise():
    model = PerfModel.fit([Point("none", 0, 1, 100.0), Point("mtp", 2, 1, 200.0, A[:2], 3, 0.1)])
    # Measured: high = 210. 210 > 200 · 1.02, but not > 206 · 1.02 = 210.12.
    assert model.could_beat("mtp", 2, 1, incumbent_tok_s=200.0, noise_pct=2.0)
    assert not model.could_beat("mtp", 2, 1, incumbent_tok_s=206.0, noise_pct=2.0)
    # Predicted: N = 1's range ends at 1.8 / (cheapest step); compare around it.
    high = model.predict("mtp", 1, 1).high
    assert model.could_beat("mtp", 1, 1, incumbent_tok_s=high / 1.05 * 0.999, noise_pct=5.0)
    assert not model.could_beat("mtp", 1, 1, incumbent_tok_s=high / 1.05 * 1.001, noise_pct=5.0)


def test_unknown_cells_could_always_beat():
    model = PerfModel.fit([Point("none", 0, 1, 100.0)])
    pred = model.predict("eagle3", 3, 1)
    assert not pred.known
    assert (pred.low, pred.high) == (0.0, math.inf)
    assert model.could_beat("eagle3", 3, 1, incumbent_tok_s=1e9, noise_pct=0.0)
    assert not model.predict("none", 0, 8).known
    with pytest.raises(ValueError):
        model.best(8)


# --- step-cost fit and records ------------------------------------------------------------


def test_fit_step_cost_single_sample_polygon():
    cost = fit_step_cost(
        [StepSample(num_speculative_tokens=4, step_s=0.014, half_width=0.0, weight=1.0)],
        baseline_s=0.010,
    )
    assert (cost.fixed_s, cost.per_token_s) == pytest.approx((0.010, 0.001))
    # Every line from (t_base, slope 1 ms) to (t(4), flat) fits.
    assert cost.step_range_s(2) == pytest.approx((0.012, 0.014))
    assert cost.step_range_s(8) == pytest.approx((0.014, 0.018))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"method": "eagle3", "num_speculative_tokens": 0},
        {"method": "none", "num_speculative_tokens": 2},
        {"method": "eagle3", "num_speculative_tokens": 2, "acceptance_per_pos": (0.5,)},
        {"method": "eagle3", "num_speculative_tokens": 1, "acceptance_per_pos": (1.5,)},
        {"method": "eagle3", "num_speculative_tokens": 1, "output_throughput_tok_s": 0.0},
        {"method": "eagle3", "num_speculative_tokens": 1, "concurrency": 0},
        {"method": "eagle3", "num_speculative_tokens": 1, "spread": -0.1},
    ],
)
def test_point_rejects_inconsistent_records(kwargs):
    fields = {"concurrency": 1, "output_throughput_tok_s": 100.0} | kwargs
    with pytest.raises(ValueError):
        Point(**fields)
