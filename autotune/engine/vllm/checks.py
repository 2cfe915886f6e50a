"""Checks against the installed vLLM's own classes and source, for the layers above the engine.

vLLM is imported here only, and only inside the functions that need its classes: importing
``autotune`` or running a read-only command never imports vLLM (or torch). What is read:

- ``SpeculativeConfig`` (``vllm.config``): every key of a rendered ``--speculative-config`` must
  be a field of vLLM's class and every value must validate against that field's type (pydantic,
  as vLLM's config does). Building the full config would load the target's HF config, so the
  cross-field checks that need the model stay vLLM's, at engine start.
- ``AsyncEngineArgs`` (``vllm.engine.arg_utils``): the names ``model.engine_args`` may set.
- ``vllm/envs.py``: the environment variables vLLM reads, parsed from its source without
  importing vLLM.
- the installed version (``vllm.__version__``), for a process that has imported vLLM already.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from autotune.engine._base import EngineConfig
from autotune.errors import SpecError


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


def check_configs(configs: Iterable[EngineConfig], source: str) -> None:
    """Refuse the first config vLLM's ``SpeculativeConfig`` would refuse (SpecError naming the
    method); the Dynamic SD field `--format dsd` adds is checked too. Nothing to check when
    vLLM is not installed."""
    if not vllm_available():
        return
    for config in configs:
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


def vllm_engine_arg_names() -> frozenset[str] | None:
    """The field names of the installed vLLM's ``AsyncEngineArgs`` (None: vLLM not installed,
    e.g. a machine that only replays landscapes; the engine checks again when it starts)."""
    global _ENGINE_ARG_NAMES
    if _ENGINE_ARG_NAMES is None:
        if importlib.util.find_spec("vllm") is None:
            return None
        from vllm.engine.arg_utils import AsyncEngineArgs

        _ENGINE_ARG_NAMES = frozenset(f.name for f in dataclasses.fields(AsyncEngineArgs))
    return _ENGINE_ARG_NAMES


_ENGINE_ARG_NAMES: frozenset[str] | None = None


def vllm_env_names() -> frozenset[str]:
    """The variables the installed vLLM reads (the keys of ``vllm/envs.py``'s
    ``environment_variables``), parsed from its source without importing vLLM; empty when vLLM
    is not installed."""
    global _VLLM_ENV_NAMES
    if _VLLM_ENV_NAMES is None:
        _VLLM_ENV_NAMES = _read_vllm_env_names()
    return _VLLM_ENV_NAMES


_VLLM_ENV_NAMES: frozenset[str] | None = None


def _read_vllm_env_names() -> frozenset[str]:
    import ast

    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return frozenset()
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    source = Path(next(iter(spec.submodule_search_locations)), "envs.py")
    try:
        tree = ast.parse(source.read_text())
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    for node in tree.body:
        target: ast.expr | None = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if (
            isinstance(target, ast.Name)
            and target.id == "environment_variables"
            and isinstance(value, ast.Dict)
        ):
            return frozenset(
                k.value
                for k in value.keys
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            )
    return frozenset()


def imported_vllm_version() -> str:
    """``vllm.__version__``, for a process that has imported vLLM already (the benchmark
    client of ``autotune verify``)."""
    import vllm

    return str(vllm.__version__)
