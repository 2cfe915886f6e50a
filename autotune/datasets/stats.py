"""Length statistics of a prepared prompt set, for ``autotune workload show``: summaries,
length histograms and the turn counts of a chat log's requests."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Bin:
    """One histogram bin: values in ``[lo, hi)`` (the last bin includes ``hi``)."""

    lo: int
    hi: int
    count: int


def histogram(values: Sequence[int], bins: int = 8) -> list[Bin]:
    """Equal-width integer bins from min to max of ``values`` (one bin when all are equal)."""
    if not values:
        return []
    lo, hi = min(values), max(values)
    if lo == hi:
        return [Bin(lo, hi, len(values))]
    width = max(1, math.ceil((hi - lo + 1) / bins))
    edges = list(range(lo, hi + 1, width))
    counts = Counter(min((v - lo) // width, len(edges) - 1) for v in values)
    return [Bin(edge, min(edge + width, hi), counts.get(i, 0)) for i, edge in enumerate(edges)]


def prompt_lengths(prompts: Sequence[Prompt], tokenizer: Tokenizer | None = None) -> list[int]:
    """Each prompt's length in tokens of its text (characters without a tokenizer)."""
    if tokenizer is None:
        return [len(p.text) for p in prompts]
    return [len(tokenizer.encode(p.text)) for p in prompts]


def turn_counts(prompts: Sequence[Prompt]) -> dict[int, int]:
    """How many requests ask for their conversation's 1st, 2nd, ... user turn."""
    return dict(sorted(Counter(p.turn for p in prompts).items()))
