"""Model references other packages teach autotune: ``PREFIX:NAME`` → a local checkpoint.

The engine knows only this registry. :mod:`autotune.testing` registers ``tiny:`` (autotune's
locally built CPU models) when it is imported, and advertises itself under the entry-point group
``autotune.model_refs`` so that a process that never imported it (a Ray actor, the CLI) finds it
on first use; product code never imports the testing package by name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import EngineError

ENTRY_POINT_GROUP = "autotune.model_refs"

_RESOLVERS: dict[str, Callable[[str], str]] = {}
_TOKENIZERS: list[Callable[[], Any]] = []
_loaded_entry_points = False


def register_model_refs(
    prefix: str, resolve: Callable[[str], str], tokenizer: Callable[[], Any] | None = None
) -> None:
    """Make ``prefix:NAME`` references resolve through ``resolve``; ``tokenizer`` (optional)
    is the default tokenizer for counting prompt tokens."""
    _RESOLVERS[prefix] = resolve
    if tokenizer is not None and tokenizer not in _TOKENIZERS:
        _TOKENIZERS.append(tokenizer)


def _load_entry_points() -> None:
    global _loaded_entry_points
    if _loaded_entry_points:
        return
    _loaded_entry_points = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except ImportError:  # an optional provider whose dependencies are missing
            continue


def _import_tiny_provider() -> None:
    """An editable install made before the entry point existed has no metadata for it; the
    provider is still importable by the module path the entry point names."""
    import importlib

    with contextlib.suppress(ImportError):
        importlib.import_module("autotune.testing")


def _prefix(ref: str) -> str | None:
    head, sep, _ = ref.partition(":")
    return f"{head}:" if sep and "/" not in head and len(head) > 1 else None


def resolve_model(ref: str) -> str:
    """The checkpoint for ``ref``: registered ``PREFIX:NAME`` references are resolved (and
    built if their provider builds them); anything else (an HF id, a path) passes through."""
    prefix = _prefix(ref)
    if prefix is None:
        return ref
    if prefix not in _RESOLVERS:
        _load_entry_points()
    resolve = _RESOLVERS.get(prefix)
    if resolve is None and prefix == "tiny:":
        _import_tiny_provider()
        resolve = _RESOLVERS.get(prefix)
    if resolve is None:
        if prefix == "tiny:":
            raise EngineError(
                f"{ref}: tiny models need autotune.testing (install autotune with its "
                "entry points: pip install -e .)"
            )
        return ref
    return resolve(ref)


def default_tokenizer() -> Any:
    """The first registered default tokenizer, or None (callers then count characters)."""
    if not _TOKENIZERS:
        _load_entry_points()
    if not _TOKENIZERS:
        _import_tiny_provider()
    return _TOKENIZERS[0]() if _TOKENIZERS else None


# --- where a checkpoint's weights are (the preflight asks; nothing is built or downloaded) ----

WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "consolidated.safetensors")


@dataclass(frozen=True)
class Weights:
    """Where a checkpoint's weights are, as far as this machine can tell without a network."""

    ref: str
    state: str
    """``local-build`` (a registered ``PREFIX:NAME``, built here on first use), ``local`` (a
    directory), ``cached`` (every weight file in the Hugging Face hub cache), ``partial`` (some
    of it cached), ``download`` (nothing cached: the engine would download it) or ``missing``
    (a path that does not exist)."""
    detail: str = ""

    @property
    def here(self) -> bool:
        """Whether an engine can load it without a download."""
        return self.state in ("local-build", "local", "cached")


def locate_weights(ref: str, revision: str | None = None) -> Weights:
    """Where ``ref``'s weights are: a registered local build, a directory, or the hub cache
    (``huggingface_hub.try_to_load_from_cache``, which reads the cache's ``refs/`` and
    snapshots and makes no request)."""
    prefix = _prefix(ref)
    if prefix is not None and (prefix in _RESOLVERS or prefix == "tiny:"):
        return Weights(ref, "local-build", "built locally on first use, no download")
    path = Path(ref).expanduser()
    if path.is_dir():
        return Weights(ref, "local", str(path))
    parts = ref.split("/")
    if ref.startswith((".", "/", "~")) or len(parts) != 2 or not all(parts):
        return Weights(ref, "missing", "no such directory, and not an HF id (ORG/NAME)")
    from huggingface_hub import try_to_load_from_cache

    from autotune.spec.drafts import hub_cache_dir

    cache = hub_cache_dir()

    def cached(filename: str) -> str | None:
        found = try_to_load_from_cache(ref, filename, cache_dir=cache, revision=revision)
        return found if isinstance(found, str) else None

    if cached("config.json") is None:
        return Weights(ref, "download", f"not in the hub cache {cache}")
    for index in WEIGHT_INDEXES:
        index_path = cached(index)
        if index_path is None:
            continue
        shards = _shards(Path(index_path))
        missing = [s for s in shards if cached(s) is None]
        if shards and not missing:
            return Weights(ref, "cached", f"{len(shards)} weight files in {cache}")
        return Weights(
            ref, "partial", f"{len(missing)} of {len(shards)} weight files not in {cache}"
        )
    if any(cached(f) is not None for f in WEIGHT_FILES):
        return Weights(ref, "cached", f"in {cache}")
    return Weights(ref, "partial", f"config.json but no weight files in {cache}")


def _shards(index: Path) -> list[str]:
    """The weight files a ``*.index.json`` names (empty when it cannot be read)."""
    import json

    try:
        weight_map = json.loads(index.read_text()).get("weight_map", {})
    except (OSError, ValueError, AttributeError):
        return []
    return sorted({str(v) for v in weight_map.values()}) if isinstance(weight_map, dict) else []
