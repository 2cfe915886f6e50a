"""The context-length axis: a study's ``context_lengths`` make one workload variant per bucket.

A bucket of workload ``code`` at ``L`` prompt tokens is measured as the workload named
``code@ctx<L>`` (:func:`bucket_name`); everything downstream (search, store, choose) treats it
as just another workload, and the user-facing commands read the axis back with
:func:`split_bucket` and :func:`pick_bucket`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

SEPARATOR = "@ctx"
"""Between a workload's name and its bucket's context length (``code@ctx1024``); ``@`` is not
allowed in workload names, so a variant never collides with a workload file."""

_BUCKET = re.compile(r"^(?P<base>.+)@ctx(?P<length>[1-9][0-9]*)$")


def bucket_name(workload: str, context_length: int) -> str:
    """The measured workload of ``workload``'s bucket at ``context_length`` prompt tokens."""
    return f"{workload}{SEPARATOR}{context_length}"


def split_bucket(name: str) -> tuple[str, int | None]:
    """``("code", 1024)`` for ``code@ctx1024``; ``(name, None)`` for a plain workload."""
    m = _BUCKET.match(name)
    if m is None:
        return name, None
    return m.group("base"), int(m.group("length"))


def base_workload(name: str) -> str:
    """The workload a measured name belongs to (itself for a plain workload)."""
    return split_bucket(name)[0]


@dataclass(frozen=True)
class BucketPick:
    """Which measured bucket answers a ``--context L`` question, and the line that says so."""

    workload: str
    """The measured workload name (``code@ctx1024``)."""
    context_length: int
    asked: int
    measured: tuple[int, ...]

    def line(self) -> str:
        """The stderr note (after ``note: ``) of `recommend` and `check`."""
        lengths = ", ".join(map(str, self.measured))
        if self.context_length >= self.asked:
            how = "the smallest measured bucket at or above it"
        else:
            how = "no measured bucket reaches it, so the largest one"
        return (
            f"context {self.asked} tokens: answering from the bucket of {self.context_length} "
            f"prompt tokens ({self.workload}), {how} (measured buckets: {lengths})"
        )


def buckets_of(workload: str, names: Iterable[str]) -> dict[int, str]:
    """The measured buckets of ``workload`` among ``names``: context length -> name."""
    out: dict[int, str] = {}
    for name in names:
        base, length = split_bucket(name)
        if base == workload and length is not None:
            out[length] = name
    return dict(sorted(out.items()))


def pick_bucket(workload: str, context: int, names: Iterable[str]) -> BucketPick | None:
    """The bucket of ``workload`` for a request of ``context`` prompt tokens: the smallest
    measured one at or above it (its prompts were at least that long), else the largest; None
    when ``workload`` has no measured bucket."""
    found = buckets_of(workload, names)
    if not found:
        return None
    lengths = tuple(found)
    chosen = next((n for n in lengths if n >= context), lengths[-1])
    return BucketPick(found[chosen], chosen, context, lengths)
