"""The ``vllm serve`` command line that starts an engine config: what a recommendation prints
and what the ``vllm-serve`` backend (:mod:`autotune.engine.server`) runs, one rendering for both."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any


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
