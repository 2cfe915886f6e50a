"""Context-length buckets: a workload's prompts grown to about L tokens from its own text.

Each prompt of a bucket is the prompt itself preceded by the workload's other documents (its
other prompts, in source order after it, wrapping round), as many whole ones as fit in L prompt
tokens of the target's tokenizer (chat template included, as the engine sends it), then the
tail of one more to fill the rest; a prompt longer than L keeps its last L tokens. Nothing is padded with random tokens: a workload whose own
text cannot fill the bucket is refused. A conversation's history is the natural context of its
later turns; a source that carries one can hand :func:`build_bucket` its history as the
documents to place before the prompt.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.datasets.load import load_prompts, workload_digest
from autotune.engine._base import PreparedWorkload, Prompt
from autotune.errors import SpecError
from autotune.spec.context import bucket_name
from autotune.spec.workload import WorkloadSpec

if TYPE_CHECKING:
    from autotune.spec.loader import ResolvedStudy

SEPARATOR = "\n\n"
"""Between the documents of a grown prompt."""

MIN_FILL = 0.9
"""A bucket's prompts must each reach this share of L tokens: below it the workload's own text
is too short for the bucket."""

MAX_POOL = 100_000
"""Most documents drawn from a workload to fill its buckets (``WorkloadSpec.num_prompts``'s
bound)."""

_FIT_ROUNDS = 8


@dataclass(frozen=True)
class BucketStats:
    """A bucket's target and its prompts' real token counts (the target's tokenizer, as sent)."""

    context_length: int
    num_prompts: int
    prompt_tokens_mean: float
    prompt_tokens_min: int
    prompt_tokens_max: int


def token_counter(tokenizer: Any, chat_template: bool) -> Callable[[str], int]:
    """Prompt tokens of a prompt text exactly as the engine sends it: chat-templated token ids
    (``autotune.engine.vllm.args.render_prompts``) when the workload asks for the template and the
    tokenizer has one, else the text as vLLM tokenizes it (special tokens added)."""
    from autotune.engine.vllm.args import render_prompts

    def count(text: str) -> int:
        one = PreparedWorkload("", "", (Prompt(text, 1),), chat_template=chat_template)
        [rendered] = render_prompts(tokenizer, one)
        if isinstance(rendered, dict):
            return len(rendered["prompt_token_ids"])
        return len(tokenizer.encode(text))

    return count


def _others(index: int, pool: Sequence[str], own: str) -> Iterator[str]:
    """The documents placed before prompt ``index``, nearest first: the pool after it, wrapping
    round, each once, never the prompt's own text."""
    n = len(pool)
    for k in range(1, n + 1):
        doc = pool[(index + k) % n]
        if doc != own and doc.strip():
            yield doc


def grow_prompt(
    text: str,
    documents: Sequence[str] | Iterator[str],
    context_length: int,
    count: Callable[[str], int],
    raw_count: Callable[[str], int],
) -> tuple[str, int]:
    """``text`` preceded by whole ``documents`` (nearest first, so the farthest comes first in
    the prompt) while the whole stays within ``context_length`` tokens by ``count``, then the
    tail of the next document that fits; a ``text`` longer than the bucket is cut from the
    front instead. Returns the prompt and its exact token count.

    ``raw_count`` (tokens of a piece of plain text) estimates each added piece, so the whole
    prompt is tokenized a few times only, not once per document.
    """
    total = count(text)
    if total > context_length:
        return _tail(text, context_length, count)
    if total == context_length:
        return text, total
    parts: list[str] = []
    budget = context_length - total
    for doc in documents:
        cost = raw_count(doc + SEPARATOR)
        if cost <= budget:
            parts.append(doc)
            budget -= cost
            continue
        # The tail of the next document fills what is left (at a whitespace boundary).
        lo, hi = 0, len(doc)
        while lo < hi:  # the smallest start whose tail fits the budget
            mid = (lo + hi) // 2
            if raw_count(doc[mid:] + SEPARATOR) <= budget:
                hi = mid
            else:
                lo = mid + 1
        tail = doc[lo:]
        cut = tail.find(" ")
        tail = tail[cut + 1 :] if 0 <= cut < len(tail) - 1 and lo > 0 else tail
        if tail.strip():
            parts.append(tail)
        break
    grown = SEPARATOR.join([*reversed(parts), text])
    exact = count(grown)
    # Token counts of pieces are nearly but not exactly additive: trim the front until it fits.
    rounds = 0
    while exact > context_length and parts and rounds < _FIT_ROUNDS:
        first = parts[-1]
        chars_per_token = len(first) / max(1, raw_count(first))
        keep = len(first) - int((exact - context_length + 1) * chars_per_token) - 1
        if keep <= 0:
            parts.pop()
        else:
            parts[-1] = first[len(first) - keep :]
        grown = SEPARATOR.join([*reversed(parts), text])
        exact = count(grown)
        rounds += 1
    if exact > context_length and parts:  # still over: drop the partial document
        parts.pop()
        grown = SEPARATOR.join([*reversed(parts), text])
        exact = count(grown)
    return grown, exact


def _tail(text: str, context_length: int, count: Callable[[str], int]) -> tuple[str, int]:
    """A prompt longer than its bucket, cut from the front to fit (at a whitespace boundary):
    its end, which the model continues, is kept, and so is every token of it that fits."""
    lo, hi = 0, len(text)
    while lo < hi:  # the smallest start whose tail fits
        mid = (lo + hi) // 2
        if count(text[mid:]) <= context_length:
            hi = mid
        else:
            lo = mid + 1
    tail = text[lo:]
    cut = tail.find(" ")
    if 0 <= cut < len(tail) - 1:
        tail = tail[cut + 1 :]
    return tail, count(tail)


def build_bucket(
    prompts: Sequence[Prompt],
    pool: Sequence[str],
    context_length: int,
    count: Callable[[str], int],
    raw_count: Callable[[str], int],
) -> tuple[list[Prompt], list[int]]:
    """Every prompt grown to about ``context_length`` tokens from the ``pool`` of the
    workload's documents (its prompts first); each keeps its own ``max_tokens``. Returns the
    prompts and their exact token counts."""
    built: list[Prompt] = []
    tokens: list[int] = []
    for i, prompt in enumerate(prompts):
        # The prompt's place in the pool: its documents follow it there.
        start = pool.index(prompt.text) if prompt.text in pool else i
        text, n = grow_prompt(
            prompt.text, _others(start, pool, prompt.text), context_length, count, raw_count
        )
        built.append(Prompt(text, prompt.max_tokens))
        tokens.append(n)
    return built, tokens


def stats_of(context_length: int, tokens: Sequence[int]) -> BucketStats:
    return BucketStats(
        context_length=context_length,
        num_prompts=len(tokens),
        prompt_tokens_mean=statistics.fmean(tokens),
        prompt_tokens_min=min(tokens),
        prompt_tokens_max=max(tokens),
    )


def _pool(
    spec: WorkloadSpec,
    base_dir: Path,
    prompts: Sequence[Prompt],
    context_length: int,
    raw_count: Callable[[str], int],
) -> list[str]:
    """The workload's documents: its measured prompts, then more of its source (a larger seeded
    sample of the same source) until one prompt's worth of context is there or the source
    runs out."""
    texts = [p.text for p in prompts]
    need = context_length * 1.2
    size = len(texts)
    while sum(raw_count(t + SEPARATOR) for t in texts) < need and size < MAX_POOL:
        size = min(MAX_POOL, size * 4)
        more = load_prompts(spec.model_copy(update={"num_prompts": size}), base_dir)
        extra = [p.text for p in more if p.text not in texts]
        texts += extra
        if len(more) < size:  # the source is exhausted
            break
    return texts


def prepare_bucket(
    spec: WorkloadSpec,
    base_dir: Path | str,
    context_length: int,
    tokenizer: Any,
    *,
    origin: str | None = None,
    field: str = "context_lengths",
) -> tuple[PreparedWorkload, BucketStats]:
    """The workload's bucket at ``context_length`` prompt tokens, as a prepared workload named
    ``NAME@ctxL`` with its own digest, and its prompts' real token counts. ``tokenizer`` is
    the target's (a transformers tokenizer: ``encode(text, add_special_tokens=...)``). Raises
    SpecError (naming ``origin`` and ``field``) when the workload's own text cannot fill the
    bucket."""
    base = Path(base_dir)
    where = origin or spec.name
    prompts = load_prompts(spec, base)  # a source's own errors name the workload
    count = token_counter(tokenizer, spec.chat_template)
    cache: dict[str, int] = {}

    def raw_count(piece: str) -> int:
        if piece not in cache:
            cache[piece] = len(tokenizer.encode(piece, add_special_tokens=False))
        return cache[piece]

    pool = _pool(spec, base, prompts, context_length, raw_count)
    built, tokens = build_bucket(prompts, pool, context_length, count, raw_count)
    short = [n for n in tokens if n < MIN_FILL * context_length]
    if short:
        raise SpecError(
            f"workload {spec.name!r} holds too little text for a {context_length}-token bucket: "
            f"its own prompts ({len(pool)} documents) fill only {min(short)} tokens "
            f"(autotune never pads with random tokens); lower the bucket or use a workload "
            f"with more text",
            source=where,
            field=field,
        )
    prepared = PreparedWorkload(
        name=bucket_name(spec.name, context_length),
        digest=workload_digest(
            built,
            temperature=spec.temperature,
            seed=spec.seed,
            chat_template=spec.chat_template,
        ),
        prompts=tuple(built),
        temperature=spec.temperature,
        seed=spec.seed,
        chat_template=spec.chat_template,
    )
    return prepared, stats_of(context_length, tokens)


def load_target_tokenizer(resolved: ResolvedStudy) -> Any:
    """The target's tokenizer (transformers), as the engine loads it: ``tiny:NAME`` resolved
    through the engine's model hooks; remote code only with the study's consent."""
    from transformers import AutoTokenizer

    from autotune.engine import resolve_model

    tokenizer_ref = resolved.engine_args.get("tokenizer") or resolved.model
    try:
        return AutoTokenizer.from_pretrained(
            resolve_model(str(tokenizer_ref)), trust_remote_code=resolved.trust_remote_code
        )
    except Exception as exc:
        raise SpecError(
            f"cannot load the target's tokenizer to build the context buckets: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
            source=resolved.spec.name,
            field="context_lengths",
        ) from None


def prepare_measured(
    resolved: ResolvedStudy, name: str, tokenizer: Any, origin: str | None = None
) -> tuple[PreparedWorkload, BucketStats]:
    """Bucket ``name`` (``WORKLOAD@ctxL``) of a study, prepared as the study measures it."""
    from autotune.spec.context import split_bucket

    _, length = split_bucket(name)
    if length is None:  # pragma: no cover - callers pass bucket names only
        raise ValueError(f"{name!r} is not a context bucket")
    spec, base_dir = resolved.measured_workload(name)
    lengths = resolved.spec.context_lengths or []
    field = f"context_lengths.{lengths.index(length)}" if length in lengths else "context_lengths"
    return prepare_bucket(
        spec, base_dir, length, tokenizer, origin=origin or resolved.spec.name, field=field
    )
