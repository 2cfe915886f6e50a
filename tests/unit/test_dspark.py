"""DSpark drafts: N is the draft's trained block, read from its config.json wherever it lives.

The configs below carry the keys the published drafts' configs carry (``block_size`` for
DeepSpec's Qwen3 drafts, ``dspark_block_size`` in DeepSeek-V4's own config, the speculators
export layout with ``speculators_model_type``); they are written into a real Hugging Face hub
cache layout and found there, as a downloaded draft would be.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import SpecError
from autotune.spec.drafts import block_draft, find_config, hub_cache_dir
from autotune.spec.loader import ResolvedStudy, resolve_study, validate
from autotune.spec.study import StudySpec

DRAFT = "deepseek-ai/dspark_qwen3_4b_block7"
# As in the draft's published config: Qwen3DSparkModel, model_type qwen3, block_size 7.
DEEPSPEC_CONFIG = {"architectures": ["Qwen3DSparkModel"], "model_type": "qwen3", "block_size": 7}


def cache_draft(hub: Path, repo: str, config: dict[str, Any], commit: str = "a" * 40) -> Path:
    """Put ``config`` where ``hf download`` would: blobs, a snapshot and ``refs/main``."""
    root = hub / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    snap = root / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (snap / "config.json").write_text(json.dumps(config))
    return snap / "config.json"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "hub"
    path.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(path))
    return path


def resolve(draft: str | None, n: dict[str, int] | None = None, model: str = "Qwen/Qwen3-4B"):
    method: dict[str, Any] = {"method": "dspark"}
    if draft is not None:
        method["draft"] = draft
    if n is not None:
        method["num_speculative_tokens"] = n
    spec = validate(
        StudySpec,
        {"name": "d", "model": {"name": model}, "workloads": ["code"], "methods": [method]},
        "d.yaml",
    )
    return resolve_study(spec, "d.yaml", platform="cuda")


def only_n(resolved: ResolvedStudy) -> list[int]:
    (method,) = resolved.methods
    return method.num_speculative_tokens.values()


def test_a_cached_hub_draft_gives_n_equal_to_its_block(hub: Path) -> None:
    """The bug: a hub id's block size was read only from a local directory, so N was 15..15."""
    cache_draft(hub, DRAFT, DEEPSPEC_CONFIG)
    assert only_n(resolve(DRAFT)) == [7]


def test_hf_home_is_honoured_when_hf_hub_cache_is_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache_dir() == tmp_path / "hf" / "hub"
    cache_draft(tmp_path / "hf" / "hub", DRAFT, {**DEEPSPEC_CONFIG, "block_size": 5})
    assert only_n(resolve(DRAFT)) == [5]


def test_the_snapshot_refs_main_points_at_wins(hub: Path) -> None:
    cache_draft(hub, DRAFT, {**DEEPSPEC_CONFIG, "block_size": 5}, commit="b" * 40)
    path = cache_draft(hub, DRAFT, DEEPSPEC_CONFIG, commit="c" * 40)  # refs/main -> c...
    assert find_config(DRAFT) == path
    assert only_n(resolve(DRAFT)) == [7]


def test_a_local_draft_directory_and_the_v4_key(tmp_path: Path, hub: Path) -> None:
    local = tmp_path / "my-dspark"
    local.mkdir()
    (local / "config.json").write_text(json.dumps({"dspark_block_size": 5, "model_type": "x"}))
    assert only_n(resolve(str(local))) == [5]


@pytest.mark.parametrize(
    ("extra", "n"),
    [({}, 7), ({"sample_from_anchor": False}, 7), ({"sample_from_anchor": True}, 8)],
)
def test_speculators_exports_follow_their_block_layout(
    hub: Path, extra: dict[str, Any], n: int
) -> None:
    """vLLM's speculators loader defaults sample_from_anchor to False: 1 + N slots, N = block - 1."""
    config = {
        "architectures": ["DSparkDraftModel"],
        "speculators_model_type": "dspark",
        "block_size": 8,
        **extra,
    }
    cache_draft(hub, "acme/speculator.dspark", config)
    info = block_draft("acme/speculator.dspark")
    assert info is not None and info.block_size == 8
    assert only_n(resolve("acme/speculator.dspark")) == [n]


def test_an_uncached_draft_is_a_clear_error(hub: Path) -> None:
    with pytest.raises(SpecError) as exc:
        resolve(DRAFT)
    err = exc.value
    assert err.field == "methods.0.draft"
    assert "not in the hub cache" in err.reason and str(hub) in err.reason
    assert f"hf download {DRAFT} config.json" in err.reason


def test_a_config_without_a_block_is_a_clear_error(hub: Path) -> None:
    path = cache_draft(hub, DRAFT, {"model_type": "qwen3"})
    with pytest.raises(SpecError, match="has no block_size or dspark_block_size") as exc:
        resolve(DRAFT)
    assert str(path) in exc.value.reason


def test_n_other_than_the_block_is_refused(hub: Path) -> None:
    cache_draft(hub, DRAFT, DEEPSPEC_CONFIG)
    with pytest.raises(SpecError, match=r"outside \[7, 7\] for dspark") as exc:
        resolve(DRAFT, n={"min": 3, "max": 7})
    assert exc.value.field == "methods.0.num_speculative_tokens"
    assert only_n(resolve(DRAFT, n={"min": 7, "max": 7})) == [7]


def test_catalog_defaults_skip_a_dspark_draft_that_is_not_cached(hub: Path) -> None:
    spec = validate(
        StudySpec, {"name": "g", "model": {"name": "gemma4"}, "workloads": ["code"]}, "g.yaml"
    )
    resolved = resolve_study(spec, "g.yaml", platform="cuda")
    assert "dspark" not in [m.method for m in resolved.methods]
    assert any(
        "dspark skipped" in w and "makora-ai/gemma4-26b-a4b-dspark" in w for w in resolved.warnings
    )
    # Once its config is there, the catalog's draft is searched at its block.
    cache_draft(
        hub,
        "makora-ai/gemma4-26b-a4b-dspark",
        {"speculators_model_type": "dspark", "block_size": 7},
    )
    resolved = resolve_study(spec, "g.yaml", platform="cuda")
    (dspark,) = [m for m in resolved.methods if m.method == "dspark"]
    assert dspark.draft == "makora-ai/gemma4-26b-a4b-dspark"
    assert dspark.num_speculative_tokens.values() == [6]


def test_study_create_names_the_field_and_writes_nothing(
    hub: Path, tmp_path: Path, db_path: Path, autotune
) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            name: d
            model: {{name: Qwen/Qwen3-4B}}
            workloads: [code]
            methods:
              - method: dspark
                draft: {DRAFT}
            """
        )
    )
    result = autotune("study", "create", str(path))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "methods.0.draft" in lines[0] and "Traceback" not in lines[0]
    assert not db_path.exists()
    cache_draft(hub, DRAFT, DEEPSPEC_CONFIG)
    assert autotune("study", "create", str(path)).exit_code == 0


def test_dspark_without_a_draft_asks_for_one(hub: Path) -> None:
    with pytest.raises(SpecError, match="needs a draft checkpoint") as exc:
        resolve(None)
    assert exc.value.field == "methods.0.draft"
