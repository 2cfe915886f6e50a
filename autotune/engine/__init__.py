"""The Engine interface and its backends: ``vllm/`` (in process), ``server/`` (``vllm serve``) and
``replay`` (recorded sweeps); ``readers/`` of other tools' recorded sweeps.

Backends are imported by name through :func:`create_engine`, so importing this package does not
import vllm.
"""

from __future__ import annotations

from autotune.engine._base import (
    Engine,
    EngineConfig,
    EngineInfo,
    Measurement,
    MeasureSettings,
    PreparedWorkload,
    Prompt,
)
from autotune.engine.models import default_token_counter, default_tokenizer, resolve_model

__all__ = [
    "Engine",
    "EngineConfig",
    "EngineInfo",
    "MeasureSettings",
    "Measurement",
    "PreparedWorkload",
    "Prompt",
    "create_engine",
    "default_token_counter",
    "default_tokenizer",
    "resolve_model",
]


def create_engine(kind: str, **options: object) -> Engine:
    """Instantiate the backend ``kind`` ("vllm", "vllm-serve" or "replay") with its options."""
    if kind == "vllm":
        from autotune.engine.vllm.engine import VLLMEngine

        return VLLMEngine(**options)  # type: ignore[arg-type]
    if kind == "vllm-serve":
        from autotune.engine.server.engine import VLLMServeEngine

        return VLLMServeEngine(**options)  # type: ignore[arg-type]
    if kind == "replay":
        from autotune.engine.replay import ReplayEngine

        return ReplayEngine(**options)  # type: ignore[arg-type]
    raise ValueError(f"unknown engine kind {kind!r}")
