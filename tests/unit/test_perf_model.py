"""PerfModel's memos: the same points fit to the same model, whose answers (kept) are the ones a
fresh fit gives, and no caller can change a kept curve."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.perf import PerfModel, Point

A = (0.9, 0.7, 0.5, 0.35)


def points(tput_n4: float = 260.0) -> list[Point]:
    return [
        Point("none", 0, 1, 100.0, (), 3, 0.02),
        Point("none", 0, 8, 600.0, (), 3, 0.03),
        Point("mtp", 4, 1, tput_n4, A, 3, 0.01),
        Point("mtp", 2, 8, 900.0, A[:2], 2, 0.02),
        Point("dflash", 3, 1, 240.0, A[:3], 1),
    ]


def test_the_same_points_give_the_same_model_and_a_fresh_fits_predictions():
    model = PerfModel.fit(points(), noise_floor=0.01)
    assert PerfModel.fit(points(), noise_floor=0.01) is model
    assert PerfModel.fit(points(), noise_floor=0.02) is not model
    assert PerfModel.fit(points(261.0), noise_floor=0.01) is not model
    fresh = PerfModel._fit_new(tuple(points()), 0.01)
    for method in ("mtp", "dflash"):
        for n in range(0, 7):
            for c in (1, 4, 8):
                asked_twice = (model.predict(method, n, c), model.predict(method, n, c))
                assert asked_twice[0] == asked_twice[1]
                want, got = fresh.predict(method, n, c), asked_twice[0]
                assert np.isnan(want.throughput_tok_s) == np.isnan(got.throughput_tok_s)
                if not np.isnan(want.throughput_tok_s):
                    assert got == want, (method, n, c)
    with pytest.raises(ValueError, match="N must be >= 0"):
        model.predict("mtp", -1, 1)  # bad questions are refused, not remembered


def test_kept_curves_cannot_be_changed_by_a_caller():
    model = PerfModel.fit(points(), noise_floor=0.01)
    curve = model.acceptance_curve("mtp", 1)
    curve[0] = 0.0
    assert model.acceptance_curve("mtp", 1)[0] == pytest.approx(0.9)
    # The pooled curves the model shares between fits are read-only.
    from autotune.perf.model import _pool

    pooled = _pool(list(model._cells.values())[2:3])
    with pytest.raises(ValueError):
        pooled[0] = 0.0
