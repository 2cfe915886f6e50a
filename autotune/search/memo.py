"""Memoizing a pure function of stored records by which records it is given.

The tuner hands its strategy the same :class:`autotune.store.MeasurementRecord` objects from
event to event (a record is frozen, and read from the store once), in lists rebuilt for every
question. A function of nothing but those records (a summary of each config's repeats, say) then
gives the same answer for the same objects in the same order, so the answer is kept, keyed by the
objects' identities. The cache holds the objects themselves, so no identity it keys on can be
taken by another object while the entry lives.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, overload

T = TypeVar("T")
R = TypeVar("R")


class _Wrap(Protocol):
    def __call__(self, fn: Callable[[Sequence[T]], R], /) -> Callable[[Sequence[T]], R]: ...


class _WrapTo(Protocol[R]):
    def __call__(self, fn: Callable[[Sequence[T]], R], /) -> Callable[[Sequence[T]], R]: ...


@overload
def by_identity(size: int) -> _Wrap: ...


@overload
def by_identity(size: int, copy: Callable[[R], R]) -> _WrapTo[R]: ...


def by_identity(size: int, copy: Callable[[Any], Any] | None = None) -> Any:
    """Keep the last ``size`` answers of a one-argument function of immutable objects, keyed by
    the identities of the objects in its argument (in order). ``copy``: how a kept answer is
    handed out (for a mutable one, so no caller can change what the next is given)."""

    def wrap(fn: Callable[[Sequence[Any]], Any]) -> Callable[[Sequence[Any]], Any]:
        kept: OrderedDict[tuple[int, ...], tuple[tuple[Any, ...], Any]] = OrderedDict()

        @functools.wraps(fn)
        def memo(items: Sequence[Any]) -> Any:
            held = tuple(items)
            key = tuple(map(id, held))
            hit = kept.get(key)
            if hit is None:
                hit = kept[key] = (held, fn(held))
                if len(kept) > size:
                    kept.popitem(last=False)
            else:
                kept.move_to_end(key)
            return hit[1] if copy is None else copy(hit[1])

        return memo

    return wrap
