"""`check --measure`'s acceptance arithmetic and rendering (autotune.recommend.measured):
acceptance pooled from vLLM's counters and gated per position, the result rendered, stored and
listed (the speedup gate: test_speedup_gate.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from autotune.recommend.measured import (
    Acceptance,
    AcceptanceCheck,
    MeasuredCheck,
    compare_acceptance,
    failure_line,
    history_line,
    pooled,
    render,
)
from autotune.recommend.speedup_gate import SpeedupCheck


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
