"""autotune/search/acceptance_prior.py: published AL curves as per-position priors, scaled by a
study's measured per-position counts, with their out-of-sample prediction error."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.perf import Prediction
from autotune.search.acceptance_prior import (
    AcceptancePrior,
    best_fit,
    explain_lines,
    extrapolated,
    fit_prior,
    measured_accepted,
    priors_for,
    ranked_throughput,
)

# ROCm DFlash blog, Table 1, Qwen3.5-27B DFlash on GSM8K at c=1 (autotune/catalog/published.yaml).
GSM8K = AcceptancePrior("dflash", "GSM8K", ((3, 3.69), (7, 6.177), (15, 8.495)))


def _row(n: int, accepted: tuple[int, ...], drafts: int, workload: str = "math") -> Any:
    """What the prior reads of a stored measurement (autotune.store.MeasurementRecord)."""
    return SimpleNamespace(
        method="dflash",
        draft="z-lab/Qwen3.5-27B-DFlash",
        workload=workload,
        num_speculative_tokens=n,
        num_drafts=drafts,
        accepted_per_pos=accepted,
    )


def test_the_prior_is_linear_in_al_between_published_n_and_flat_past_the_last():
    assert GSM8K.accepted(3) == pytest.approx(2.69)
    assert GSM8K.accepted(5) == pytest.approx(2.69 + (6.177 - 3.69) / 2)
    assert GSM8K.accepted(1) == pytest.approx(2.69 / 3)
    assert GSM8K.accepted(15) == GSM8K.accepted(20) == pytest.approx(7.495)
    a = GSM8K.per_position(8)
    assert sum(a) == pytest.approx(GSM8K.accepted(8))
    assert a[0] == pytest.approx(2.69 / 3) and a[3] == pytest.approx((6.177 - 3.69) / 4)


def test_measured_acceptance_pools_the_counts_of_every_row_of_an_n():
    rows = [_row(2, (80, 40), 100), _row(2, (90, 60), 100), _row(3, (50, 25, 10), 100)]
    assert measured_accepted(rows) == {
        2: pytest.approx(0.85 + 0.5),
        3: pytest.approx(0.5 + 0.25 + 0.1),
    }
    # Rows without counts (a baseline, a run that drafted nothing) say nothing.
    assert measured_accepted([_row(0, (), 0), _row(2, (0, 0), 0)]) == {}


def test_a_prior_off_by_one_factor_is_scaled_to_the_measurement_and_predicts_it_exactly():
    measured = {3: 0.9 * GSM8K.accepted(3), 7: 0.9 * GSM8K.accepted(7)}
    fit = fit_prior(GSM8K, measured)
    assert fit is not None
    assert fit.scale == pytest.approx(0.9)
    assert fit.accepted(5) == pytest.approx(0.9 * GSM8K.accepted(5))
    assert fit.measured == (3, 7)
    # Each N is predicted from the other alone: the shape holds, so the error is nil.
    assert [c.n for c in fit.checks] == [3, 7]
    assert all(abs(c.error_pct) < 1e-9 for c in fit.checks)


def test_a_prior_whose_shape_is_wrong_shows_it_in_its_leave_one_out_error():
    # Measured flat after N=3 (a stall): scaled by N=3 alone the prior overstates N=7, scaled
    # by N=7 alone it understates N=3.
    measured = {3: 2.69, 7: 2.8}
    fit = fit_prior(GSM8K, measured)
    assert fit is not None
    by_n = {c.n: c for c in fit.checks}
    assert by_n[7].predicted_al == pytest.approx(1 + GSM8K.accepted(7))  # scale 1 from N=3
    assert by_n[7].error_pct == pytest.approx(100 * (6.177 - 3.8) / 3.8)
    assert by_n[3].error_pct < 0
    assert fit.error_pct > 30


def test_with_one_n_measured_the_error_is_the_published_curve_unscaled():
    fit = fit_prior(GSM8K, {7: 4.0})
    assert fit is not None
    (check,) = fit.checks
    assert check.predicted_al == pytest.approx(6.177)
    assert check.error_pct == pytest.approx(100 * (6.177 - 5.0) / 5.0)
    assert fit.scale == pytest.approx(4.0 / 5.177)
    assert fit_prior(GSM8K, {}) is None


def test_the_best_fit_is_the_prior_of_smallest_error():
    stall = AcceptancePrior("dflash", "stall", ((3, 3.69), (7, 3.9), (15, 4.0)))
    measured = {3: 2.69, 7: 2.8}
    best = best_fit([GSM8K, stall], measured)
    assert best is not None and best.prior is stall
    assert best_fit([], measured) is None


def test_the_model_extrapolates_past_a_prefix_drafters_longest_run_and_off_another_drafters_n():
    assert extrapolated("mtp", 9, [8, 3])
    assert not extrapolated("mtp", 5, [8, 3])  # a measured prefix
    assert extrapolated("dflash", 5, [8, 3])
    assert not extrapolated("dflash", 8, [8, 3])


def _pred(tput: float, al: float, measured: bool = False) -> Prediction:
    return Prediction(tput, tput * 0.8, tput * 1.3, None, measured, al)


def test_the_ranked_centre_takes_the_priors_acceptance_only_where_the_model_extrapolates():
    fit = fit_prior(GSM8K, {15: GSM8K.accepted(15)})
    assert fit is not None
    # DFlash N=7 unmeasured: the same step cost, the prior's 6.177 tokens a step, not 5.0.
    assert ranked_throughput("dflash", 7, _pred(1000.0, 5.0), fit) == pytest.approx(
        1000.0 * 6.177 / 5.0
    )
    # Never outside the model's range.
    assert ranked_throughput("dflash", 7, _pred(1000.0, 4.0), fit) == pytest.approx(1300.0)
    # A measured cell, a measured prefix, or no prior: the model's centre.
    assert ranked_throughput("dflash", 15, _pred(1000.0, 5.0, measured=True), fit) == 1000.0
    assert ranked_throughput("mtp", 7, _pred(1000.0, 5.0), fit) == 1000.0
    assert ranked_throughput("dflash", 7, _pred(1000.0, 5.0), None) == 1000.0


def test_the_catalog_cites_per_n_curves_for_qwen_and_none_for_an_unknown_model():
    curves = priors_for("Qwen/Qwen3.5-27B", None, "dflash")
    assert {p.al_by_n[0][0] for p in curves} == {3}
    assert any(p.al_by_n == GSM8K.al_by_n for p in curves)
    assert all("rocm-blogs" in p.label for p in curves)
    # Kimi-K2.5's EAGLE-3 golden curves (models.yaml) are priors too.
    kimi = priors_for("moonshotai/Kimi-K2.5", "kimi", "eagle3")
    assert kimi and kimi[0].al_by_n[:2] == ((1, 1.80), (2, 2.33))
    assert priors_for("org/unknown", None, "dflash") == []


def test_explain_states_each_priors_prediction_at_every_measured_n():
    rows = [_row(15, (90,) * 3 + (60,) * 12, 100), _row(3, (90, 80, 70), 100)]
    rows.append(_row(3, (90, 80, 70), 100, workload="chat"))  # another workload: not counted
    (line,) = explain_lines("Qwen/Qwen3.5-27B", None, "math", rows)
    assert line.startswith("acceptance prior  dflash z-lab/Qwen3.5-27B-DFlash: ")
    assert "N=3 " in line and "N=15 " in line and "vs 3.40" in line
    assert explain_lines("org/unknown", None, "math", rows) == []


def _order(monkeypatch: pytest.MonkeyPatch, priors: bool) -> list[str]:
    from autotune.bench.search import _replayed
    from autotune.search import model_bounds

    if not priors:
        monkeypatch.setattr(model_bounds, "priors_for", lambda *args: [])
    landscape = Path(__file__).resolve().parents[2] / "bench/landscapes/synthetic-qwen27b-dense.csv"
    _, trials, _ = _replayed(landscape, "model", 0, None)
    return [f"{t.method}{t.num_speculative_tokens}" for t in trials]


def test_the_published_dflash_curve_ranks_an_n_the_prefix_of_n15_oversells_later(
    monkeypatch: pytest.MonkeyPatch,
):
    """qwen27b-dense (bench/landscapes): DFlash N=10's centre from N=15's prefix ranks it
    right after the first engines, mtp N=3 and DFlash N=7 (sixth); the ROCm blog's AL at N=7
    and 15 (the prior, scaled by the measured runs) puts it behind the MTP N the answer needs
    (N=4 and 5; bench/README.md, session 13: 0.203 -> 0.189 of the grid)."""
    with_prior = _order(monkeypatch, priors=True)
    without = _order(monkeypatch, priors=False)
    assert without.index("dflash10") < without.index("mtp4") < without.index("mtp5")
    assert with_prior.index("mtp5") < with_prior.index("dflash10")
    assert with_prior.index("dflash10") > without.index("dflash10") + 3
