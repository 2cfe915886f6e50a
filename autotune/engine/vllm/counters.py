"""vLLM's token and spec-decode counters: a snapshot, and the before/after delta of one run.

vLLM keeps these as Prometheus counters in the process that holds the engine client
(``vllm.v1.metrics.reader.get_metrics_snapshot()``). A measurement reads them before and after its
requests; the arithmetic here is pure so it is tested without vLLM.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

NUM_DRAFTS = "vllm:spec_decode_num_drafts"
NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
NUM_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
GENERATION_TOKENS = "vllm:generation_tokens"
PROMPT_TOKENS = "vllm:prompt_tokens"

COUNTERS = (NUM_DRAFTS, NUM_DRAFT_TOKENS, NUM_ACCEPTED_TOKENS, GENERATION_TOKENS, PROMPT_TOKENS)
"""Plain counters: one value per label set."""
VECTORS = (ACCEPTED_PER_POS,)
"""Per-position counters, which vLLM's reader returns as one list of values per label set."""


@dataclass(frozen=True)
class CounterSnapshot:
    """The counters at one instant, each summed over its label sets (engine index, model name).

    A counter vLLM has not registered (no speculative config) is simply absent.
    """

    counters: Mapping[str, int] = field(default_factory=dict)
    vectors: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class CounterDelta:
    """What one run added to the counters."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: tuple[int, ...] = ()
    generation_tokens: int = 0
    prompt_tokens: int = 0


def snapshot_from_metrics(metrics: Iterable[Any]) -> CounterSnapshot:
    """Fold vLLM's metric records (objects with ``name`` and ``value`` or ``values``) into a
    snapshot, keeping only the counters autotune reads."""
    counters: dict[str, int] = {}
    vectors: dict[str, tuple[int, ...]] = {}
    for metric in metrics:
        name = metric.name
        if name in VECTORS:
            vectors[name] = add_vectors(vectors.get(name, ()), metric.values)
        elif name in COUNTERS:
            counters[name] = counters.get(name, 0) + int(metric.value)
    return CounterSnapshot(counters=counters, vectors=vectors)


def read_snapshot() -> CounterSnapshot:
    """Read the counters of the engines in this process (vLLM imported here, lazily)."""
    from vllm.v1.metrics.reader import get_metrics_snapshot

    return snapshot_from_metrics(get_metrics_snapshot())


def add_vectors(a: Iterable[int], b: Iterable[int]) -> tuple[int, ...]:
    """Element-wise sum; the shorter vector counts as zeros past its end."""
    left, right = [int(x) for x in a], [int(x) for x in b]
    size = max(len(left), len(right))
    left += [0] * (size - len(left))
    right += [0] * (size - len(right))
    return tuple(x + y for x, y in zip(left, right, strict=True))


def delta(before: CounterSnapshot, after: CounterSnapshot) -> CounterDelta:
    """``after - before`` for every counter autotune reads.

    A counter or a position missing from ``before`` counts as zero there (vLLM registers some
    label sets lazily). A counter that went down means the engine's metrics were reset between the
    two snapshots; the difference would be meaningless, so it raises ``ValueError``.
    """

    def counter(name: str) -> int:
        value = after.counters.get(name, 0) - before.counters.get(name, 0)
        if value < 0:
            raise ValueError(f"{name} went down between snapshots (metrics reset?)")
        return value

    old = before.vectors.get(ACCEPTED_PER_POS, ())
    new = after.vectors.get(ACCEPTED_PER_POS, ())
    if len(old) > len(new):
        raise ValueError(f"{ACCEPTED_PER_POS} lost positions between snapshots (metrics reset?)")
    per_pos = add_vectors(new, (-x for x in old))
    if any(x < 0 for x in per_pos):
        raise ValueError(f"{ACCEPTED_PER_POS} went down between snapshots (metrics reset?)")
    return CounterDelta(
        num_drafts=counter(NUM_DRAFTS),
        num_draft_tokens=counter(NUM_DRAFT_TOKENS),
        num_accepted_tokens=counter(NUM_ACCEPTED_TOKENS),
        accepted_per_pos=per_pos,
        generation_tokens=counter(GENERATION_TOKENS),
        prompt_tokens=counter(PROMPT_TOKENS),
    )
