"""by_identity: a pure function of immutable records answered once per list of the same objects."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.search.memo import by_identity


@dataclass(frozen=True)
class Rec:
    value: int


def test_the_same_objects_are_answered_once_equal_copies_again():
    calls: list[tuple[Rec, ...]] = []

    @by_identity(4)
    def total(recs: Sequence[Rec]) -> int:
        calls.append(tuple(recs))
        return sum(r.value for r in recs)

    a, b = Rec(1), Rec(2)
    assert total([a, b]) == 3 and total([a, b]) == 3 and total((a, b)) == 3
    assert len(calls) == 1
    assert total([b, a]) == 3 and len(calls) == 2  # order is part of the key
    assert total([Rec(1), Rec(2)]) == 3 and len(calls) == 3  # equal, not the same objects


def test_the_oldest_answer_goes_first_and_a_copy_protects_the_kept_one():
    calls = 0

    @by_identity(2, copy=lambda d: dict(d))
    def index(recs: Sequence[Rec]) -> dict[int, Rec]:
        nonlocal calls
        calls += 1
        return {r.value: r for r in recs}

    a, b, c = Rec(1), Rec(2), Rec(3)
    first = index([a])
    first[99] = c  # a caller changing its answer changes nobody else's
    assert index([a]) == {1: a} and calls == 1
    index([b]), index([c])  # two newer answers: [a]'s is dropped
    assert calls == 3
    index([a])
    assert calls == 4
