"""The 95% interval of a ratio of medians as `recommend` states it (autotune.evidence.scores:
``ConfigScore.tie_interval``, ``RatioInterval``): a number while it bounds something, and
"undecided" with the repeats and their spread past ±100% (``STATABLE_PCT``). On the throughputs
of the recorded vLLM sweep (tests/data/vllm-sweep: 2 runs per cell on a loaded 2-core CPU, the
baseline's spreading 104% at concurrency 1), read from its summary files, and on two tight
configs whose interval is stated."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.evidence.scores import STATABLE_PCT, score
from autotune.recommend.choose import choose

SWEEP = Path(__file__).resolve().parents[2] / "tests" / "data" / "vllm-sweep" / "tiny-ngram"
AT = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _row(n: int, concurrency: int, tok_s: float, trial: int) -> Any:
    """What choosing reads of a stored measurement (autotune.store.MeasurementRecord)."""
    spec = None if n == 0 else {"method": "ngram", "num_speculative_tokens": n}
    return SimpleNamespace(
        workload="code",
        workload_digest="d",
        concurrency=concurrency,
        created_at=AT,
        trial_id=trial,
        purpose=None,
        method="none" if n == 0 else "ngram",
        draft=None,
        num_speculative_tokens=n,
        speculative_config=spec,
        output_throughput_tok_s=tok_s,
        num_drafts=0,
        num_accepted_tokens=0,
        accepted_per_pos=(),
        num_requests=1,
    )


def _sweep_rows() -> list[Any]:
    rows = []
    for trial, summary in enumerate(sorted(SWEEP.rglob("summary.json"))):
        for run in json.loads(summary.read_text()):
            spec = run.get("speculative_config") or {}
            n = spec.get("num_speculative_tokens", 0)
            rows.append(_row(n, run["max_concurrency"], run["output_throughput"], trial))
    return rows


def test_two_runs_spreading_104_percent_are_undecided_not_a_number() -> None:
    rows = [r for r in _sweep_rows() if r.concurrency == 1]
    off = score([r for r in rows if r.num_speculative_tokens == 0])
    n2 = score([r for r in rows if r.num_speculative_tokens == 2])
    assert off.repeats == n2.repeats == 2 and off.spread_pct == pytest.approx(104.4, abs=0.05)
    interval = off.tie_interval(n2)
    # The t interval of two runs is legitimately this wide; it bounds nothing.
    assert interval.halfwidth_pct == off.tie_pct(n2) > 300_000
    assert interval.undecided
    assert interval.text() == "undecided (n=2, repeats spread 104.4%)"  # the noisier side
    assert interval.cell() == "undecided"
    doc = interval.as_json()
    assert doc["within_pct"] is None and doc["undecided"] is True
    assert doc["halfwidth_pct"] == round(interval.halfwidth_pct, 3)
    assert doc["repeats"] == [2, 2] and doc["spread_pct"][0] == pytest.approx(104.387, abs=1e-3)


def test_a_gap_of_many_times_is_decided_however_noisy_the_runs() -> None:
    # The imported sweep at c=1: off 137 tok/s (two runs 104 % apart) against n-gram N=1 at 16:
    # the t interval of two runs contains 1, but a ratio past 2x is decided (never a tie).
    choice = choose(_sweep_rows(), "code", 1)
    assert choice is not None and choice.best.is_baseline
    assert choice.margin_pct is not None and choice.margin_pct > 700
    assert choice.verdict == "decided" and not choice.tie and not choice.undecided


def test_an_overlapping_interval_past_one_percent_is_undecided() -> None:
    # At c=4 off leads n-gram N=1 by 16 % on two runs a side spreading 61-83 %: the answer is
    # the higher median, undecided, and that is a low-confidence reason.
    choice = choose(_sweep_rows(), "code", 4)
    assert choice is not None and choice.best.is_baseline and choice.undecided
    assert choice.margin_pct == pytest.approx(15.99, abs=0.01)
    assert any(kind == "undecided" for kind, _ in choice.reasons(50.0))


def test_a_tight_interval_is_stated() -> None:
    a = score([_row(1, 1, t, 1) for t in (100.0, 101.0, 100.5)])
    b = score([_row(2, 1, t, 2) for t in (101.0, 102.0, 101.5)])
    interval = a.tie_interval(b)
    assert 0 < interval.halfwidth_pct <= STATABLE_PCT and not interval.undecided
    assert interval.text() == f"within ±{interval.halfwidth_pct:.1f}%"
    assert interval.as_json()["within_pct"] == round(a.tie_pct(b), 3)
    # Medians 100.5 and 101.0: within 1 %, a tie; the preference answers the smaller N.
    choice = choose([*(_row(1, 1, t, 1) for t in (100.0, 101.0, 100.5)),
                     *(_row(2, 1, t, 2) for t in (101.0, 102.0, 100.2))], "code", 1)  # fmt: skip
    assert choice is not None and choice.tie and choice.best.num_speculative_tokens == 1
    assert choice.margin_pct == pytest.approx(100 * (100.5 / 101.0 - 1))
    assert "within 1%" in choice.tie_line()


def test_two_runs_are_stated_while_they_agree() -> None:
    """The rule is the width, not the count: two runs 2% apart still bound the ratio."""
    a = score([_row(1, 1, t, 1) for t in (100.0, 102.0)])
    b = score([_row(2, 1, t, 2) for t in (101.0, 103.0)])
    assert not a.tie_interval(b).undecided
