"""Bad input gets one line naming the file and field, exit code 2, and the store is unchanged."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from autotune.testing.studies import store_digest

GOOD = """
name: t1
model: {name: tiny}
workloads: [code]
concurrency: [1, 4]
methods:
  - method: ngram
    num_speculative_tokens: {min: 1, max: 3}
"""

CASES = {
    "invalid-yaml": ("name: t1\nmodel: {name: tiny\n", "invalid YAML", None),
    "unknown-key": (GOOD + "colour: blue\n", "unknown key", "colour"),
    "unknown-nested-key": (
        GOOD.replace("model: {name: tiny}", "model: {name: tiny, gpus: 8}"),
        "unknown key",
        "model.gpus",
    ),
    "unknown-alias": (
        GOOD.replace("name: tiny", "name: kimmi"),
        "unknown model alias 'kimmi'",
        "model.name",
    ),
    "unknown-workload": (
        GOOD.replace("[code]", "[code, poetry]"),
        "unknown workload 'poetry'",
        "workloads.1",
    ),
    "n-above-method-bound": (
        GOOD.replace("method: ngram", "method: dflash").replace("max: 3", "max: 5"),
        "num_speculative_tokens 4 outside [1, 3] for dflash (dflash: N <= block_size - 1 = 3)",
        "methods.0.num_speculative_tokens",
    ),
    "n-above-global-bound": (
        GOOD.replace("max: 3", "max: 40"),
        "less than or equal to 15",
        "methods.0.num_speculative_tokens.max",
    ),
    "draft-missing": (
        GOOD.replace("name: tiny", "name: acme/unknown-model").replace(
            "method: ngram", "method: eagle3"
        ),
        "method eagle3 needs a draft checkpoint",
        "methods.0.draft",
    ),
    "draft-on-ngram": (
        GOOD.replace("method: ngram", "method: ngram\n    draft: some/draft"),
        "takes no draft checkpoint",
        "methods.0.draft",
    ),
    "bad-ngram-params": (
        GOOD + "    params: {prompt_lookup_min: 5, prompt_lookup_max: 2}\n",
        "prompt_lookup_min=5 must be <= prompt_lookup_max=2",
        "methods.0.params",
    ),
    "unknown-method": (
        GOOD.replace("method: ngram", "method: lookahead"),
        "Input should be",
        "methods.0.method",
    ),
    "concurrency-duplicate": (
        GOOD.replace("[1, 4]", "[1, 1]"),
        "unique",
        "concurrency",
    ),
}


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("store_exists", [False, True])
def test_bad_study_file(case: str, store_exists: bool, tmp_path: Path, db_path: Path, autotune):
    text, message, field = CASES[case]
    if store_exists:
        assert autotune("study", "create", "--model", "tiny", "--workload", "math").exit_code == 0
    before = store_digest(db_path)
    path = _write(tmp_path, text)
    result = autotune("study", "create", str(path))
    assert result.exit_code == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert str(path) in lines[0] or path.name in lines[0]
    assert message in lines[0]
    if field:
        assert f": {field}:" in lines[0]
    assert store_digest(db_path) == before


def test_duplicate_study_name(tmp_path: Path, db_path: Path, autotune):
    path = _write(tmp_path, GOOD)
    assert autotune("study", "create", str(path)).exit_code == 0
    before = store_digest(db_path)
    result = autotune("study", "create", str(path))
    assert result.exit_code == 2
    assert "study.yaml: name: study 't1' already exists" in result.stderr
    assert store_digest(db_path) == before
    # --replace is the explicit way over it.
    assert autotune("study", "create", str(path), "--replace").exit_code == 0


def test_missing_file(autotune, db_path: Path):
    result = autotune("study", "create", "nope/missing.yaml")
    assert result.exit_code == 2
    assert result.stderr.strip() == "autotune: error: nope/missing.yaml: file not found"
    assert not db_path.exists()


def test_bad_workload_file(tmp_path: Path, autotune, monkeypatch: pytest.MonkeyPatch):
    wdir = tmp_path / "wl"
    wdir.mkdir()
    (wdir / "broken.yaml").write_text("name: broken\nsource: {kind: jsonl, path: gone.jsonl}\n")
    (wdir / "typo.yaml").write_text(
        "name: typo\nsource: {kind: inline, prompts: [hi]}\nmax_tokns: 3\n"
    )
    monkeypatch.setenv("AUTOTUNE_WORKLOADS", str(wdir))
    result = autotune("workload", "show", "broken")
    assert result.exit_code == 2
    assert "source.path" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    result = autotune("workload", "show", "typo")
    assert result.exit_code == 2
    assert "typo.yaml: max_tokns: unknown key" in result.stderr


def test_rocm_mla_warning(tmp_path: Path, autotune, monkeypatch: pytest.MonkeyPatch):
    """Kimi (MLA) on ROCm: N > 3 leaves AITER's native decode kernels, a warning (vLLM 0.32
    verifies it on a fallback path); the study's override silences it."""
    text = """
    name: k
    model: {name: kimi}
    workloads: [code]
    methods:
      - method: eagle3
        num_speculative_tokens: {min: 1, max: 5}
    """
    monkeypatch.setenv("AUTOTUNE_PLATFORM", "rocm")
    path = _write(tmp_path, text)
    result = autotune("study", "create", str(path))
    assert result.exit_code == 0, result
    assert "warning: methods.0: N > 3 on ROCm with AITER MLA" in result.stderr
    path.write_text(
        textwrap.dedent(text)
        .replace("{name: kimi}", "{name: kimi, allow_rocm_mla_override: true}")
        .replace("name: k\n", "name: k1\n")
    )
    result = autotune("study", "create", str(path))
    assert result.exit_code == 0 and "AITER" not in result.stderr
    monkeypatch.setenv("AUTOTUNE_PLATFORM", "cuda")
    path.write_text(textwrap.dedent(text).replace("name: k\n", "name: k2\n"))
    result = autotune("study", "create", str(path))
    assert result.exit_code == 0 and "AITER" not in result.stderr
