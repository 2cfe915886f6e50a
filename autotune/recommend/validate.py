"""Check a rendered ``--speculative-config`` against vLLM's own ``SpeculativeConfig`` class.

Every key must be a field of vLLM's class and every value must validate against that field's
type (pydantic, as vLLM's config does). Building the full config would load the target's HF
config, so the cross-field checks that need the model stay vLLM's, at engine start.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from typing import Any


@functools.cache
def _fields() -> dict[str, Any] | None:
    try:
        from vllm.config import SpeculativeConfig
    except ImportError:
        return None
    hints = typing.get_type_hints(SpeculativeConfig)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(SpeculativeConfig)}


def vllm_available() -> bool:
    return _fields() is not None


def check_speculative_config(config: Mapping[str, Any] | None) -> list[str]:
    """Problems vLLM's ``SpeculativeConfig`` would have with ``config`` (empty when fine, or
    when vLLM is not installed)."""
    fields = _fields()
    if fields is None or config is None:
        return []
    from pydantic import TypeAdapter, ValidationError

    problems = []
    for key, value in config.items():
        if key not in fields:
            problems.append(f"{key}: not a field of vLLM's SpeculativeConfig")
            continue
        try:
            TypeAdapter(fields[key]).validate_python(value, strict=False)
        except ValidationError as exc:
            problems.append(f"{key}: {exc.errors()[0]['msg']}")
    return problems
