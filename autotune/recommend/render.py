"""Rendering a recommendation: the ``--speculative-config`` JSON, a ``vllm serve`` line, YAML,
and the Dynamic SD table (``num_speculative_tokens_per_batch_size``)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from autotune.recommend.choose import Choice


def speculative_json(config: Mapping[str, Any] | None) -> str:
    """Exactly what ``--speculative-config`` takes; ``null`` means run without speculation."""
    return json.dumps(dict(config) if config else None, separators=(", ", ": "))


def serve_args(
    model: str,
    config: Mapping[str, Any] | None,
    *,
    tensor_parallel_size: int = 1,
    engine_args: Mapping[str, Any] | None = None,
) -> str:
    """The full ``vllm serve`` command line, shell-quoted.

    Every engine arg is rendered, false and zero included: a false boolean becomes vLLM's
    ``--no-<flag>`` (its argparse ``BooleanOptionalAction``), so the line runs exactly the
    measured engine config rather than whatever vLLM defaults to. None means "not set".
    """
    parts = ["vllm", "serve", model]
    args = dict(engine_args or {})
    args.setdefault("tensor_parallel_size", tensor_parallel_size)
    if args["tensor_parallel_size"] == 1 and "tensor_parallel_size" not in (engine_args or {}):
        del args["tensor_parallel_size"]  # vLLM's default; keeps the common line short
    for key, value in sorted(args.items()):
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):
            parts.append(flag if value else "--no-" + key.replace("_", "-"))
            continue
        if isinstance(value, dict | list):
            value = json.dumps(value, separators=(",", ":"))
        parts += [flag, str(value)]
    if config:
        parts += ["--speculative-config", json.dumps(dict(config), separators=(",", ":"))]
    return " ".join(shlex.quote(p) for p in parts)


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
    beat the baseline. None when speculation wins at no level.
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
        n = same.num_speculative_tokens if same is not None and beats else 0
        levels.append((choice.concurrency, n))
    table = ranges(levels)
    config = dict(lead.speculative_config or {})
    config["num_speculative_tokens"] = max(row[2] for row in table)
    config["num_speculative_tokens_per_batch_size"] = table
    return config
