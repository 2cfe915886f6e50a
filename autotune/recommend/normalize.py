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

MAX_CONFIG_JSON = 16 * 1024
"""Largest --speculative-config (as JSON) ``check`` compares."""

NGRAM_DEFAULT_LOOKUP = 5
"""vLLM's prompt_lookup_min/max when neither is given (vllm/config/speculative.py)."""


def read_config_arg(value: str, stdin: Any = None) -> tuple[str, str]:
    """(text, source) for a ``--config`` value: ``-`` (stdin), inline JSON/null, or a file.

    Bounded (``autotune.spec.reading``): at most ``MAX_CONFIG_BYTES`` from stdin or a file,
    regular files only (a FIFO or a device is refused before it is opened)."""
    import os

    from autotune.spec.reading import MAX_CONFIG_BYTES, excerpt, read_text, size_text

    if value == "-":
        import sys

        text = (stdin or sys.stdin).read(MAX_CONFIG_BYTES + 1)
        if len(text) > MAX_CONFIG_BYTES:
            raise SpecError(f"config larger than {size_text(MAX_CONFIG_BYTES)}", source="stdin")
        if "\x00" in text:
            raise SpecError("not a text document (NUL byte)", source="stdin")
        return text, "stdin"
    stripped = value.strip()
    if stripped.startswith(("{", "[")) or stripped in ("null", "{}"):
        if len(stripped) > MAX_CONFIG_BYTES:
            raise SpecError(f"larger than {size_text(MAX_CONFIG_BYTES)}", source="--config")
        return stripped, "--config"
    source = excerpt(value)
    if not os.path.lexists(value):
        raise SpecError(
            'no such file (give inline JSON such as \'{"method": "ngram", ...}\', a JSON or '
            "YAML file, or - for stdin)",
            source=source,
        )
    return read_text(Path(value), source, MAX_CONFIG_BYTES, what="config file"), source


def parse_config_text(text: str, source: str) -> dict[str, Any] | None:
    """A speculative config from JSON or YAML text; ``null`` and ``{}`` mean speculation off.

    A ``vllm serve --config`` document (what ``recommend --format yaml`` writes: the model,
    engine args and a ``speculative_config`` key) gives its ``speculative_config``; a document
    without that key and without ``method`` (a serve config without speculation) means off.
    Parsing is bounded (depth, no YAML aliases) and the config is checked by the rules
    ``study create`` applies (:func:`check_config`).
    """
    from autotune.spec.reading import MAX_DEPTH, json_depth_error, json_loads
    from autotune.spec.reading import load_yaml as parse_yaml

    if text.lstrip().startswith(("[", "{")) and json_depth_error(text) is not None:
        raise SpecError(f"invalid JSON: nested deeper than {MAX_DEPTH} levels", source=source)
    try:
        data = json_loads(text)
    except json.JSONDecodeError as json_exc:
        try:
            data = parse_yaml(text, source)
        except SpecError as yaml_exc:
            if any(w in yaml_exc.reason for w in ("aliases", "nested", "an integer of")):
                raise
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
    check_config(data, source)
    return data


def check_config(config: Mapping[str, Any], source: str) -> None:
    """Refuse a ``--speculative-config`` that ``study create`` would refuse: a method vLLM
    does not have, an N that is not an integer in 1..15, a knob outside its rule
    (``autotune.spec.knobs``), a key that is neither a knob nor a field of vLLM's
    ``SpeculativeConfig``, or a value that is not plain finite JSON. One SpecError line (exit
    2), quoting at most a short excerpt of the value."""
    import difflib
    import math

    from autotune.spec.knobs import KNOBS, NOT_KNOBS, check_value
    from autotune.spec.methods import GLOBAL_MAX_N, METHODS
    from autotune.spec.reading import excerpt

    if len(json.dumps(config, default=str)) > MAX_CONFIG_JSON:
        # A --speculative-config is a few hundred bytes; a bigger one would be echoed back in
        # the "never measured" line.
        raise SpecError(
            f"a --speculative-config larger than {MAX_CONFIG_JSON // 1024} KiB", source=source
        )
    method = config.get("method")
    known = sorted(METHODS)
    if method == "[ngram]":
        method = "ngram"
    if method == "ngram_gpu":  # vLLM's GPU n-gram proposer takes n-gram's knobs
        method = "ngram"
    if not isinstance(method, str) or method not in METHODS:
        guess = difflib.get_close_matches(str(method), known, n=1)
        hint = f"; did you mean {guess[0]!r}?" if guess else f" (known: {', '.join(known)})"
        what = "missing" if method is None else f"unknown method {excerpt(repr(method))}"
        raise SpecError(f"{what}{hint}", source=source, field="method")
    n = config.get("num_speculative_tokens")
    if n is not None and (
        isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= GLOBAL_MAX_N
    ):
        raise SpecError(
            f"must be an integer in [1, {GLOBAL_MAX_N}], got {excerpt(repr(n))}",
            source=source,
            field="num_speculative_tokens",
        )
    draft = config.get("model")
    if draft is not None and (not isinstance(draft, str) or not 1 <= len(draft) <= 512):
        raise SpecError("must be a draft checkpoint (HF id or path)", source=source, field="model")
    fields = _vllm_fields()
    for key, value in config.items():
        if not isinstance(key, str):
            raise SpecError(f"key {excerpt(repr(key))} is not a string", source=source)
        if key in ("method", "num_speculative_tokens", "model"):
            continue
        if key in KNOBS:
            why = check_value(key, value, method)
            if why:
                raise SpecError(excerpt(why, 200), source=source, field=excerpt(key))
            continue
        if key not in NOT_KNOBS and key not in fields:
            guess = difflib.get_close_matches(key, [*KNOBS, *fields], n=1)
            hint = f"; did you mean {guess[0]!r}?" if guess else ""
            raise SpecError(
                f"unknown key (not a field of vLLM's SpeculativeConfig){hint}",
                source=source,
                field=excerpt(key),
            )
        if not _plain(value, math.isfinite):
            raise SpecError(
                "must be a string, finite number, boolean, null, or a list/mapping of those",
                source=source,
                field=excerpt(key),
            )


def _plain(value: Any, finite: Any, depth: int = 0) -> bool:
    if depth > 8:
        return False
    if value is None or isinstance(value, str | bool | int):
        return True
    if isinstance(value, float):
        return bool(finite(value))
    if isinstance(value, list):
        return all(_plain(v, finite, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, finite, depth + 1) for k, v in value.items())
    return False


@functools.cache
def _vllm_fields() -> frozenset[str]:
    """The field names of vLLM's SpeculativeConfig, read from its source like
    :func:`_vllm_defaults` (empty when vLLM is not installed)."""
    import ast

    tree = _speculative_source()
    if tree is None:
        return frozenset()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "SpeculativeConfig":
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    names.add(stmt.target.id)
    return frozenset(names)


@functools.cache
def _speculative_source() -> Any:
    """The parsed ``vllm/config/speculative.py`` of the installed vLLM, or None."""
    import ast
    import importlib.util

    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    source = Path(next(iter(spec.submodule_search_locations)), "config", "speculative.py")
    try:
        return ast.parse(source.read_text())
    except (OSError, SyntaxError, ValueError):
        return None


@functools.cache
def _vllm_defaults() -> dict[str, Any]:
    """Field defaults of vLLM's SpeculativeConfig, read from the installed vLLM's source
    (``vllm/config/speculative.py``) without importing vLLM: importing it (and torch) would cost
    a read-only command seconds and print library warnings. Fields whose default is not a literal
    (``= None``, ``= 5``, ``Field(default=...)``) are left out, so their keys are always kept.
    Empty when vLLM is not installed or its source cannot be read."""
    import ast

    tree = _speculative_source()
    if tree is None:
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
