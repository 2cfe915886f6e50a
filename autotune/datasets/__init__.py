"""Prompt loaders: turn a WorkloadSpec's source into sampled prompts and a content digest.

Only the standard library is imported here; ``datasets`` is imported when a ``hf`` source is
loaded.
"""

from autotune.datasets._base import Tokenizer, cache_dir
from autotune.datasets.load import load_prompts, prepare, workload_digest
from autotune.datasets.math_problems import MathProblem, generate_math_problems
from autotune.datasets.provenance import Provenance, provenance
from autotune.datasets.stats import token_stats

__all__ = [
    "MathProblem",
    "Provenance",
    "Tokenizer",
    "cache_dir",
    "generate_math_problems",
    "load_prompts",
    "prepare",
    "provenance",
    "token_stats",
    "workload_digest",
]
