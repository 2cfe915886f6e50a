"""Scale-out on Ray without vLLM: replay engines in EngineActors on *logical* GPUs, on one node
and on a two-node ``ray.cluster_utils.Cluster`` whose node is killed mid-study; plus vLLM 0.32's
own executor choice and bundle check, which rule out a ``{"GPU": TP}`` placement-group bundle.

Engine windows (engine start .. trial end) come from the store, so the assertions are about what
autotune recorded, not about how the pool meant to schedule.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune import api
from autotune.search.landscape_study import study_from_landscape
from autotune.store import Store, TrialRecord

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
LANDSCAPE = REPO / "bench/landscapes/synthetic-maverick-eagle3.csv"


def _window(t: TrialRecord) -> tuple[float, float]:
    assert t.engine_started_at and t.finished_at, t
    return t.engine_started_at, t.finished_at.timestamp()


def _overlap(a: TrialRecord, b: TrialRecord) -> bool:
    (s1, e1), (s2, e2) = _window(a), _window(b)
    return s1 < e2 and s2 < e1


def _peak(trials: list[TrialRecord]) -> int:
    edges = sorted(
        [(s, 1) for s, _ in map(_window, trials)] + [(e, -1) for _, e in map(_window, trials)],
        key=lambda x: (x[0], x[1]),
    )
    peak = run = 0
    for _, step in edges:
        run += step
        peak = max(peak, run)
    return peak


def _devices(t: TrialRecord) -> set[str]:
    return {d for d in (t.device_ids or "").split(",") if d}


def _replay_study(store: Store, name: str, tp: int) -> None:
    data = study_from_landscape(LANDSCAPE, name, sampler="grid", repeats=1)
    data["model"]["tensor_parallel_size"] = tp
    data["concurrency"] = data["concurrency"][:2]
    api.create_study(store, data=data, source=str(LANDSCAPE))


@pytest.mark.parametrize(("gpus", "tp"), [(4, 1), (8, 4)])
def test_engines_run_in_parallel_on_disjoint_devices(tmp_path: Path, gpus: int, tp: int):
    """4 logical GPUs run 4 TP = 1 engines at once; 8 run 2 TP = 4 engines (gpus // tp, the
    rule a TP = 8 engine on 8 GPUs follows too). Engines whose windows overlapped never shared
    a device, and each held exactly TP devices."""
    store = Store(str(tmp_path / "s.db"))
    _replay_study(store, "par", tp)
    summary = api.run_study(store, "par", num_gpus=gpus, replay_time_scale=0.002)
    assert summary.trials_failed == 0 and summary.trials_run == 8
    trials = store.trials(store.get_study("par"))
    assert all(len(_devices(t)) == tp for t in trials)
    assert len({t.ray_node_id for t in trials}) == 1
    for a, b in itertools.combinations(trials, 2):
        if _overlap(a, b):
            assert not _devices(a) & _devices(b), (a.device_ids, b.device_ids)
    assert _peak(trials) == gpus // tp
    rows = store.measurements(study="par")
    assert {(r.ray_node_id, r.device_ids) for r in rows} <= {
        (t.ray_node_id, t.device_ids) for t in trials
    }


def test_slots_count_whole_engines_per_node():
    """An engine's GPUs lie on one node: nodes of 3 and 5 GPUs hold one TP = 4 engine (the
    cluster's 8 GPUs // 4 would say 2), and a TP larger than every node is refused with the
    reason."""
    from ray.cluster_utils import Cluster

    from autotune.cluster.ray_pool import RayPool
    from autotune.errors import AutotuneError

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 3})
    try:
        cluster.add_node(num_cpus=1, num_gpus=5)
        cluster.wait_for_nodes()
        pool = RayPool(engine_kind="replay", tensor_parallel_size=4, address=cluster.address)
        try:
            assert (pool.mode, pool.slots) == ("gpu", 1)
        finally:
            pool.shutdown()
        with pytest.raises(AutotuneError, match="no Ray node has 8 GPUs"):
            RayPool(engine_kind="replay", tensor_parallel_size=8, address=cluster.address)
    finally:
        import ray

        ray.shutdown()
        cluster.shutdown()


def test_vllm_keeps_the_mp_executor_we_pass():
    """vLLM's own ParallelConfig keeps an explicit ``mp`` for TP = 2 (its default choice is
    what differs inside a placement group: see the next test)."""
    pytest.importorskip("vllm")
    from vllm.config import ParallelConfig

    pc = ParallelConfig(tensor_parallel_size=2, distributed_executor_backend="mp")
    assert pc.distributed_executor_backend == "mp"


@pytest.fixture(scope="class")
def four_gpus() -> Iterator[Any]:
    """A local Ray instance with 4 logical GPUs, for one class of tests."""
    import ray

    ray.init(address="local", num_gpus=4, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


class TestOnFourLogicalGPUs:
    """Two checks on one local Ray instance with 4 logical GPUs (one Ray start for both)."""

    def test_actor_exports_its_device_ids(self, four_gpus: Any) -> None:
        """The engine actor's process sees exactly the ids Ray gave it in CUDA_VISIBLE_DEVICES."""
        from autotune.cluster.ray_pool import EngineActor

        ray = four_gpus
        opts = {"landscape": str(LANDSCAPE)}
        actors = [
            ray.remote(EngineActor).options(num_gpus=2, num_cpus=0).remote("replay", opts)
            for _ in range(2)
        ]
        envs = ray.get([a.environment.remote() for a in actors])
        ids = ray.get([a.__ray_call__.remote(lambda self: self.device_ids) for a in actors])
        for actor in actors:
            ray.kill(actor)
        assert sorted(ids[0] + ids[1]) == ["0", "1", "2", "3"]
        for env, got in zip(envs, ids, strict=True):
            assert env["CUDA_VISIBLE_DEVICES"] == ",".join(got)
            assert "ROCR_VISIBLE_DEVICES" not in env

    def test_vllm_picks_ray_in_a_placement_group_and_its_ray_executor_rejects_a_tp_bundle(
        self, four_gpus: Any
    ) -> None:
        """Why autotune gives a TP engine its GPUs on the actor and vLLM's mp executor: inside a
        capturing placement group vLLM 0.32 chooses its Ray executor by itself, and that executor
        refuses the ``{"GPU": 2}`` bundle such an actor would sit in."""
        pytest.importorskip("vllm")
        ray = four_gpus
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        @ray.remote
        def executor_choice() -> str:
            from vllm.config import ParallelConfig

            return str(ParallelConfig(tensor_parallel_size=2).distributed_executor_backend)

        @ray.remote
        def ray_executor_check() -> str:
            import vllm.v1.executor.ray_utils as ray_utils
            from vllm.config import ParallelConfig
            from vllm.platforms import current_platform

            # The CPU platform has no Ray device key at all; give it the GPU's, as CUDA has.
            type(current_platform).ray_device_key = "GPU"
            try:
                ray_utils.initialize_ray_cluster(ParallelConfig(tensor_parallel_size=2))
            except ValueError as exc:
                return str(exc)
            return "accepted"

        pg = placement_group([{"GPU": 2, "CPU": 0.01}], strategy="STRICT_PACK")
        ray.get(pg.ready())
        in_pg = PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_capture_child_tasks=True
        )
        inside = ray.get(
            executor_choice.options(scheduling_strategy=in_pg, num_gpus=2, num_cpus=0).remote()
        )
        plain = ray.get(executor_choice.options(num_gpus=2, num_cpus=0).remote())
        rejected = ray.get(
            ray_executor_check.options(scheduling_strategy=in_pg, num_gpus=2, num_cpus=0).remote()
        )
        assert inside == "ray"
        assert plain == "mp"
        assert rejected == "Placement group bundle cannot have more than 1 GPU."


def test_two_nodes_and_one_node_killed_mid_study(tmp_path: Path):
    """`study run --ray-address` on a two-node Ray cluster (2 logical GPUs each): engines spread
    over both nodes; one node is removed while its engines measure. Its trials become failed
    trials with the reason (or run again when they had measured nothing); none is lost or
    measured twice, and the study completes on the other node."""
    from ray.cluster_utils import Cluster

    db = tmp_path / "s.db"
    store = Store(str(db))
    data = study_from_landscape(LANDSCAPE, "nodes", sampler="grid", repeats=1)
    api.create_study(store, data=data, source=str(LANDSCAPE))

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    try:
        doomed = cluster.add_node(num_cpus=1, num_gpus=2)
        cluster.add_node(num_cpus=1, num_gpus=2)
        cluster.wait_for_nodes()
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "autotune.cli", "--db", str(db), "study", "run", "nodes"),
                *("--ray-address", cluster.address, "--replay-time-scale", "0.01"),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        doomed_id = doomed.node_id
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            running = [
                t
                for t in store.trials(store.get_study("nodes"))
                if t.state == "running" and t.ray_node_id == doomed_id
            ]
            if running and store.measurements(study="nodes"):
                break
            time.sleep(0.2)
        else:
            proc.kill()
            pytest.fail("no engine ever ran on the second node")
        cluster.remove_node(doomed)
        out, _ = proc.communicate(timeout=400)
    finally:
        cluster.shutdown()
    assert proc.returncode == 0, out
    record = store.get_study("nodes")
    trials = store.trials(record)
    assert record.status == "done", out
    # Never lost: every trial ended; every config of the grid was started exactly once.
    assert {t.state for t in trials} <= {"complete", "failed"}
    keys = [t.config_key for t in trials]
    assert len(keys) == len(set(keys)) == 8
    # Never double counted: one stored row per (trial, cell), and no cell of a config twice.
    rows = store.measurements(study="nodes")
    cells = [(r.trial_id, r.workload, r.concurrency, r.repeat) for r in rows]
    assert len(cells) == len(set(cells))
    # Both nodes measured; what the lost node was running failed with the reason or ran again.
    assert {t.ray_node_id for t in trials} >= {doomed_id}
    assert len({t.ray_node_id for t in trials}) == 2
    failed = [t for t in trials if t.state == "failed"]
    for t in failed:
        assert t.ray_node_id == doomed_id and "died" in (t.failure_reason or ""), t
    assert any(t.state == "complete" and t.ray_node_id != doomed_id for t in trials)
    print(out)
    print("failed:", [(t.method, t.num_speculative_tokens, t.failure_reason) for t in failed])
