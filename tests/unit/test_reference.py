"""docs/study-file.md is what autotune.spec.reference renders from the study and workload models."""

from __future__ import annotations

from pathlib import Path

from autotune.spec.reference import main, render
from autotune.spec.study import BudgetSpec, StudySpec

REPO = Path(__file__).resolve().parents[2]
CHECKED_IN = REPO / "docs" / "study-file.md"


def test_checked_in_reference_is_what_the_models_render():
    assert CHECKED_IN.read_text(encoding="utf-8") == render(), (
        "docs/study-file.md is out of date: run `make docs` "
        "(python -m autotune.spec.reference docs/study-file.md)"
    )


def test_every_study_key_has_a_row_with_its_description():
    text = render()
    for name in StudySpec.model_fields:
        assert f"| `{name}` |" in text
    for name, info in BudgetSpec.model_fields.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| `budget.{name}` |"))
        assert info.description and info.description in row


def test_bounds_defaults_and_variants_are_rendered():
    text = render()
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| `")}
    assert "≥ 1, ≤ 20" in rows["| `repeats`"] and "`3`" in rows["| `repeats`"]
    assert "required" in rows["| `name`"] and "matches `^[a-z0-9]" in rows["| `name`"]
    assert "each ≥ 1, each ≤ 65,536" in rows["| `concurrency`"]
    assert "> 0, ≤ 1e+06" in rows["| `budget.max_engine_hours`"]
    assert "### `engine` with `kind: replay`" in text
    assert "### `source` with `kind: openai_batch`" in text
    assert "| `methods[].num_speculative_tokens.max` |" in text
    assert "| `slo.workloads.NAME.p99_tpot_ms` |" in text


def test_main_writes_the_file(tmp_path: Path):
    out = tmp_path / "ref.md"
    assert main([str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render()
