"""`check --measure`'s speedup gate (autotune.recommend.speedup_gate, autotune.evidence.decide.held):
a level passes only where the 95 % interval of now/study lies above a fall of the band, fails
only where it lies below, and is undecided otherwise; noise widens the interval, never the band."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from autotune.evidence.decide import held
from autotune.recommend.measured import (
    Acceptance,
    MeasuredCheck,
    compare_acceptance,
    failure_line,
    render,
)
from autotune.recommend.speedup_gate import (
    DEFAULT_SPEEDUP_TOLERANCE_PCT,
    SpeedupCheck,
    judge_level,
    paired_level,
    speedup_band,
    speedups,
)


@dataclass(frozen=True)
class Run:
    concurrency: int
    output_throughput_tok_s: float
    num_drafts: int = 0
    accepted_per_pos: tuple[int, ...] = ()


def _check(speed: SpeedupCheck | None) -> MeasuredCheck:
    return MeasuredCheck(
        study="s",
        model="tiny",
        workload="code",
        label="ngram N=2",
        speculative_config={"method": "ngram", "num_speculative_tokens": 2},
        reference_label="ngram N=2",
        vllm_version="0.33.0",
        study_vllm_versions=("0.32.0",),
        acceptance=compare_acceptance(Acceptance(10, (7, 4)), Acceptance(10, (7, 4)), 0.05),
        speedup=speed,
        choice_ok=True,
        choice_reason="ok: the deployed config ngram N=2 is the recommended one",
    )


def _pairs(target: list[float], base: list[float]) -> list[tuple[Run, Run]]:
    return [(Run(1, a), Run(1, b)) for a, b in zip(target, base, strict=True)]


def test_held_is_one_sided_and_has_no_shortcut() -> None:
    assert held(-5.0, math.log(1.03), 10.0) == "held"  # [-7.8 %, -2.2 %] above -10 %
    assert held(-20.0, math.log(1.05), 10.0) == "fell"  # [-23.8 %, -16 %] below -10 %
    assert held(-10.0, math.log(1.05), 10.0) == "undecided"  # spans the edge
    assert held(+30.0, math.log(1.5), 10.0) == "undecided"  # ahead, but the interval reaches -13 %
    assert held(-60.0, math.inf, 10.0) == "undecided"  # a 0.4x on an unbounded interval
    assert held(+0.0, 0.0, 0.0) == "held" and held(-100.0, 0.0, 10.0) == "fell"


def test_speedups_per_level_pool_the_baseline_runs() -> None:
    study_cfg = [Run(1, 150), Run(1, 160), Run(4, 300)]
    study_base = [Run(1, 100), Run(1, 100), Run(1, 110), Run(4, 300)]
    now_cfg = [Run(1, 140), Run(4, 280)]
    now_base = [Run(1, 100), Run(4, 350)]
    lv1, lv4 = speedups(study_cfg, study_base, now_cfg, now_base)
    assert lv1.study == pytest.approx(155 / 100) and lv1.measured == pytest.approx(1.4)
    assert lv4.change == pytest.approx((280 / 350) / 1.0 - 1)


def test_the_band_is_the_fall_that_matters_and_noise_never_widens_it() -> None:
    band, noise, words = speedup_band([2.0, -12.5, 4.0], 3.0)
    assert band == pytest.approx(0.03) and noise == pytest.approx(0.125)
    assert "12.5%" in words and "drift check" in words
    band, noise, words = speedup_band([], None, DEFAULT_SPEEDUP_TOLERANCE_PCT)
    assert band == pytest.approx(0.10) and noise is None and "the default" in words
    assert "this check's baseline" in words
    band, noise, words = speedup_band([], None)
    assert band is None and "not judged" not in words and "nothing" in words


def test_a_load_that_slows_both_halves_alike_passes_on_a_study_with_measured_noise() -> None:
    study_cfg, study_base = [Run(1, 150.0)] * 3, [Run(1, 100.0)] * 3
    # the runner at half speed, then two thirds: the pairs' ratios stay 1.5x; the study's drift
    # check measured 2 %, so the check's own slow baseline is not taken for start-to-start noise
    loaded = paired_level(1, study_cfg, study_base,
                          _pairs([75.0, 100.0, 76.0], [50.0, 66.7, 50.5]), 10.0,
                          study_noise=0.02)  # fmt: skip
    assert loaded.outcome == "ok" and loaded.verdict == "held" and loaded.pairs == 3
    assert loaded.measured == pytest.approx(1.5, rel=0.01)
    assert loaded.baseline_drift_pct is not None and loaded.baseline_drift_pct < -30
    # the same pairs without a measured study noise: the slow baseline stands in for it and
    # spans the edge whatever the pairs say: undecided by the starts (no more pairs)
    unknown = paired_level(1, study_cfg, study_base,
                           _pairs([75.0, 100.0, 76.0], [50.0, 66.7, 50.5]), 10.0)  # fmt: skip
    assert unknown.outcome == "undecided" and unknown.undecided_by == "starts"
    assert unknown.start_noise_pct is not None and unknown.start_noise_pct > 50


def test_a_steady_fall_fails_and_noisy_pairs_stay_undecided() -> None:
    study_cfg, study_base = [Run(1, 150.0)] * 3, [Run(1, 100.0)] * 3
    fell = paired_level(1, study_cfg, study_base,
                        _pairs([120.0, 121.0, 119.0], [100.0, 100.0, 100.0]), 10.0,
                        study_noise=0.02)  # fmt: skip
    assert fell.outcome == "fell" and fell.verdict == "fell"  # a steady 1.2x: -20 %
    noisy = paired_level(1, study_cfg, study_base,
                         _pairs([100.0, 150.0, 210.0], [100.0, 100.0, 100.0]), 10.0,
                         study_noise=0.02)  # fmt: skip
    assert noisy.outcome == "undecided" and noisy.undecided_by == "pairs"
    check = SpeedupCheck((noisy,), 0.10, 0.02, "a fall of 10%", 12)
    r = _check(check)
    assert r.outcome == "undecided" and not r.passed
    assert "UNDECIDED (noisy runner): rerun" in render(r)
    assert "undecided (noisy runner): rerun" in failure_line(r)
    assert r.to_json()["outcome"] == "undecided"
    assert _check(SpeedupCheck((fell,), 0.10, 0.02, "band", 12)).outcome == "failed"
    starts = paired_level(1, study_cfg, study_base,
                          _pairs([150.0, 151.0, 149.0], [100.0, 100.0, 100.0]), 10.0,
                          study_noise=0.25)  # fmt: skip
    assert starts.outcome == "undecided" and starts.undecided_by == "starts"
    line = failure_line(_check(SpeedupCheck((starts,), 0.10, 0.25, "band", 12)))
    assert (
        "starts alone (the study's runs and the start-to-start drift) spans a fall of 10.0%" in line
    )


def test_judge_level_widens_with_the_studys_single_run_and_its_starts() -> None:
    one = judge_level([1.4, 1.42, 1.38], 1.5, [150.0], [100.0], 1.0)
    repeated = judge_level([1.4, 1.42, 1.38], 1.5, [150.0, 150.5, 149.5], [100.0, 100.2, 99.8],
                           1.0)  # fmt: skip
    assert one.interval_log > repeated.interval_log
    assert one.margin_pct == pytest.approx(100 * (1.4 / 1.5 - 1))
    drifted = judge_level([1.4, 1.42, 1.38], 1.5, [150.0, 150.5, 149.5], [100.0, 100.2, 99.8],
                          1.0, drift=0.1)  # fmt: skip
    assert drifted.start_log == pytest.approx(math.sqrt(2) * math.log(1.1))
    assert drifted.interval_log > repeated.interval_log
