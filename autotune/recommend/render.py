"""Rendering a recommendation: the ``--speculative-config`` JSON, a ``vllm serve`` line, YAML,
and the Dynamic SD table (``num_speculative_tokens_per_batch_size``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from autotune.engine.command import serve_args as serve_args  # the line is the engine's
from autotune.recommend.choose import Choice
from autotune.spec.methods import MODEL_DRAFTERS


def speculative_json(config: Mapping[str, Any] | None) -> str:
    """Exactly what ``--speculative-config`` takes; ``null`` means run without speculation."""
    return json.dumps(dict(config) if config else None, separators=(", ", ": "))


def as_yaml(
    config: Mapping[str, Any] | None,
    *,
    model: str | None = None,
    tensor_parallel_size: int | None = None,
    engine_args: Mapping[str, Any] | None = None,
) -> str:
    """A ``vllm serve --config`` YAML file: the model, every engine arg (false and zero
    included) and the speculative config; only the speculative config when ``model`` is None."""
    doc: dict[str, Any] = {}
    if model is not None:
        doc["model"] = model
        if tensor_parallel_size is not None:
            doc["tensor_parallel_size"] = tensor_parallel_size
        doc.update(sorted((k, v) for k, v in (engine_args or {}).items() if v is not None))
    doc["speculative_config"] = dict(config) if config else None
    return yaml.safe_dump(doc, sort_keys=False)


def ranges(levels: Sequence[tuple[int, int]]) -> list[list[int]]:
    """``[[lo, hi, N], ...]`` from (concurrency, N) pairs, covering 1..max concurrency with no
    gaps: each level's N holds from just above the previous level up to it; equal neighbours
    merge. N = 0 turns speculation off."""
    table: list[list[int]] = []
    lo = 1
    for concurrency, n in sorted(levels):
        if table and table[-1][2] == n:
            table[-1][1] = concurrency
        else:
            table.append([lo, concurrency, n])
        lo = concurrency + 1
    return table


def dsd_config(choices: Sequence[Choice]) -> dict[str, Any] | None:
    """A Dynamic SD speculative config: one method and draft, N following the batch size.

    vLLM's schedule varies N only, so the method (and draft) of the winner with the largest N
    leads; at each level N is that method's best measured N there, or 0 (off) where it does not
    beat the baseline or the level's own answer is off. None when speculation wins at no level.
    """
    winners = [c.best for c in choices if not c.best.is_baseline]
    if not winners:
        return None
    lead = max(winners, key=lambda s: s.num_speculative_tokens)
    levels = []
    for choice in choices:
        same = next(
            (s for s in choice.ranked if (s.method, s.draft) == (lead.method, lead.draft)), None
        )
        beats = same is not None and (
            choice.baseline is None or same.score_tok_s > choice.baseline.score_tok_s
        )
        # A level whose own answer is off (no drafter beats the baseline outside a tie) runs
        # with N = 0, whatever the lead method's score there.
        n = same.num_speculative_tokens if same is not None and beats else 0
        if choice.best.is_baseline:
            n = 0
        levels.append((choice.concurrency, n))
    table = ranges(levels)
    config = dict(lead.speculative_config or {})
    config["num_speculative_tokens"] = max(row[2] for row in table)
    config["num_speculative_tokens_per_batch_size"] = table
    return config


def context_table(buckets: Sequence[tuple[int, str, Any]]) -> list[dict[str, Any]]:
    """One entry per context-length bucket, ``(L, measured workload, config)`` in increasing L:
    the prompt-token range it answers (``[lo, hi]``; above the previous bucket up to L, the
    last one open-ended: ``hi`` null), as ``recommend --context`` picks buckets, and its config
    (a Dynamic SD one with ``--format dsd``). vLLM has no per-context switch, so each entry is
    one deployment behind a router that sends a request by its prompt length."""
    out: list[dict[str, Any]] = []
    lo = 1
    for i, (length, workload, config) in enumerate(buckets):
        hi = None if i == len(buckets) - 1 else length
        out.append(
            {
                "context_tokens": [lo, hi],
                "context_length": length,
                "workload": workload,
                "speculative_config": dict(config) if config else None,
            }
        )
        lo = length + 1
    return out


# --- `recommend --explain`: when to train a draft -------------------------------------------

MIN_DRAFT_ACCEPTANCE_LENGTH = 1.5
"""Below this mean acceptance length (vLLM's: 1 + accepted draft tokens per draft step) the best
measured trained draft of a model at a workload is judged poor, and ``recommend --explain``
suggests training one on the study's prompts (``autotune export --speculators-data``). At 1.5 a
draft step gains half a token over plain decoding, so even a cheap drafter barely pays; the
Speculators tutorial's 5K-sample sanity-check DFlash run reads 1.47."""


def training_suggestion(
    *,
    study: str,
    workload: str,
    model: str,
    rows: Sequence[Any],
    catalog_has_draft: bool,
    threshold: float = MIN_DRAFT_ACCEPTANCE_LENGTH,
) -> str | None:
    """The one stderr line `recommend --explain` adds when training a draft is the way forward:
    the catalog has no draft for ``model`` and the study measured none that accepts at least
    ``threshold``, or the best trained draft the study measured at ``workload`` (newest prompt
    set, all levels) stays below ``threshold``. None otherwise."""
    from autotune.evidence.cells import Evidence

    totals: dict[tuple[str, str | None, int], list[int]] = {}
    for r in Evidence.of(rows).workload(workload):
        if r.method not in MODEL_DRAFTERS or not r.num_drafts:
            continue
        t = totals.setdefault((r.method, r.draft, r.num_speculative_tokens), [0, 0])
        t[0] += r.num_accepted_tokens
        t[1] += r.num_drafts
    lengths = {key: 1.0 + a / d for key, (a, d) in totals.items()}
    command = (
        f"autotune export --speculators-data {study} --workload {workload} "
        f"--output speculators-{study}-{workload} --with-responses"
    )
    if lengths:
        (method, _, n), best = max(lengths.items(), key=lambda kv: kv[1])
        if best >= threshold:
            return None
        why = (
            f"the best measured draft accepts little at {workload} ({method} N={n}: acceptance "
            f"length {best:.2f} < {threshold:g})"
        )
    elif not catalog_has_draft:
        why = f"the catalog has no draft for {model} and the study measured none"
    else:
        return None
    return f"note: {why}; train one on the study's prompts with vLLM Speculators: {command}"


def catalog_has_draft(model: str) -> bool:
    """Whether the catalog lists a trained drafter for ``model`` (alias or id): a draft
    checkpoint, or the target's own MTP layers."""
    from autotune.spec.catalog import load_catalog

    found = load_catalog().resolve(model)
    if found is None:
        return False
    entry = found[1]
    return any(
        method in MODEL_DRAFTERS and (m.draft is not None or entry.mtp_layers)
        for method, m in entry.methods.items()
    )


def explain_suggestion(rec: Any) -> str | None:
    """:func:`training_suggestion` for an ``autotune.api.Recommendation``."""
    model = rec.model_alias or rec.model
    return training_suggestion(
        study=rec.study.name,
        workload=rec.workload,
        model=model,
        rows=rec.rows,
        catalog_has_draft=catalog_has_draft(model),
    )
