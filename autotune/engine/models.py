"""Model references the engine resolves: ``tiny:NAME`` → a locally built checkpoint.

``tiny:`` names autotune's locally built CPU models (:mod:`autotune.engine.tiny`); any other
reference (an HF id, a path, an unknown ``PREFIX:NAME``) passes through unchanged, for vLLM to
resolve. The resolution is the engine's own, so a process that never imported anything else of
autotune (a Ray actor, the CLI) resolves ``tiny:`` the same way.
"""

from __future__ import annotations

from typing import Any


def resolve_model(ref: str) -> str:
    """The checkpoint for ``ref``: ``tiny:NAME`` is built if needed (cached on disk) and
    resolved to its directory; anything else (an HF id, a path) passes through."""
    from autotune.engine.tiny import is_tiny, resolve

    return resolve(ref) if is_tiny(ref) else ref


def default_tokenizer() -> Any:
    """The tiny CPU model's tokenizer: what prompt tokens are counted with when no tokenizer is
    given (:func:`autotune.engine.tiny.default_tokenizer`)."""
    from autotune.engine.tiny import default_tokenizer as tiny_tokenizer

    return tiny_tokenizer()
