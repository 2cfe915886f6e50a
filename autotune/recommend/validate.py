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


def validate_study(resolved: Any, source: str) -> None:
    """Refuse a study whose configs vLLM's ``SpeculativeConfig`` would refuse (SpecError naming
    the method), before anything is stored; the Dynamic SD field `--format dsd` adds is checked
    too. Runs at ``study create`` so that read-only commands never import vLLM."""
    from autotune.errors import SpecError
    from autotune.search.space import SearchSpace

    if resolved.spec.engine.kind == "replay" or not vllm_available():
        return  # a replayed landscape never starts an engine: nothing for vLLM to refuse
    for config in SearchSpace(resolved).configs():
        spec = config.speculative_config()
        if not spec:
            continue
        dsd = {**spec, "num_speculative_tokens_per_batch_size": [[1, 1, 1]]}
        for problem in check_speculative_config(dsd):
            raise SpecError(
                f"vLLM's SpeculativeConfig refuses {config.label()}: {problem}",
                source=source,
                field=f"methods.{spec.get('method', '?')}",
            )
