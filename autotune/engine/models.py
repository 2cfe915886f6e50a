"""Model references other packages teach autotune: ``PREFIX:NAME`` → a local checkpoint.

The engine knows only this registry. :mod:`autotune.testing` registers ``tiny:`` (autotune's
locally built CPU models) when it is imported, and advertises itself under the entry-point group
``autotune.model_refs`` so that a process that never imported it (a Ray actor, the CLI) finds it
on first use; product code never imports the testing package by name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
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
