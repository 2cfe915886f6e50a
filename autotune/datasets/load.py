"""Turn a WorkloadSpec into prompts: dispatch on the source kind, filter, sample, digest."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from autotune.datasets._base import Candidate, LoadContext, Tokenizer, select_indices
from autotune.datasets.chatlog import load_chat_jsonl, load_conversations, load_openai_batch
from autotune.datasets.files import load_csv, load_inline, load_jsonl
from autotune.datasets.hf import load_hf
from autotune.datasets.humaneval import load_humaneval
from autotune.datasets.math_problems import load_math
from autotune.datasets.mtbench import load_mtbench
from autotune.datasets.sharegpt import load_sharegpt
from autotune.engine._base import PreparedWorkload, Prompt
from autotune.spec.workload import (
    ChatJsonlSource,
    ConversationsSource,
    CsvSource,
    HFSource,
    HumanEvalSource,
    InlineSource,
    JsonlSource,
    MathSource,
    MTBenchSource,
    OpenAIBatchSource,
    ShareGPTSource,
    WorkloadSpec,
)

_READ_WHOLE: dict[type, Callable[[Any, LoadContext], list[Candidate]]] = {
    InlineSource: load_inline,
    JsonlSource: load_jsonl,
    CsvSource: load_csv,
    HumanEvalSource: load_humaneval,
    HFSource: load_hf,
    MTBenchSource: load_mtbench,
    OpenAIBatchSource: load_openai_batch,
    ChatJsonlSource: load_chat_jsonl,
    ConversationsSource: load_conversations,
}
"""The loaders of the sources that are read whole, then filtered and sampled here."""


def _chosen(ctx: LoadContext) -> list[Candidate]:
    source = ctx.spec.source
    # ShareGPT and math select as they read (an index, a generator); the rest are read whole.
    if isinstance(source, ShareGPTSource):
        return load_sharegpt(source, ctx)
    if isinstance(source, MathSource):
        return load_math(source, ctx)
    loader = _READ_WHOLE.get(type(source))
    if loader is None:  # pragma: no cover - the spec's discriminated union is exhaustive
        raise ctx.error(f"unknown source kind {source.kind!r}", "source.kind")
    candidates = loader(source, ctx)
    # Inline prompts are "used in order"; every other source is sampled.
    indices = select_indices(
        [len(c.text) for c in candidates], ctx, sample=not isinstance(source, InlineSource)
    )
    return [candidates[i] for i in indices]


def load_prompts(
    spec: WorkloadSpec,
    base_dir: Path | str,
    *,
    tokenizer: Tokenizer | None = None,
    origin: str | None = None,
) -> list[Prompt]:
    """The workload's prompts: read from its source, filtered by ``min/max_prompt_chars``, then
    a seeded sample of ``num_prompts`` in source order (all of them if the source has fewer).

    ``base_dir`` is the workload file's directory (relative paths start there); ``tokenizer``
    (the target's) measures ShareGPT reply lengths when ``use_reply_length`` is set; ``origin``
    names the workload file in errors (default: the workload's name). Raises
    :class:`autotune.errors.SpecError` for a missing file, field, column or package, or when
    no prompt is left.
    """
    ctx = LoadContext(spec, Path(base_dir), origin or spec.name, tokenizer)
    return [
        Prompt(c.text, c.max_tokens if c.max_tokens is not None else spec.max_tokens, c.messages)
        for c in _chosen(ctx)
    ]


def workload_digest(
    prompts: Sequence[Prompt], *, temperature: float, seed: int, chat_template: bool
) -> str:
    """sha256 (hex) of the canonical JSON of the prompts (with a chat log's messages, role by
    role) and the sampling settings.

    Canonical: sorted keys, no whitespace, ASCII escapes, so it is the same in every process.
    A prompt without messages hashes as before messages existed, so stored digests stay valid.
    """
    payload = {
        "prompts": [
            [p.text, p.max_tokens, [list(m) for m in p.messages]]
            if p.messages
            else [p.text, p.max_tokens]
            for p in prompts
        ],
        "temperature": float(temperature),
        "seed": seed,
        "chat_template": chat_template,
    }
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode("ascii")).hexdigest()


def prepare(
    spec: WorkloadSpec,
    base_dir: Path | str,
    *,
    tokenizer: Tokenizer | None = None,
    origin: str | None = None,
) -> PreparedWorkload:
    """:func:`load_prompts` plus the content digest that keys every measurement."""
    prompts = load_prompts(spec, base_dir, tokenizer=tokenizer, origin=origin)
    digest = workload_digest(
        prompts, temperature=spec.temperature, seed=spec.seed, chat_template=spec.chat_template
    )
    return PreparedWorkload(
        name=spec.name,
        digest=digest,
        prompts=tuple(prompts),
        temperature=spec.temperature,
        seed=spec.seed,
        chat_template=spec.chat_template,
    )
