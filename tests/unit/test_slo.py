"""Choosing under a latency SLO, on a real CPU sweep recorded with its latency percentiles.

``tests/data/tiny-cpu-slo.csv`` is ``autotune report --csv`` of ``bench/record/tiny-cpu-slo.yaml``
run on vLLM 0.32.0's CPU build (see the file's header for when and under what load).
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from autotune.errors import SpecError
from autotune.recommend.choose import choose
from autotune.recommend.slo import (
    NoConfigMeetsSLO,
    choose_slo,
    pareto_front,
    require_slo,
)
from autotune.spec.loader import load_study_file
from autotune.spec.slo import SLO, SLOSpec

DATA = Path(__file__).resolve().parents[1] / "data" / "tiny-cpu-slo.csv"


@dataclass(frozen=True)
class Row:
    """One recorded measurement, with the fields choosing reads."""

    trial_id: int
    method: str
    draft: str | None
    num_speculative_tokens: int
    speculative_config: dict[str, Any] | None
    workload: str
    workload_digest: str
    concurrency: int
    output_throughput_tok_s: float
    num_drafts: int
    num_accepted_tokens: int
    accepted_per_pos: tuple[int, ...]
    created_at: datetime
    tpot_ms_p99: float | None
    ttft_ms_p99: float | None
    itl_ms_p99: float | None


def _opt(v: Any) -> float | None:
    return None if pd.isna(v) else float(v)


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    df = pd.read_csv(DATA, comment="#")
    return [
        Row(
            trial_id=int(r.trial_id),
            method=r.method,
            draft=None if pd.isna(r.draft) else r.draft,
            num_speculative_tokens=int(r.num_speculative_tokens),
            speculative_config=json.loads(r.speculative_config),
            workload=r.workload,
            workload_digest=r.workload_digest,
            concurrency=int(r.concurrency),
            output_throughput_tok_s=float(r.output_throughput_tok_s),
            num_drafts=int(r.num_drafts),
            num_accepted_tokens=int(r.num_accepted_tokens),
            accepted_per_pos=(),
            created_at=datetime.fromisoformat(str(r.created_at)),
            tpot_ms_p99=_opt(r.tpot_ms_p99),
            ttft_ms_p99=_opt(r.ttft_ms_p99),
            itl_ms_p99=_opt(r.itl_ms_p99),
        )
        for r in df.itertuples()
    ]


def test_the_recording_has_latency_columns(rows: list[Row]) -> None:
    assert rows and all(r.tpot_ms_p99 is not None and r.ttft_ms_p99 is not None for r in rows)
    assert {r.concurrency for r in rows} == {1, 8}


def test_no_slo_agrees_with_the_plain_choice(rows: list[Row]) -> None:
    for level in (1, 8):
        plain = choose(rows, "code", level)
        choice = choose_slo(rows, "code", level, SLO())
        assert plain is not None and choice is not None and choice.best is not None
        assert choice.best.config.speculative_config == plain.best.speculative_config
        assert not choice.changed


def test_every_config_meeting_the_slo_is_under_every_limit(rows: list[Row]) -> None:
    slo = SLO(tpot_p99_ms=40.0, ttft_p99_ms=400.0)
    choice = choose_slo(rows, "code", 8, slo)
    assert choice is not None
    for s in choice.scores:
        tpot, ttft = s.p99_ms["tpot_ms_p99"], s.p99_ms["ttft_ms_p99"]
        assert tpot is not None and ttft is not None
        assert (s in choice.meeting) == (tpot <= 40.0 and ttft <= 400.0)


def test_a_tight_slo_names_the_closest_config(rows: list[Row]) -> None:
    slo = SLO(tpot_p99_ms=0.5)  # half a millisecond per token: nothing on 2 CPU cores meets it
    choice = choose_slo(rows, "code", 1, slo)
    assert choice is not None and choice.best is None
    with pytest.raises(NoConfigMeetsSLO) as info:
        require_slo(choice, "code", 1)
    closest = choice.closest
    assert closest is not None
    assert closest.p99_ms["tpot_ms_p99"] == min(
        s.p99_ms["tpot_ms_p99"] or 1e9 for s in choice.scores
    )
    assert info.value.exit_code == 1
    assert "no config meets the SLO (p99 TPOT <= 0.5 ms)" in str(info.value)
    assert closest.config.label() in str(info.value)


def test_pareto_front_is_undominated_and_spans_the_extremes(rows: list[Row]) -> None:
    for level in (1, 8):
        choice = choose_slo(rows, "code", level, SLO())
        assert choice is not None
        front = pareto_front(choice.scores)
        fastest = max(choice.scores, key=lambda s: s.config.median_tok_s)
        snappiest = min(choice.scores, key=lambda s: s.p99_ms["tpot_ms_p99"] or 1e9)
        assert fastest in front and snappiest in front
        for a in front:
            for b in choice.scores:
                ta, tb = a.config.median_tok_s, b.config.median_tok_s
                la, lb = a.p99_ms["tpot_ms_p99"], b.p99_ms["tpot_ms_p99"]
                assert la is not None and lb is not None
                assert not (tb >= ta and lb <= la and (tb > ta or lb < la))


# --- the spec ------------------------------------------------------------------------------


def test_per_workload_limits_override_the_global_ones_field_by_field() -> None:
    spec = SLOSpec.model_validate(
        {"tpot_p99_ms": 50, "ttft_p99_ms": 2000, "workloads": {"code": {"tpot_p99_ms": 30}}}
    )
    assert spec.for_workload("code") == SLO(tpot_p99_ms=30, ttft_p99_ms=2000)
    assert spec.for_workload("chat") == SLO(tpot_p99_ms=50, ttft_p99_ms=2000)
    assert spec.for_workload("chat").describe() == "p99 TPOT <= 50 ms, p99 TTFT <= 2000 ms"
    assert not SLO()


STUDY = """
name: s
model: {name: tiny}
workloads: [code]
methods:
  - method: ngram
    num_speculative_tokens: {min: 1, max: 2}
"""


@pytest.mark.parametrize(
    ("slo", "message", "field"),
    [
        ("slo: {tpot_p99_ms: -3}", "greater than 0", "slo.tpot_p99_ms"),
        ("slo: {p95_tpot: 3}", "unknown key", "slo.p95_tpot"),
        ("slo: {workloads: {chat: {tpot_p99_ms: 3}}}", "'chat' is not one of the study's", None),
    ],
)
def test_bad_slo_blocks_are_one_line(
    tmp_path: Path, slo: str, message: str, field: str | None
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(STUDY) + slo + "\n")
    with pytest.raises(SpecError) as info:
        load_study_file(path)
    assert message in str(info.value) and "\n" not in str(info.value)
    if field:
        assert info.value.field == field


def test_a_good_slo_block_loads(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(STUDY) + "slo: {tpot_p99_ms: 40, workloads: {code: {}}}\n")
    spec = load_study_file(path)
    assert spec.slo is not None and spec.slo.for_workload("code") == SLO(tpot_p99_ms=40)
