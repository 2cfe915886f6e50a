"""The tiny models' names where the recipe code reads them (``_tiny_build`` imports
``REPORT_FILE`` from here; its source keys the build cache, so its imports stay as they are).

The ``tiny:NAME`` references, the cache and the builds are the engine's
(:mod:`autotune.engine.tiny`); this package imports the engine, never the reverse.
"""

from autotune.engine.tiny import (
    BUILD_VERSION,
    INFO_FILE,
    NEEDS,
    PREFIX,
    REPORT_FILE,
    TINY_NAMES,
    build,
    build_info,
    default_cache_dir,
    default_tokenizer,
    is_tiny,
    resolve,
    source_digest,
    weights_digest,
)

__all__ = [
    "BUILD_VERSION",
    "INFO_FILE",
    "NEEDS",
    "PREFIX",
    "REPORT_FILE",
    "TINY_NAMES",
    "build",
    "build_info",
    "default_cache_dir",
    "default_tokenizer",
    "is_tiny",
    "resolve",
    "source_digest",
    "weights_digest",
]
