"""``--speculative-config`` documents in the forms vLLM takes, normalized before comparing.

A deployed config and a measured one are the same config when vLLM would run them the same
way: ``{"method": "ngram", "num_speculative_tokens": 4}`` is ngram with
``prompt_lookup_min = prompt_lookup_max = 5`` (vLLM's ``SpeculativeConfig.__post_init__``,
vllm/config/speculative.py), and a key set to its field's default says nothing. Inputs come as
inline JSON (as ``vllm serve --speculative-config`` takes them), a JSON or YAML file (the YAML
``autotune recommend --format yaml`` writes, ``speculative_config:`` at the top), or stdin.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.errors import SpecError

NGRAM_DEFAULT_LOOKUP = 5
"""vLLM's prompt_lookup_min/max when neither is given (vllm/config/speculative.py)."""


def read_config_arg(value: str, stdin: Any = None) -> tuple[str, str]:
    """(text, source) for a ``--config`` value: ``-`` (stdin), inline JSON/null, or a file."""
    if value == "-":
        import sys

        return (stdin or sys.stdin).read(), "stdin"
    stripped = value.strip()
    if stripped.startswith(("{", "[")) or stripped in ("null", "{}"):
        return stripped, "--config"
    path = Path(value)
    try:
        return path.read_text(), value
    except FileNotFoundError:
        raise SpecError(
            'no such file (give inline JSON such as \'{"method": "ngram", ...}\', a JSON or '
            "YAML file, or - for stdin)",
            source=value,
        ) from None
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror}", source=value) from None


def parse_config_text(text: str, source: str) -> dict[str, Any] | None:
    """A speculative config from JSON or YAML text; ``null`` and ``{}`` mean speculation off.

    A ``vllm serve --config`` document (what ``recommend --format yaml`` writes: the model,
    engine args and a ``speculative_config`` key) gives its ``speculative_config``; a document
    without that key and without ``method`` (a serve config without speculation) means off.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as json_exc:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            raise SpecError(
                f"neither JSON nor YAML: {json_exc.msg}",
                source=source,
                field=f"line {json_exc.lineno}, column {json_exc.colno}",
            ) from None
    serve_config = isinstance(data, dict) and ("speculative_config" in data or "model" in data)
    if serve_config and "method" not in data:
        data = data.get("speculative_config")
    if data is None or data == {}:
        return None
    if not isinstance(data, dict):
        raise SpecError(
            "expected a --speculative-config object (or null for no speculation)", source=source
        )
    return data


@functools.cache
def _vllm_defaults() -> dict[str, Any]:
    """Field defaults of vLLM's SpeculativeConfig, read from the installed vLLM's source
    (``vllm/config/speculative.py``) without importing vLLM: importing it (and torch) would cost
    a read-only command seconds and print library warnings. Fields whose default is not a literal
    (``= None``, ``= 5``, ``Field(default=...)``) are left out, so their keys are always kept.
    Empty when vLLM is not installed or its source cannot be read."""
    import ast
    import importlib.util

    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.submodule_search_locations:
        return {}
    source = Path(next(iter(spec.submodule_search_locations)), "config", "speculative.py")
    try:
        tree = ast.parse(source.read_text())
    except (OSError, SyntaxError, ValueError):
        return {}
    out: dict[str, Any] = {}
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name == "SpeculativeConfig"):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            value = stmt.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "Field":
                value = next((k.value for k in value.keywords if k.arg == "default"), None)
            if isinstance(value, ast.Constant):
                out[stmt.target.id] = value.value
    return out


def normalize(config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The config as vLLM would run it, minus keys at their defaults; None for no speculation."""
    if not config:
        return None
    out = dict(config)
    if out.get("method") == "[ngram]":
        out["method"] = "ngram"
    if out.get("method") in ("ngram", "ngram_gpu"):
        lo, hi = out.get("prompt_lookup_min"), out.get("prompt_lookup_max")
        if lo is None and hi is None:
            lo = hi = NGRAM_DEFAULT_LOOKUP
        out["prompt_lookup_min"] = hi if lo is None else lo
        out["prompt_lookup_max"] = lo if hi is None else hi
    defaults = _vllm_defaults()
    keep = {"method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"}
    return {
        k: v for k, v in sorted(out.items()) if k in keep or k not in defaults or defaults[k] != v
    }


def key(config: Mapping[str, Any] | None) -> str:
    """A comparison key: equal for configs vLLM runs the same way."""
    return json.dumps(normalize(config), sort_keys=True)


def differences(
    config: Mapping[str, Any] | None, measured: Sequence[Mapping[str, Any] | None]
) -> str | None:
    """What separates ``config`` from the nearest measured config, e.g.
    ``prompt_lookup_min 5 (measured: 2)``; None when nothing was measured."""
    mine = normalize(config) or {}
    best: tuple[int, str] | None = None
    for other in measured:
        theirs = normalize(other) or {}
        same_method = 1 if mine.get("method") != theirs.get("method") and mine and theirs else 0
        diffs = [
            f"{k} {mine.get(k, '(unset)')} (measured: {theirs.get(k, '(unset)')})"
            for k in sorted(set(mine) | set(theirs))
            if mine.get(k) != theirs.get(k)
        ]
        if not diffs:
            continue
        rank = same_method * 100 + len(diffs)
        label = json.dumps(theirs or None, sort_keys=True)
        text = f"nearest measured config {label} differs in " + ", ".join(diffs)
        if best is None or rank < best[0]:
            best = (rank, text)
    return best[1] if best else None
