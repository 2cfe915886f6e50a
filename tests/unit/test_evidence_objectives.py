"""The geometric mean that folds levels into one number (autotune.evidence.objectives): the trial
value, the all-levels answer and `observe`'s prediction all fold with it."""

from __future__ import annotations

import math

import pytest

from autotune.evidence.objectives import geometric_mean


def test_the_geometric_mean_of_levels() -> None:
    assert geometric_mean([1.0, 4.0]) == pytest.approx(2.0)
    assert geometric_mean([1530.0]) == pytest.approx(1530.0)
    # Weights are shares of the levels: 3 to 1 toward 4.
    assert geometric_mean([1.0, 4.0], [1.0, 3.0]) == pytest.approx(4.0**0.75)
    # Equal weights are the plain mean, to the last bit (the trial value and choose_overall's
    # unweighted levels must not differ by rounding).
    values = [1826.4, 1530.2, 990.7]
    assert geometric_mean(values, [1.0, 1.0, 1.0]) == geometric_mean(values)
    assert geometric_mean(values) == math.exp(sum(math.log(v) for v in values) / 3)


def test_a_zero_level_cannot_be_folded() -> None:
    # Callers return 0 before folding a level whose median is 0 (objective_value,
    # goodput_value); the fold itself refuses it rather than invent a number.
    with pytest.raises(ValueError):
        geometric_mean([0.0, 2.0])
    with pytest.raises(ValueError):
        geometric_mean([1.0, 2.0], [1.0])  # one weight per level
