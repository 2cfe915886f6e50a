"""What every prompt loader shares: the raw candidate record, the load context, seeded selection.

Loaders read a source into :class:`Candidate` records; :func:`select_indices` then applies the
workload's character filters and draws its seeded sample, the same way for every kind.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from autotune.engine._base import ChatMessage
from autotune.errors import SpecError
from autotune.spec.reading import MAX_SOURCE_BYTES, check_size, check_text_file
from autotune.spec.workload import WorkloadSpec

if TYPE_CHECKING:
    from autotune.spec.loader import ResolvedStudy

MAX_TOKENS_LIMIT = 65_536
"""Upper bound of a per-prompt output length, the same as ``WorkloadSpec.max_tokens``'s."""


class Tokenizer(Protocol):
    """Anything that turns text into token ids, e.g. a transformers tokenizer."""

    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class Candidate:
    """A prompt as read from a source, before filtering and sampling."""

    text: str
    max_tokens: int | None = None
    """Output length the source gives for this prompt; None means the workload's max_tokens."""
    messages: tuple[ChatMessage, ...] = ()
    """A chat log's request: its whole history (``text`` is then its flattened transcript)."""


@dataclass(frozen=True)
class LoadContext:
    """The workload being loaded, where its relative paths start, and how errors name it."""

    spec: WorkloadSpec
    base_dir: Path
    origin: str
    """The workload file (or name) that SpecErrors point at."""
    tokenizer: Tokenizer | None = None

    def error(self, reason: str, field: str) -> SpecError:
        return SpecError(reason, source=self.origin, field=field)

    def resolve(self, path: str) -> Path:
        """A source path as written in the workload: ``~`` expanded, relative to its file."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else self.base_dir / p


def check_source_file(path: Path, ctx: LoadContext, *, decode: bool = False) -> None:
    """A workload's source file is a regular file of at most ``MAX_SOURCE_BYTES`` (a FIFO, a
    device or a directory is refused by its type, before it is opened); with ``decode`` it is
    also read through once, in chunks, to check that it is UTF-8 text without NUL bytes.
    Problems are SpecErrors on ``source.path`` naming the file."""
    try:
        if decode:
            check_text_file(path, str(path), MAX_SOURCE_BYTES, what="source file")
        else:
            check_size(path, str(path), MAX_SOURCE_BYTES, what="source file")
    except SpecError as exc:
        raise ctx.error(f"{exc.reason}: {path}", "source.path") from None


def check_sources(spec: WorkloadSpec, base_dir: Path, origin: str) -> None:
    """At ``study create``: every file the workload's source names (a ``path`` field) exists,
    is a regular file and decodes as UTF-8, so a bad source fails before anything is stored,
    not at ``run``."""
    path = getattr(spec.source, "path", None)
    if isinstance(path, str):
        ctx = LoadContext(spec, base_dir, origin)
        check_source_file(ctx.resolve(path), ctx, decode=True)


def check_study_sources(resolved: ResolvedStudy) -> None:
    """At ``study create``: :func:`check_sources` for every workload file of the study (a
    replayed landscape has none), so a bad source fails before anything is stored."""
    from autotune.spec.loader import display_path, find_workload

    for name, workload in resolved.workloads.items():
        path = find_workload(name)
        check_sources(workload.spec, path.parent, display_path(path))


def cache_dir() -> Path:
    """Where loaders keep derived files (indexes): ``$AUTOTUNE_CACHE/datasets``.

    ``$AUTOTUNE_CACHE`` defaults to ``~/.cache/autotune``.
    """
    root = os.environ.get("AUTOTUNE_CACHE") or "~/.cache/autotune"
    return Path(root).expanduser() / "datasets"


def one_line(exc: BaseException) -> str:
    """An exception as one short line, for SpecError reasons."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def parse_max_tokens(value: object, where: str, ctx: LoadContext) -> int:
    """A per-prompt output length from a file: a positive integer (CSV gives it as text)."""
    number: int | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    if number is None or not 1 <= number <= MAX_TOKENS_LIMIT:
        raise ctx.error(
            f"{where}: {value!r} is not an integer in [1, {MAX_TOKENS_LIMIT}]",
            "source.max_tokens_field",
        )
    return number


def passes_filter(num_chars: int, spec: WorkloadSpec) -> bool:
    return spec.min_prompt_chars <= num_chars <= spec.max_prompt_chars


def _rank(seed: int, index: int) -> bytes:
    return hashlib.sha256(f"{seed}:{index}".encode()).digest()


def select_indices(num_chars: Sequence[int], ctx: LoadContext, *, sample: bool = True) -> list[int]:
    """Indices of the prompts to use, in source order: filtered, then a seeded sample.

    Each source position gets a rank from sha256(seed, position) and the ``num_prompts``
    lowest-ranked prompts that pass the filters are kept. Unlike ``random.sample`` this does
    not depend on the Python version, and raising ``num_prompts`` (or loosening a filter) only
    adds prompts: the ones already drawn stay. ``sample=False`` keeps the first ones instead
    (inline prompts are "used in order"). A source with fewer prompts is used whole.
    """
    spec = ctx.spec
    kept = [i for i, n in enumerate(num_chars) if passes_filter(n, spec)]
    if not kept:
        raise empty_error(num_chars, ctx)
    if len(kept) <= spec.num_prompts:
        return kept
    if not sample:
        return kept[: spec.num_prompts]
    chosen = sorted(kept, key=lambda i: _rank(spec.seed, i))[: spec.num_prompts]
    return sorted(chosen)


def empty_error(num_chars: Sequence[int], ctx: LoadContext) -> SpecError:
    """The SpecError for a source that leaves no prompt, naming the filter that removed most."""
    spec = ctx.spec
    if not num_chars:
        return ctx.error("the source has no prompts", "source")
    shorter = sum(1 for n in num_chars if n < spec.min_prompt_chars)
    longer = sum(1 for n in num_chars if n > spec.max_prompt_chars)
    field = "min_prompt_chars" if shorter >= longer else "max_prompt_chars"
    return ctx.error(
        f"no prompt left after the length filters: all {len(num_chars)} fall outside "
        f"[{spec.min_prompt_chars}, {spec.max_prompt_chars}] characters "
        f"({shorter} shorter, {longer} longer)",
        field,
    )
