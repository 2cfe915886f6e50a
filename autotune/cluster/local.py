"""An in-process pool: runs one trial job at a time on an Engine in the driver process.

For backends that need no devices of their own (``replay``) and for unit tests of the tuner; real
vLLM engines run in Ray actors (``autotune.cluster.ray_pool``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from autotune.cluster.jobs import (
    Failed,
    Finished,
    Measured,
    Started,
    TrialEvent,
    TrialJob,
    next_cell,
)
from autotune.engine._base import Engine, Measurement
from autotune.errors import EngineError


class LocalPool:
    """Runs jobs synchronously when polled; one slot."""

    slots = 1

    def __init__(self, engine_factory: Callable[[], Engine]):
        self._factory = engine_factory
        self._queue: deque[TrialJob] = deque()

    @property
    def busy(self) -> int:
        return len(self._queue)

    def submit(self, job: TrialJob) -> None:
        self._queue.append(job)

    def poll(self, timeout_s: float = 0.0) -> list[TrialEvent]:
        """Run the next queued job to its end and return its events."""
        if not self._queue:
            return []
        return list(run_job(self._factory(), self._queue.popleft()))

    def shutdown(self) -> None:
        self._queue.clear()


def run_job(engine: Engine, job: TrialJob) -> list[TrialEvent]:
    """Drive ``engine`` through one job; an EngineError becomes a Failed event."""
    events: list[TrialEvent] = []
    by_name = {w.name: w for w in job.workloads}
    try:
        info = engine.start(job.config)
        events.append(Started(job.trial_id, info))
        if job.warmup_requests and job.workloads:
            engine.warmup(job.workloads[0], job.warmup_requests)
        measured: list[Measurement] = []
        while (cell := next_cell(job, measured)) is not None:
            m = engine.measure(by_name[cell.workload], cell.concurrency, cell.repeat, job.settings)
            measured.append(m)
            events.append(Measured(job.trial_id, m))
        events.append(Finished(job.trial_id))
    except EngineError as exc:
        events.append(Failed(job.trial_id, str(exc)))
    finally:
        engine.stop()
    return events
