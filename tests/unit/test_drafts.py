"""spec.drafts finds a draft's file in the Hugging Face hub cache exactly where
``huggingface_hub.try_to_load_from_cache`` finds it, without importing the package (spec is the
bottom layer). The caches are real cache layouts, as ``hf download`` leaves them."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.spec.drafts import hub_cached

REPO = "org/draft"
B, C = "b" * 40, "c" * 40


def _snapshot(hub: Path, commit: str, repo: str = REPO) -> Path:
    snap = hub / f"models--{repo.replace('/', '--')}" / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (snap / "config.json").write_text("{}")
    return snap / "config.json"


def _ref(hub: Path, name: str, commit: str) -> None:
    refs = hub / f"models--{REPO.replace('/', '--')}" / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / name).write_text(commit)


def _no_exist(hub: Path, commit: str) -> None:
    marker = hub / f"models--{REPO.replace('/', '--')}" / ".no_exist" / commit / "config.json"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("")


# name -> (how the cache is laid out, revision asked for, whether the file is found)
CASES = {
    "main": (lambda h: (_snapshot(h, C), _ref(h, "main", C)), None, True),
    "main-points-past-an-older-snapshot": (
        lambda h: (_snapshot(h, B), _snapshot(h, C), _ref(h, "main", C)),
        None,
        True,
    ),
    "main-points-at-a-missing-snapshot": (
        lambda h: (_snapshot(h, B), _ref(h, "main", C)),
        None,
        False,
    ),
    "a-commit-by-id": (lambda h: (_snapshot(h, B), _snapshot(h, C), _ref(h, "main", C)), B, True),
    "a-tag": (lambda h: (_snapshot(h, B), _ref(h, "main", C), _ref(h, "v1", B)), "v1", True),
    "recorded-as-absent": (lambda h: (_ref(h, "main", C), _no_exist(h, C)), None, False),
    "never-downloaded": (lambda h: None, None, False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_hub_cache_is_read_as_huggingface_hub_reads_it(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hf = pytest.importorskip("huggingface_hub")
    layout, revision, found = CASES[case]
    hub = tmp_path / "hub"
    hub.mkdir()
    layout(hub)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    theirs = hf.try_to_load_from_cache(REPO, "config.json", cache_dir=hub, revision=revision)
    expected = Path(theirs) if isinstance(theirs, str) else None
    assert hub_cached(REPO, "config.json", revision) == expected
    assert (expected is not None) is found
