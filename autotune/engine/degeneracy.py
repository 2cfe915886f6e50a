"""How degenerate a run's outputs were: the guard against outputs that fake acceptance.

A model that falls into a loop ("the the the ...", a repeated line) is trivially predictable:
n-gram and draft models are accepted on nearly every token, and the speedup measured on such
outputs says nothing about real replies (a raw-completion benchmark showed 3.93 tokens per step
against 1.94 on chat because its outputs fell into a two-token loop, tokenspeed#1305). Every
measurement therefore records, over its requests' output token ids:

- ``loop_share``: the share of requests whose output *ends in a loop*: its last
  ``max(MIN_LOOP_TOKENS, MIN_LOOP_REPEATS * p)`` tokens repeat with some period
  ``p <= MAX_LOOP_PERIOD`` (every token equals the one ``p`` before it);
- ``distinct_4gram_ratio``: distinct 4-grams / all 4-grams of each output, averaged over the
  requests (1.0: no 4-gram repeats; a two-token loop tends to 2 / length);
- ``loop_at_max_tokens_share``: the share of requests that ended in a loop *and* stopped at
  their ``max_tokens`` (the loop ran to the cap; with ``ignore_eos``, as the protocol sends
  every request, a request stops at its cap unless the context length cut it short).

A measurement is *degenerate* when ``loop_share > LOOP_SHARE_LIMIT`` (0.5: most replies are
loops). Plain Python over integer lists: no vLLM, no numpy.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MAX_LOOP_PERIOD = 32
"""Longest repeating block looked for, in tokens (a repeated sentence or code line)."""
MIN_LOOP_REPEATS = 3
"""A tail counts as a loop when its block repeats at least this many times..."""
MIN_LOOP_TOKENS = 16
"""...and covers at least this many tokens (so a short ``1, 1, 1`` is no loop)."""
NGRAM = 4
LOOP_SHARE_LIMIT = 0.5
"""A measurement whose ``loop_share`` exceeds this is flagged as degenerate."""


def loop_period(tokens: Sequence[int]) -> int | None:
    """The shortest period ``p`` with which the output's tail repeats (see the module
    docstring), or None when it does not end in a loop."""
    n = len(tokens)
    for p in range(1, MAX_LOOP_PERIOD + 1):
        window = max(MIN_LOOP_TOKENS, MIN_LOOP_REPEATS * p)
        if window > n:
            break
        start = n - window
        if all(tokens[i] == tokens[i - p] for i in range(start + p, n)):
            return p
    return None


def distinct_ngram_ratio(tokens: Sequence[int], n: int = NGRAM) -> float | None:
    """Distinct n-grams / all n-grams of ``tokens``; None when it is shorter than ``n``."""
    total = len(tokens) - n + 1
    if total <= 0:
        return None
    return len({tuple(tokens[i : i + n]) for i in range(total)}) / total


@dataclass(frozen=True)
class Degeneracy:
    """A run's output degeneracy (see the module docstring); None fields: no output seen."""

    loop_share: float | None
    distinct_4gram_ratio: float | None
    loop_at_max_tokens_share: float | None

    @property
    def degenerate(self) -> bool:
        return self.loop_share is not None and self.loop_share > LOOP_SHARE_LIMIT


def degeneracy(outputs: Sequence[tuple[Sequence[int], int]]) -> Degeneracy:
    """The degeneracy of a run from each request's (output token ids, max_tokens asked)."""
    seen = [(list(ids), cap) for ids, cap in outputs if ids]
    if not seen:
        return Degeneracy(None, None, None)
    looping = [loop_period(ids) is not None for ids, _ in seen]
    at_cap = [loop and len(ids) >= cap for loop, (ids, cap) in zip(looping, seen, strict=True)]
    ratios = [r for r in (distinct_ngram_ratio(ids) for ids, _ in seen) if r is not None]
    return Degeneracy(
        loop_share=sum(looping) / len(seen),
        distinct_4gram_ratio=statistics.fmean(ratios) if ratios else None,
        loop_at_max_tokens_share=sum(at_cap) / len(seen),
    )


def flag_line(loop_share: float, distinct: float | None, where: str) -> str:
    """The one-line warning for a degenerate cell (after ``note: ``)."""
    ratio = f", distinct 4-grams {distinct:.2f}" if distinct is not None else ""
    return (
        f"degenerate outputs at {where}: {100 * loop_share:.0f}% of replies end in a repeating "
        f"loop{ratio} (limit {100 * LOOP_SHARE_LIMIT:.0f}%); drafts are accepted on loops, so "
        "this speedup overstates what real replies get"
    )
