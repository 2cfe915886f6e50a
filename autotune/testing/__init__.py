"""Test support that ships with autotune: tiny, locally built models for real vLLM engines."""

from autotune.testing.tiny import (
    BUILD_VERSION,
    TINY_NAMES,
    build,
    build_info,
    default_cache_dir,
    is_tiny,
    resolve,
    weights_digest,
)

__all__ = [
    "BUILD_VERSION",
    "TINY_NAMES",
    "build",
    "build_info",
    "default_cache_dir",
    "is_tiny",
    "resolve",
    "weights_digest",
]


def default_tokenizer() -> object:
    """The tiny CPU model's byte-level BPE (trained in seconds, without building the model):
    what `autotune workload show` counts tokens with when no --tokenizer is given."""
    import contextlib
    import tempfile
    from pathlib import Path

    from transformers import AutoTokenizer

    llama = default_cache_dir() / "llama"
    if (llama / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(llama))
    out = default_cache_dir() / "tokenizer"
    if not (out / "tokenizer.json").exists():
        from autotune.testing._tiny_build import build_tokenizer

        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent))
        build_tokenizer(tmp)
        with contextlib.suppress(OSError):  # another process finished first
            tmp.rename(out)
    return AutoTokenizer.from_pretrained(str(out))


def _register() -> None:
    from autotune.engine.models import register_model_refs
    from autotune.testing.tiny import PREFIX

    register_model_refs(PREFIX, resolve, tokenizer=default_tokenizer)


_register()
