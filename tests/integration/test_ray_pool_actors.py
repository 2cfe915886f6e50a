"""The Ray pool's actors (real Ray, replay engines on logical GPUs): a replay engine's actor is
kept from trial to trial (a fresh one costs a worker process and an engine start), and idle
actors give their devices up to a job that needs a fresh actor (one with an environment of its
own) instead of leaving it waiting for them."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from autotune import api
from autotune.cluster.jobs import Failed, Finished, TrialEvent, TrialJob
from autotune.search.landscape_study import study_from_landscape
from autotune.search.tuner import Tuner
from autotune.store import Store

pytestmark = pytest.mark.integration

LANDSCAPE = Path(__file__).resolve().parents[2] / "bench/landscapes/synthetic-maverick-eagle3.csv"
SLOTS = 2


def _run(pool: object, jobs: list[TrialJob], within_s: float = 120.0) -> list[TrialEvent]:
    for job in jobs:
        pool.submit(job)  # type: ignore[attr-defined]
    ends: list[TrialEvent] = []
    deadline = time.monotonic() + within_s
    while len(ends) < len(jobs):
        assert time.monotonic() < deadline, f"{len(ends)} of {len(jobs)} jobs ended"
        ends += [e for e in pool.poll(timeout_s=1.0) if isinstance(e, Finished | Failed)]  # type: ignore[attr-defined]
    return ends


def test_replay_actors_are_kept_and_give_their_devices_to_a_fresh_one(tmp_path: Path):
    import ray

    from autotune.cluster.ray_pool import RayPool

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    data = study_from_landscape(LANDSCAPE, "actors", sampler="grid", repeats=1)
    data["concurrency"] = data["concurrency"][:1]
    api.create_study(store, data=data, source=str(LANDSCAPE))
    store.ensure_optuna_schema()
    tuner = Tuner(store, store.get_study("actors"), lambda _: None)  # type: ignore[arg-type,return-value]
    job, configs = tuner._job_template(), list(tuner.space.configs())[:5]
    ray.init(address="local", num_gpus=SLOTS, include_dashboard=False, log_to_driver=False)
    pool = RayPool(
        engine_kind="replay",
        engine_options={"landscape": str(LANDSCAPE), "seed": 0, "time_scale": 0.001},
        num_gpus=SLOTS,
    )
    try:
        # Five jobs queued at once on two slots: two actors run them all.
        ends = _run(pool, [job(trial_id=i, config=c) for i, c in enumerate(configs)])
        assert all(isinstance(e, Finished) for e in ends), ends
        assert (pool.engines_started, pool.actors_created) == (5, SLOTS)
        # Both actors are idle now, holding both devices; a job with its own environment needs
        # a fresh actor, and gets a device without waiting for its start timeout.
        env = dataclasses.replace(configs[0], env={"AUTOTUNE_TEST_ENV": "1"})
        ends = _run(pool, [job(trial_id=9, config=env, start_timeout_s=60.0)])
        assert ends == [Finished(9)], ends
        assert pool.actors_created == SLOTS + 1
    finally:
        pool.shutdown()
        ray.shutdown()
