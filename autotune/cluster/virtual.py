"""A pool of N slots on a virtual clock: replay engines overlap in recorded time, not in sleep.

Each job advances by its engine's recorded times (``EngineInfo.engine_start_s`` for its start,
``Measurement.measure_s`` for each cell): ``poll`` hands the tuner the event that happens first
in virtual time, and a job takes its next step (asks its cell plan, measures) only after the
tuner has handled its last event, as a real engine's plan runs in the driver after its previous
cell. Nothing sleeps, so the study's wall time on N slots (``clock``), its engine-seconds and the
most engines running at once are the same on every run and under any machine load. For replay
studies and benchmarks only: real engines run in Ray actors (``autotune.cluster.ray_pool``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Generator
from dataclasses import dataclass

from autotune.cluster.jobs import Failed, Finished, Measured, Started, TrialEvent, TrialJob
from autotune.cluster.local import job_events
from autotune.engine._base import Engine


@dataclass
class _Job:
    events: Generator[TrialEvent, None, None]
    clock: float
    """Virtual time of the job's last event (or its submit)."""


class VirtualPool:
    """``slots`` engines at once on a virtual clock (see the module docstring)."""

    def __init__(self, slots: int, engine_factory: Callable[[], Engine]) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, not {slots}")
        self.slots = slots
        self._factory = engine_factory
        self.clock = 0.0
        """Virtual seconds since the first submit: the study's wall time once it is done."""
        self.peak = 0
        """The most engines that ran at once."""
        self._order = itertools.count()
        self._stepping: list[_Job] = []
        """Jobs whose last event the tuner has handled: they take their next step at poll."""
        self._pending: list[tuple[float, int, _Job, TrialEvent]] = []
        """(virtual time, tie-break, job, event): each running job's next event."""

    @property
    def busy(self) -> int:
        return len(self._stepping) + len(self._pending)

    def submit(self, job: TrialJob) -> None:
        if self.busy >= self.slots:
            raise RuntimeError("no free slot")
        self._stepping.append(_Job(job_events(self._factory(), job), self.clock))
        self.peak = max(self.peak, self.busy)

    def poll(self, timeout_s: float = 0.0) -> list[TrialEvent]:
        """The next event in virtual time (the clock moves to it); [] when nothing runs."""
        for job in self._stepping:
            event = next(job.events)
            heapq.heappush(
                self._pending, (job.clock + _duration(event), next(self._order), job, event)
            )
        self._stepping = []
        if not self._pending:
            return []
        at, _, job, event = heapq.heappop(self._pending)
        self.clock = job.clock = at
        if not isinstance(event, Finished | Failed):
            self._stepping.append(job)
        return [event]

    def shutdown(self) -> None:
        for job in self._stepping + [j for _, _, j, _ in self._pending]:
            job.events.close()  # stops its engine
        self._stepping, self._pending = [], []


def _duration(event: TrialEvent) -> float:
    """Virtual seconds the step that produced ``event`` took."""
    if isinstance(event, Started):
        return event.info.engine_start_s
    if isinstance(event, Measured):
        return event.measurement.measure_s
    return 0.0
