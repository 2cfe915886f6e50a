"""The before/after arithmetic of vLLM's spec-decode and token counters, without vLLM."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from autotune.engine.vllm.counters import (
    ACCEPTED_PER_POS,
    GENERATION_TOKENS,
    NUM_ACCEPTED_TOKENS,
    NUM_DRAFT_TOKENS,
    NUM_DRAFTS,
    PROMPT_TOKENS,
    CounterDelta,
    CounterSnapshot,
    add_vectors,
    delta,
    snapshot_from_metrics,
)


# Stand-ins shaped like vllm.v1.metrics.reader's Counter, Vector and Gauge records.
@dataclass
class Counter:
    name: str
    value: int
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Vector:
    name: str
    values: list[int]
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Gauge:
    name: str
    value: float
    labels: dict[str, str] = field(default_factory=dict)


def test_counters_sum_over_label_sets_and_others_are_ignored() -> None:
    snap = snapshot_from_metrics(
        [
            Counter(NUM_DRAFTS, 10, {"engine": "0"}),
            Counter(NUM_DRAFTS, 5, {"engine": "1"}),
            Counter(GENERATION_TOKENS, 100, {"engine": "0"}),
            Counter("vllm:request_success", 7),
            Gauge("vllm:num_requests_running", 3.0),
        ]
    )
    assert snap.counters == {NUM_DRAFTS: 15, GENERATION_TOKENS: 100}
    assert snap.vectors == {}


def test_vectors_sum_per_position_with_different_lengths() -> None:
    snap = snapshot_from_metrics(
        [
            Vector(ACCEPTED_PER_POS, [10, 7, 2], {"engine": "0"}),
            Vector(ACCEPTED_PER_POS, [5, 3], {"engine": "1"}),
        ]
    )
    assert snap.vectors[ACCEPTED_PER_POS] == (15, 10, 2)


def test_add_vectors_pads_the_shorter_with_zeros() -> None:
    assert add_vectors([1, 2], [10, 20, 30]) == (11, 22, 30)
    assert add_vectors([], []) == ()


def test_delta_of_a_spec_decode_run() -> None:
    before = CounterSnapshot(
        counters={
            NUM_DRAFTS: 100,
            NUM_DRAFT_TOKENS: 300,
            NUM_ACCEPTED_TOKENS: 150,
            GENERATION_TOKENS: 1000,
            PROMPT_TOKENS: 400,
        },
        vectors={ACCEPTED_PER_POS: (80, 50, 20)},
    )
    after = CounterSnapshot(
        counters={
            NUM_DRAFTS: 130,
            NUM_DRAFT_TOKENS: 390,
            NUM_ACCEPTED_TOKENS: 200,
            GENERATION_TOKENS: 1256,
            PROMPT_TOKENS: 520,
        },
        vectors={ACCEPTED_PER_POS: (105, 67, 28)},
    )
    d = delta(before, after)
    assert d == CounterDelta(
        num_drafts=30,
        num_draft_tokens=90,
        num_accepted_tokens=50,
        accepted_per_pos=(25, 17, 8),
        generation_tokens=256,
        prompt_tokens=120,
    )
    assert sum(d.accepted_per_pos) == d.num_accepted_tokens


def test_positions_and_counters_only_in_after_count_from_zero() -> None:
    before = CounterSnapshot(counters={GENERATION_TOKENS: 50}, vectors={ACCEPTED_PER_POS: (4,)})
    after = CounterSnapshot(
        counters={GENERATION_TOKENS: 80, NUM_DRAFTS: 9},
        vectors={ACCEPTED_PER_POS: (6, 3, 1)},
    )
    d = delta(before, after)
    assert d.accepted_per_pos == (2, 3, 1)
    assert d.num_drafts == 9
    assert d.generation_tokens == 30


def test_baseline_has_no_spec_counters() -> None:
    before = CounterSnapshot(counters={GENERATION_TOKENS: 10, PROMPT_TOKENS: 4})
    after = CounterSnapshot(counters={GENERATION_TOKENS: 74, PROMPT_TOKENS: 12})
    d = delta(before, after)
    assert (d.num_drafts, d.num_draft_tokens, d.num_accepted_tokens) == (0, 0, 0)
    assert d.accepted_per_pos == ()
    assert (d.generation_tokens, d.prompt_tokens) == (64, 8)


def test_empty_snapshots_give_an_empty_delta() -> None:
    assert delta(CounterSnapshot(), CounterSnapshot()) == CounterDelta()


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (CounterSnapshot(counters={NUM_DRAFTS: 10}), CounterSnapshot(counters={NUM_DRAFTS: 3})),
        (CounterSnapshot(counters={NUM_DRAFTS: 10}), CounterSnapshot()),
        (
            CounterSnapshot(vectors={ACCEPTED_PER_POS: (5, 5)}),
            CounterSnapshot(vectors={ACCEPTED_PER_POS: (6, 4)}),
        ),
        (
            CounterSnapshot(vectors={ACCEPTED_PER_POS: (5, 5, 5)}),
            CounterSnapshot(vectors={ACCEPTED_PER_POS: (6, 6)}),
        ),
    ],
)
def test_counters_that_go_down_are_refused(before: CounterSnapshot, after: CounterSnapshot) -> None:
    with pytest.raises(ValueError, match="metrics reset"):
        delta(before, after)
