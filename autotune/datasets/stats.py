"""Length statistics of a prepared prompt set, for ``autotune workload show``."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from autotune.datasets._base import Tokenizer
from autotune.engine._base import Prompt


def _summary(prefix: str, values: Sequence[int]) -> dict[str, float | int]:
    return {
        f"{prefix}_min": min(values),
        f"{prefix}_mean": statistics.fmean(values),
        f"{prefix}_p50": statistics.median(values),
        f"{prefix}_max": max(values),
    }


def token_stats(
    prompts: Sequence[Prompt], tokenizer: Tokenizer | None = None
) -> dict[str, float | int]:
    """min/mean/p50/max of prompt characters, prompt tokens (with a tokenizer) and max_tokens.

    Keys: ``num_prompts``, ``prompt_chars_*``, ``prompt_tokens_*`` (only with a tokenizer),
    ``max_tokens_*`` and ``total_max_tokens``, with ``*`` in min, mean, p50, max. Prompt tokens
    are ``len(tokenizer.encode(text))`` of the raw text: the chat template, which the engine
    adds when the workload asks for it, is not counted.
    """
    stats: dict[str, float | int] = {"num_prompts": len(prompts)}
    if not prompts:
        return stats
    stats |= _summary("prompt_chars", [len(p.text) for p in prompts])
    if tokenizer is not None:
        stats |= _summary("prompt_tokens", [len(tokenizer.encode(p.text)) for p in prompts])
    stats |= _summary("max_tokens", [p.max_tokens for p in prompts])
    stats["total_max_tokens"] = sum(p.max_tokens for p in prompts)
    return stats
