"""Test support that ships with autotune: the recipes that train the tiny, locally built models
real vLLM engines run in tests and the demo (``_tiny_build``, ``_tiny_nets``, ``train_draft``);
the engine contract every backend is tested against (``engine_contract``); and the builders
tests share: landscapes (``landscapes``), study files and a store digest (``studies``), prepared
workloads (``workloads``).

The ``tiny:NAME`` references themselves are the engine's (:mod:`autotune.engine.tiny`), which
runs these recipes in a child process; this package imports the engine, never the reverse.
"""

from autotune.engine.tiny import (
    BUILD_VERSION,
    TINY_NAMES,
    build,
    build_info,
    default_cache_dir,
    default_tokenizer,
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
    "default_tokenizer",
    "is_tiny",
    "resolve",
    "weights_digest",
]
