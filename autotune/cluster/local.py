"""An in-process pool: runs one trial job at a time on an Engine in the driver process.

For backends that need no devices of their own (``replay``) and for unit tests of the tuner; real
vLLM engines run in Ray actors (``autotune.cluster.ray_pool``). Like the Ray pool it reports a
job's events one step at a time (start, each cell, the end), so the tuner stores each measurement
as it is taken and the strategy's cell plan sees the store as it is before every cell.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator

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
    """Runs jobs in the driver, one step per poll; one slot."""

    slots = 1

    def __init__(self, engine_factory: Callable[[], Engine]):
        self._factory = engine_factory
        self._queue: deque[TrialJob] = deque()
        self._current: Generator[TrialEvent, None, None] | None = None

    @property
    def busy(self) -> int:
        return len(self._queue) + (self._current is not None)

    def submit(self, job: TrialJob) -> None:
        self._queue.append(job)

    def poll(self, timeout_s: float = 0.0) -> list[TrialEvent]:
        """Take the next step of the running job (starting the next queued one first)."""
        if self._current is None:
            if not self._queue:
                return []
            self._current = job_events(self._factory(), self._queue.popleft())
        event = next(self._current)
        if isinstance(event, Finished | Failed):
            self._current = None
        return [event]

    def shutdown(self) -> None:
        if self._current is not None:
            self._current.close()  # stops its engine
            self._current = None
        self._queue.clear()


def job_events(engine: Engine, job: TrialJob) -> Generator[TrialEvent, None, None]:
    """Drive ``engine`` through one job, an event per step; the engine is stopped before the
    last event (Finished, or Failed with an EngineError's one-line reason), and when the
    iterator is closed early."""
    by_name = {w.name: w for w in job.workloads}
    end: TrialEvent
    try:
        info = engine.start(job.config)
        engine.resume_after([*job.drawn, *job.resumed])
        yield Started(job.trial_id, info)
        if job.warmup_requests and job.workloads:
            engine.warmup(job.workloads[0], job.warmup_requests)
        measured: list[Measurement] = list(job.resumed)
        while (cell := next_cell(job, measured)) is not None:
            m = engine.measure(by_name[cell.workload], cell.concurrency, cell.repeat, job.settings)
            measured.append(m)
            yield Measured(job.trial_id, m)
        end = Finished(job.trial_id)
    except EngineError as exc:
        end = Failed(job.trial_id, str(exc))
    finally:
        engine.stop()
    yield end


def run_job(engine: Engine, job: TrialJob) -> list[TrialEvent]:
    """Every event of one job, run to its end."""
    return list(job_events(engine, job))
