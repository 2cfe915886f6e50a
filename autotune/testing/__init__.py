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
