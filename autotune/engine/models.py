"""Model references the engine resolves: ``tiny:NAME`` → a locally built checkpoint.

``tiny:`` names autotune's locally built CPU models (:mod:`autotune.engine.tiny`); any other
reference (an HF id, a path, an unknown ``PREFIX:NAME``) passes through unchanged, for vLLM to
resolve. The resolution is the engine's own, so a process that never imported anything else of
autotune (a Ray actor, the CLI) resolves ``tiny:`` the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


def resolve_model(ref: str) -> str:
    """The checkpoint for ``ref``: ``tiny:NAME`` is built if needed (cached on disk) and
    resolved to its directory; anything else (an HF id, a path) passes through."""
    from autotune.engine.tiny import is_tiny, resolve

    return resolve(ref) if is_tiny(ref) else ref


def default_tokenizer() -> Any:
    """The tiny CPU model's tokenizer, a ``transformers`` one with its chat template
    (:func:`autotune.engine.tiny.default_tokenizer`)."""
    from autotune.engine.tiny import default_tokenizer as tiny_tokenizer

    return tiny_tokenizer()


def default_token_counter() -> Any:
    """What prompt tokens are counted with when no tokenizer is given: the tiny CPU model's BPE,
    ``encode`` only (:func:`autotune.engine.tiny.default_token_counter`)."""
    from autotune.engine.tiny import default_token_counter as tiny_counter

    return tiny_counter()


# --- where a checkpoint's weights are (the preflight asks; nothing is built or downloaded) ----

WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "consolidated.safetensors")


@dataclass(frozen=True)
class Weights:
    """Where a checkpoint's weights are, as far as this machine can tell without a network."""

    ref: str
    state: str
    """``local-build`` (a ``tiny:NAME`` model, built here on first use), ``local`` (a
    directory), ``cached`` (every weight file in the Hugging Face hub cache), ``partial`` (some
    of it cached), ``download`` (nothing cached: the engine would download it) or ``missing``
    (a path that does not exist)."""
    detail: str = ""

    @property
    def here(self) -> bool:
        """Whether an engine can load it without a download."""
        return self.state in ("local-build", "local", "cached")


def locate_weights(ref: str, revision: str | None = None) -> Weights:
    """Where ``ref``'s weights are: a local ``tiny:`` build, a directory, or the hub cache
    (``huggingface_hub.try_to_load_from_cache``, which reads the cache's ``refs/`` and
    snapshots and makes no request)."""
    from autotune.engine.tiny import is_tiny

    if is_tiny(ref):
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
