"""A draft checkpoint's ``config.json``, wherever it lives, and the block facts rules need.

A block drafter's N is fixed by how it was trained, and the only place that says so is the
draft's own ``config.json``. It may sit in a local directory (the draft given as a path) or in
the Hugging Face hub cache (the draft given as ``org/name`` and downloaded before), so both are
read: a path first, then the hub cache under ``$HF_HUB_CACHE`` (or ``$HF_HOME/hub``, or
``~/.cache/huggingface/hub``), following the cache's ``refs/`` to the snapshot the revision
points at as ``huggingface_hub.try_to_load_from_cache`` does. Nothing is downloaded; the package
itself is not imported (the bottom layer imports only pydantic and yaml, and autotune's base
install does not bring it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def hub_cache_dir() -> Path:
    """The hub cache directory, from the environment at call time (as huggingface_hub reads it)."""
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if cache:
        return Path(cache).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface"
    )
    return Path(home).expanduser() / "hub"


def _looks_like_repo_id(ref: str) -> bool:
    parts = ref.split("/")
    return len(parts) == 2 and all(parts) and not ref.startswith((".", "~", "/"))


def find_config(ref: str | None, revision: str | None = None) -> Path | None:
    """The ``config.json`` of a checkpoint given as a local directory or a cached hub id.

    None when there is none to read here (``tiny:`` drafts, hub ids never downloaded).
    """
    if not ref or ref.startswith("tiny:"):
        return None
    local = Path(ref).expanduser()
    if local.is_dir():
        path = local / "config.json"
        return path if path.is_file() else None
    if not _looks_like_repo_id(ref):
        return None
    return hub_cached(ref, "config.json", revision)


def hub_cached(repo_id: str, filename: str, revision: str | None = None) -> Path | None:
    """``filename`` of model ``repo_id`` in the hub cache, found as
    ``huggingface_hub.try_to_load_from_cache`` finds it, through the cache's documented layout
    (huggingface.co/docs/huggingface_hub/guides/manage-cache): ``refs/REVISION`` names the
    commit, ``snapshots/COMMIT/FILE`` is the file, ``.no_exist/COMMIT/FILE`` records its absence.
    None when it is not cached."""
    repo = hub_cache_dir() / f"models--{repo_id.replace('/', '--')}"
    commit = revision or "main"
    ref = repo / "refs" / commit
    if ref.is_file():
        try:
            with ref.open(encoding="utf-8", errors="replace") as f:
                commit = f.read(256).strip()  # a 40-hex commit id
        except OSError:
            return None
    if not commit or commit in (".", "..") or "/" in commit or os.sep in commit:
        return None
    if (repo / ".no_exist" / commit / filename).is_file():
        return None
    path = repo / "snapshots" / commit / filename
    return path if path.is_file() else None


def read_config(ref: str | None, revision: str | None = None) -> tuple[dict[str, Any], Path] | None:
    """The parsed ``config.json`` and where it was read; None when absent or unreadable."""
    path = find_config(ref, revision)
    if path is None:
        return None
    from autotune.errors import SpecError
    from autotune.spec.reading import MIB, load_json, read_text

    try:  # bounded: a FIFO or a device in a checkpoint folder must not hang `study create`
        data = load_json(read_text(path, str(path), 16 * MIB), str(path))
    except SpecError:
        return None
    return (data, path) if isinstance(data, dict) else None


@dataclass(frozen=True)
class BlockDraft:
    """What a block drafter's config says about its block."""

    block_size: int
    """The block the draft was trained with."""
    sample_from_anchor: bool
    """True: every slot of the block predicts a token (DSpark's anchor-first layout), so vLLM
    drafts ``block_size`` tokens a step; False: the anchor slot holds the bonus token and
    ``block_size - 1`` slots predict (the DFlash-style ``1 + N`` layout of speculators exports)."""
    config: Path
    """The config.json it was read from."""


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def block_draft(ref: str | None, revision: str | None = None) -> BlockDraft | None:
    """The block facts of a DFlash or DSpark draft from its config; None when unknown.

    The keys are the ones vLLM 0.32 reads: ``block_size`` (DeepSpec and speculators exports),
    ``dspark_block_size`` (DeepSeek-V4 style, in the target's own config), or ``block_size``
    under ``dflash_config`` (z-lab / SpecForge exports). ``sample_from_anchor`` defaults as
    vLLM's loaders default it: True for native DSpark configs (``DSparkSpeculator``), False
    for speculators-format ones (``speculators/algos.py``: ``update_dspark``).
    """
    found = read_config(ref, revision)
    if found is None:
        return None
    cfg, path = found
    raw_nested = cfg.get("dflash_config")
    nested: dict[str, Any] = raw_nested if isinstance(raw_nested, dict) else {}
    block = (
        _int(cfg.get("block_size"))
        or _int(cfg.get("dspark_block_size"))
        or _int(nested.get("block_size"))
    )
    if block is None:
        return None
    speculators = "speculators_model_type" in cfg
    anchor = cfg.get("sample_from_anchor", nested.get("sample_from_anchor", not speculators))
    return BlockDraft(block, bool(anchor), path)


def unknown_block_reason(ref: str | None) -> str:
    """Why a DSpark draft's N cannot be known here, and how to make it known, as one line."""
    head = f"cannot tell the block size of DSpark draft {ref}"
    tail = "; vLLM runs a DSpark draft at N = its trained block, so autotune needs it"
    if not ref:
        return "the DSpark method needs a draft checkpoint; set draft"
    found = find_config(ref)
    if found is not None:
        return f"{head}: {found} has no block_size or dspark_block_size{tail}"
    if _looks_like_repo_id(ref) and not Path(ref).expanduser().exists():
        return (
            f"{head}: its config.json is not in the hub cache {hub_cache_dir()} "
            f"(fetch it: hf download {ref} config.json){tail}"
        )
    return f"{head}: no config.json in {ref}{tail}"
