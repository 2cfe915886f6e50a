"""Which pool a study's engines run on: the pool interface the tuner drives and the factory that
wires a study (its engine kind and options, a Ray address, logical GPUs) to a pool.

vLLM engines always run in Ray actors. A replay study runs in-process (one engine at a time, no
Ray) unless a Ray address or logical GPUs are given: then it goes through the same Ray pool as
real engines, N / TP replay engines at once on disjoint devices, which is how the scale-out path
is tested without vLLM.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from autotune.cluster.jobs import TrialEvent, TrialJob
from autotune.spec.loader import ResolvedStudy
from autotune.spec.study import ReplayEngineSpec, VLLMEngineSpec


class Pool(Protocol):
    """What the tuner drives: ``LocalPool`` and ``RayPool``."""

    @property
    def slots(self) -> int: ...

    @property
    def busy(self) -> int: ...

    def submit(self, job: TrialJob) -> None: ...

    def poll(self, timeout_s: float = ...) -> list[TrialEvent]: ...

    def shutdown(self) -> None: ...


PoolFactory = Callable[[ResolvedStudy], Pool]
"""Builds the pool for a study when its run starts (after the lease is held)."""


def pool_factory(
    resolved: ResolvedStudy,
    ray_address: str | None,
    max_engines: int | None,
    log_to_driver: bool,
    *,
    num_gpus: int | None = None,
    replay_time_scale: float | None = None,
) -> PoolFactory:
    """The pool a study runs on; replay engines sleep for their recorded times ×
    ``replay_time_scale``, a local Ray cluster starts with ``num_gpus`` logical GPUs."""
    engine = resolved.spec.engine
    kind: str = engine.kind
    options: dict[str, Any] = {}
    if isinstance(engine, VLLMEngineSpec) and engine.client == "server":
        kind = "vllm-serve"  # autotune.engine.server: vllm serve + vllm bench serve
    if isinstance(engine, ReplayEngineSpec):
        landscape = Path(resolved.landscape or engine.landscape)
        options = {"landscape": str(landscape), "seed": resolved.spec.seed}
        if replay_time_scale:
            options["time_scale"] = replay_time_scale
        if ray_address is None and num_gpus is None:
            from autotune.cluster.local import LocalPool
            from autotune.engine.replay import ReplayEngine

            def replay_pool(_: ResolvedStudy) -> Pool:
                engine = ReplayEngine(**options)  # a config started again continues its cycle
                return LocalPool(lambda: engine)

            return replay_pool

    def ray_pool(study: ResolvedStudy) -> Pool:
        from autotune.cluster.ray_pool import RayPool

        return RayPool(
            engine_kind=kind,
            engine_options=options,
            tensor_parallel_size=study.tensor_parallel_size,
            address=ray_address,
            max_engines=max_engines,
            num_gpus=num_gpus,
            log_to_driver=log_to_driver,
        )

    return ray_pool
