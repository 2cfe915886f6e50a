"""`check --measure`'s arithmetic (autotune.recommend.measured): acceptance pooled from vLLM's
counters and gated per position, the speedup judged against the study's start-to-start noise."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from autotune.recommend.measured import (
    DEFAULT_SPEEDUP_TOLERANCE_PCT,
    Acceptance,
    AcceptanceCheck,
    MeasuredCheck,
    SpeedupCheck,
    compare_acceptance,
    failure_line,
    history_line,
    judge_level,
    paired_level,
    pooled,
    render,
    speedup_band,
    speedups,
)


@dataclass(frozen=True)
class Run:
    concurrency: int
    output_throughput_tok_s: float
    num_drafts: int = 0
    accepted_per_pos: tuple[int, ...] = ()


def test_pooled_sums_counters_over_runs() -> None:
    acc = pooled([Run(1, 10, 100, (70, 40)), Run(2, 10, 300, (210, 120))])
    assert acc == Acceptance(400, (280, 160))
    assert acc.per_pos == (0.7, 0.4)
    assert acc.length == pytest.approx(1 + 440 / 400)


def test_acceptance_gate_names_the_positions_that_fell() -> None:
    study = Acceptance(100, (70, 40, 20))
    same = compare_acceptance(study, Acceptance(200, (140, 80, 40)), 0.05)
    assert same.passed and same.fell == ()
    # 5 % relative: 0.70 -> 0.666 is within, 0.40 -> 0.37 is not, 0.20 -> 0.10 is not
    worse = compare_acceptance(study, Acceptance(1000, (666, 370, 100)), 0.05)
    assert worse.fell == (2, 3) and worse.length_fell and not worse.passed
    assert compare_acceptance(study, Acceptance(1000, (800, 500, 300)), 0.0).passed


def test_speedups_per_level_pool_the_baseline_runs() -> None:
    study_cfg = [Run(1, 150), Run(1, 160), Run(4, 300)]
    study_base = [Run(1, 100), Run(1, 100), Run(1, 110), Run(4, 300)]
    now_cfg = [Run(1, 140), Run(4, 280)]
    now_base = [Run(1, 100), Run(4, 350)]
    lv1, lv4 = speedups(study_cfg, study_base, now_cfg, now_base)
    assert lv1.study == pytest.approx(155 / 100) and lv1.measured == pytest.approx(1.4)
    assert lv4.change == pytest.approx((280 / 350) / 1.0 - 1)


def test_speedup_band_is_never_tighter_than_the_start_to_start_noise() -> None:
    band, noise, words = speedup_band([2.0, -12.5, 4.0], 3.0)
    assert band == noise == pytest.approx(0.125)
    assert "12.5%" in words and "tighter" in words
    band, noise, words = speedup_band([2.0], 20.0)
    assert band == pytest.approx(0.2) and noise == pytest.approx(0.02) and "wider" in words
    band, noise, words = speedup_band([], None)
    assert band is None and noise is None and "no start-to-start noise" in words
    band, _, words = speedup_band([], 10.0)
    assert band == pytest.approx(0.1) and "no start-to-start noise" in words


def _check(acc: AcceptanceCheck, speed: SpeedupCheck | None, choice_ok: bool = True):
    return MeasuredCheck(
        study="s",
        model="tiny",
        workload="code",
        label="ngram N=2",
        speculative_config={"method": "ngram", "num_speculative_tokens": 2},
        reference_label="ngram N=2",
        vllm_version="0.33.0",
        study_vllm_versions=("0.32.0",),
        acceptance=acc,
        speedup=speed,
        choice_ok=choice_ok,
        choice_reason="ok: the deployed config ngram N=2 is the recommended one",
    )


def test_a_fall_inside_the_noise_passes_and_outside_fails() -> None:
    acc = compare_acceptance(Acceptance(10, (7, 4)), Acceptance(10, (7, 4)), 0.05)
    levels = speedups([Run(1, 150)], [Run(1, 100)], [Run(1, 130)], [Run(1, 100)])  # -13.3 %
    inside = _check(acc, SpeedupCheck(levels, 0.15, 0.15, "noise 15%"))
    assert inside.passed and "speedup: ok" in render(inside)
    outside = _check(acc, SpeedupCheck(levels, 0.10, 0.10, "noise 10%"))
    assert not outside.passed and outside.speedup is not None
    assert outside.speedup.fell() == (1,)
    assert "at concurrency 1" in failure_line(outside)
    shown = _check(acc, SpeedupCheck(levels, None, None, "not judged"))
    assert shown.passed and "shown, not judged" in render(shown)


def test_render_json_and_history_say_which_version_measured() -> None:
    acc = compare_acceptance(Acceptance(10, (7, 4)), Acceptance(10, (5, 4)), 0.05)
    r = _check(acc, None)
    text = render(r)
    assert "vLLM 0.33.0 (study: vLLM 0.32.0)" in text and "REGRESSION at position 1" in text
    assert "position 1" in failure_line(r)
    data = r.to_json()
    assert data["passed"] is False and data["acceptance"]["fell"] == [1]
    assert data["mode"] == "check-measure"
    line = history_line("2026-12-01 10:00", data)
    assert "vLLM 0.33.0" in line and "FAILED" in line and "1.90" in line


def test_stored_checks_make_a_history_that_report_shows(tmp_path, autotune) -> None:
    """A measured check shares the verifications table: `report` lists every one with its
    vLLM version, oldest first, and `verify`'s reader skips them."""
    import autotune.verify as verifying
    from autotune import api
    from autotune.store import Store
    from autotune.testing.landscapes import write_gate
    from autotune.testing.studies import gate_study

    land = write_gate(tmp_path / "landscape.csv")
    db = tmp_path / "autotune.db"
    store = Store(str(db))
    api.create_study(store, data=gate_study(land), source=str(land))
    api.run_study(store, "gate")
    record = store.get_study("gate")
    acc = compare_acceptance(Acceptance(10, (7, 4)), Acceptance(10, (7, 4)), 0.05)
    for version, ok in (("0.32.0", True), ("0.33.0", False)):
        r = _check(acc, None, choice_ok=ok)
        r = MeasuredCheck(**{**r.__dict__, "vllm_version": version})
        store.save_verification(
            record, workload="code", mode="check-measure", passed=r.passed, tolerance=0.05,
            result=r.to_json(), vllm_version=version,
        )  # fmt: skip
    assert verifying.verifications(store, record) == []  # not `verify` results
    lines = verifying.check_history_lines(store, record)
    assert ["vLLM 0.32.0" in lines[0], "vLLM 0.33.0" in lines[1]] == [True, True]
    assert "passed" in lines[0] and "FAILED" in lines[1]
    out = autotune("--db", str(db), "report", "gate", db=False).stdout
    assert "check --measure on" in out and "vLLM 0.33.0: ngram N=2 FAILED" in out


def test_sampled_acceptance_falls_only_beyond_its_interval() -> None:
    study = Acceptance(100, (70, 40))
    # 0.70 -> 0.60 over 100 drafts each: beyond 5 % but inside the two-proportion interval
    now = Acceptance(100, (60, 40))
    assert compare_acceptance(study, now, 0.05).fell == (1,)  # temperature 0: exact
    sampled = compare_acceptance(study, now, 0.05, sampled=True)
    assert sampled.passed and sampled.sampled
    # the same rates over 100x the drafts: the interval is narrow, the fall stands
    many = compare_acceptance(Acceptance(10000, (7000, 4000)), Acceptance(10000, (6000, 4000)),
                              0.05, sampled=True)  # fmt: skip
    assert many.fell == (1,)


def _pairs(target: list[float], base: list[float]) -> list[tuple[Run, Run]]:
    return [(Run(1, a), Run(1, b)) for a, b in zip(target, base, strict=True)]


def test_paired_levels_pass_fail_or_stay_undecided_by_the_shared_rule() -> None:
    study_cfg, study_base = [Run(1, 150.0)], [Run(1, 100.0)]  # one study run: 1.50x
    # a loaded runner slows both halves of each pair alike: the ratios stay 1.5x
    loaded = paired_level(1, study_cfg, study_base,
                          _pairs([150.0, 90.0, 120.0], [100.0, 60.0, 80.0]), 10.0)  # fmt: skip
    assert loaded.outcome == "ok" and loaded.verdict == "tie" and loaded.pairs == 3
    assert loaded.measured == pytest.approx(1.5)
    # a steady 1.2x (-20 %), with little spread: decided, it fell
    fell = paired_level(1, study_cfg, study_base,
                        _pairs([120.0, 121.0, 119.0], [100.0, 100.0, 100.0]), 10.0)  # fmt: skip
    assert fell.outcome == "fell" and fell.verdict == "decided"
    # ratios 1.0x .. 1.5x: -17 % at the median, but the interval holds 1.5x: undecided
    noisy = paired_level(1, study_cfg, study_base,
                         _pairs([100.0, 125.0, 150.0], [100.0, 100.0, 100.0]), 10.0)  # fmt: skip
    assert noisy.outcome == "undecided" and noisy.interval_pct and noisy.interval_pct > 17
    check = SpeedupCheck((loaded, noisy), 0.10, None, "a tie band of 10%", 12)
    assert check.undecided() == (1,) and check.fell() == () and not check.passed
    acc = compare_acceptance(Acceptance(10, (7, 4)), Acceptance(10, (7, 4)), 0.05)
    r = _check(acc, check)
    assert r.outcome == "undecided" and not r.passed
    assert "UNDECIDED (noisy runner): rerun" in render(r)
    assert "undecided (noisy runner): rerun" in failure_line(r)
    assert r.to_json()["outcome"] == "undecided"
    assert _check(acc, SpeedupCheck((fell,), 0.10, None, "band", 12)).outcome == "failed"


def test_judge_level_widens_with_the_studys_single_run() -> None:
    one = judge_level([1.4, 1.42, 1.38], 1.5, [150.0], [100.0], 1.0)
    repeated = judge_level([1.4, 1.42, 1.38], 1.5, [150.0, 150.5, 149.5], [100.0, 100.2, 99.8],
                           1.0)  # fmt: skip
    assert one.interval_log > repeated.interval_log
    assert one.margin_pct == pytest.approx(100 * (1.4 / 1.5 - 1))


def test_default_band_judges_when_the_study_measured_no_noise() -> None:
    band, noise, words = speedup_band([], None, DEFAULT_SPEEDUP_TOLERANCE_PCT)
    assert band == pytest.approx(0.10) and noise is None and "tie band of 10%" in words
