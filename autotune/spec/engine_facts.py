"""What resolving a study needs to know of the engine that will run it and of the host.

spec reads YAML and imports no engine: the layers above build these facts
(``autotune.engine.resolution.engine_facts``, from this host's devices and the installed vLLM)
and pass them to ``autotune.spec.loader.resolve_study``. The lookups are callables, asked only
when a study needs them: importing vLLM for its ``EngineArgs`` names takes seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


def _unknown() -> None:
    return None


@dataclass(frozen=True)
class EngineFacts:
    """The engine and host a study is resolved for. The defaults know nothing of either: the
    study is resolved from its YAML alone, as for vLLM's CPU build."""

    platform: str = "cpu"
    """rocm, cuda or cpu: the method rules and a catalog entry's TP depend on it."""

    device_key: Callable[[], str | None] = _unknown
    """The catalog key of the host's first GPU (``mi300x``, ``h200``; None on a CPU), used for a
    catalog entry's per-device ``tensor_parallel_size`` when resolving for the host's platform."""

    reserved_engine_args: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Engine args the engine sets itself, each with why: a study may not set them."""

    engine_arg_names: Callable[[], frozenset[str] | None] = _unknown
    """The names ``model.engine_args`` may set (vLLM's ``EngineArgs`` fields); None: not known
    (vLLM not installed), not checked here (the engine checks again when it starts)."""

    env_names: Callable[[], frozenset[str]] = frozenset
    """The variables the installed vLLM reads: safe in ``model.env`` without consent unless
    they load code."""
