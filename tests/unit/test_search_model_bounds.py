"""autotune/search/model_bounds.py: the stop rule at a level where every measured N loses to off
(``lost_to_off``)."""

from __future__ import annotations

from autotune.perf import Point
from autotune.search.model_bounds import lost_to_off


def _p(n: int, c: int, tput: float, spread: float = 0.0) -> Point:
    return Point("mtp" if n else "none", n, c, tput, (0.5,) * n, 3, spread)


def test_a_level_where_every_measured_n_loses_decisively_past_the_knee_is_closed_above_the_largest():
    base = {("w", 1): _p(0, 1, 100.0), ("w", 64): _p(0, 64, 1000.0)}
    mine = {
        8: {("w", 1): _p(8, 1, 250.0), ("w", 64): _p(8, 64, 600.0)},
        3: {("w", 1): _p(3, 1, 200.0), ("w", 64): _p(3, 64, 900.0)},
    }
    assert lost_to_off(mine, base, noise=0.01) == {("w", 64): 8}


def test_a_loss_inside_the_noise_bands_closes_nothing():
    base = {("w", 64): _p(0, 64, 1000.0)}
    mine = {4: {("w", 64): _p(4, 64, 985.0)}, 6: {("w", 64): _p(6, 64, 900.0)}}
    assert lost_to_off(mine, base, noise=0.01) == {}
    # The same loss with the bands narrower than it is decisive.
    assert lost_to_off(mine, base, noise=0.005) == {("w", 64): 6}
    # A wide spread of the N's own repeats keeps it open again.
    mine = {4: {("w", 64): _p(4, 64, 985.0, spread=0.04)}, 6: {("w", 64): _p(6, 64, 900.0)}}
    assert lost_to_off(mine, base, noise=0.005) == {}
    # One measured N never closes a level, however far it loses.
    assert lost_to_off({4: {("w", 64): _p(4, 64, 100.0)}}, base, noise=0.005) == {}


def test_a_level_without_the_baseline_or_the_option_is_not_closed():
    mine = {4: {("w", 1): _p(4, 1, 10.0)}}
    assert lost_to_off(mine, {}, noise=0.01) == {}
    assert lost_to_off({}, {("w", 1): _p(0, 1, 100.0)}, noise=0.01) == {}


def test_a_winning_n_between_two_losing_ones_stays_open():
    """Below the knee (t_step/(N+1) falls with N) a short and a long draft can both lose while
    one between them wins: c=1, t_step = 1 + .05N + .03N^2 + (.5 + .05N) speculating, acceptance
    .5, .45, ... .15 gives off 100, N=1 92.0, N=3 113.5, N=8 85.3 (review of session 12)."""
    a = (0.5, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15)
    base = {("w", 1): Point("none", 0, 1, 100.0, (), 3, 0.0)}
    mine = {
        1: {("w", 1): Point("eagle3", 1, 1, 92.0, a[:1], 3, 0.0)},
        8: {("w", 1): Point("eagle3", 8, 1, 85.3, a, 3, 0.0)},
    }
    assert lost_to_off(mine, base, noise=0.02) == {}
