"""What the tuner hands a pool (a trial job) and what the pool reports back (events).

Plain dataclasses, no Ray: the tuner and the in-process pool use them without importing Ray.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


CellPlan = Callable[[Sequence[Measurement]], "Cell | None"]
"""Chooses the next cell on a warm engine from what this engine measured so far (None: stop)."""


@dataclass(frozen=True)
class TrialJob:
    """Everything one engine config needs: start it, warm it up, measure its cells, stop it.

    ``cells`` is every cell the job may measure, in order. Without a ``plan`` all of them are
    measured; with one, the pool asks it for each next cell (it runs in the driver), so a
    strategy can skip cells the measurements so far show cannot matter.
    """

    trial_id: int
    config: EngineConfig
    workloads: Sequence[PreparedWorkload]
    cells: Sequence[Cell]
    settings: MeasureSettings
    warmup_requests: int = 4
    start_timeout_s: float = 3600.0
    plan: CellPlan | None = None
    resumed: Sequence[Measurement] = ()
    """The cells an interrupted run of this trial measured (stored already): the job counts
    them as measured and its engine continues after them (``Engine.resume_after``)."""
    drawn: Sequence[Measurement] = ()
    """The config's measurements in the study's earlier trials (a drift check's first baseline
    run): its engine continues after them too, so a replay never serves a recorded repeat twice."""


def next_cell(job: TrialJob, measured: Sequence[Measurement]) -> Cell | None:
    """The job's next cell after ``measured`` (this engine's measurements so far), or None."""
    if job.plan is not None:
        return job.plan(measured)
    done = {(m.workload, m.concurrency, m.repeat) for m in measured}
    return next((c for c in job.cells if (c.workload, c.concurrency, c.repeat) not in done), None)


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
