"""What the tuner hands a pool (a trial job) and what the pool reports back (events).

Plain dataclasses, no Ray: the tuner and the in-process pool use them without importing Ray.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.engine._base import (
    EngineConfig,
    EngineInfo,
    Measurement,
    MeasureSettings,
    PreparedWorkload,
)


@dataclass(frozen=True)
class Cell:
    """One measurement to take on a warm engine."""

    workload: str
    concurrency: int
    repeat: int


@dataclass(frozen=True)
class TrialJob:
    """Everything one engine config needs: start it, warm it up, measure every cell, stop it."""

    trial_id: int
    config: EngineConfig
    workloads: Sequence[PreparedWorkload]
    cells: Sequence[Cell]
    settings: MeasureSettings
    warmup_requests: int = 4
    start_timeout_s: float = 3600.0


@dataclass(frozen=True)
class Started:
    trial_id: int
    info: EngineInfo


@dataclass(frozen=True)
class Measured:
    trial_id: int
    measurement: Measurement


@dataclass(frozen=True)
class Finished:
    """The engine measured every cell and was stopped."""

    trial_id: int


@dataclass(frozen=True)
class Failed:
    """The engine failed to start, a measurement failed or timed out, or the actor died."""

    trial_id: int
    reason: str


TrialEvent = Started | Measured | Finished | Failed
