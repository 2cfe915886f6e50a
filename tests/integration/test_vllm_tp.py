"""A tensor-parallel engine on the real vLLM (CPU build): ``tensor_parallel_size: 2`` on the tiny
Llama, started inside autotune's Ray EngineActor exactly as a study starts it, with n-gram
drafting; it must measure acceptance and throughput.

Inside the actor vLLM runs its ``mp`` executor (two worker processes, one per rank, one core
each through ``VLLM_CPU_OMP_THREADS_BIND``); see autotune/cluster/ray_pool.py for why not Ray's.
"""

from __future__ import annotations

import importlib.util
import os
import time

import pytest

from autotune.cluster.jobs import Cell, Failed, Finished, Measured, Started, TrialJob
from autotune.engine._base import EngineConfig, MeasureSettings, PreparedWorkload, Prompt

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed"),
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="TP = 2 needs two cores"),
]

PROMPTS = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\ndef fib(n):",
    "import json\n\ndef load(path):\n    with open(path) as f:\n        return json.load(f)\n",
    "class Stack:\n    def push(self, item):\n        self.items.append(item)\n    def pop(self):",
    "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(",
]


def test_tp2_engine_in_a_ray_actor_measures_acceptance_and_throughput():
    from autotune.cluster.ray_pool import RayPool

    config = EngineConfig(
        model="tiny:llama",
        method="ngram",
        num_speculative_tokens=2,
        method_params={"prompt_lookup_min": 2, "prompt_lookup_max": 4},
        tensor_parallel_size=2,
    )
    workload = PreparedWorkload(
        name="code",
        digest="tp2-test",
        prompts=tuple(Prompt(p, 48) for p in PROMPTS),
        chat_template=False,
    )
    job = TrialJob(
        trial_id=1,
        config=config,
        workloads=[workload],
        cells=[Cell("code", 1, 0), Cell("code", 2, 0)],
        settings=MeasureSettings(requests_per_concurrency=2, timeout_s=600),
        warmup_requests=1,
        start_timeout_s=600,
    )
    pool = RayPool(engine_kind="vllm", tensor_parallel_size=2)
    events = []
    try:
        assert pool.mode == "cpu" and pool.slots == 1
        pool.submit(job)
        deadline = time.monotonic() + 900
        while pool.busy and time.monotonic() < deadline:
            events += pool.poll(timeout_s=5.0)
    finally:
        pool.shutdown()
    failed = [e for e in events if isinstance(e, Failed)]
    assert not failed, failed[0].reason
    (started,) = [e for e in events if isinstance(e, Started)]
    measured = [e.measurement for e in events if isinstance(e, Measured)]
    assert isinstance(events[-1], Finished)
    assert started.info.platform == "cpu" and started.info.ray_node_id
    assert [m.concurrency for m in measured] == [1, 2]
    for m in measured:
        assert m.output_throughput_tok_s > 0 and m.num_output_tokens > 0
        assert m.num_drafts > 0 and m.mean_acceptance_length is not None
        assert 1.0 < m.mean_acceptance_length <= 3.0
        print(
            f"TP=2 ngram N=2 concurrency {m.concurrency}: {m.output_throughput_tok_s:.1f} tok/s, "
            f"AL {m.mean_acceptance_length:.2f}, a_i {m.acceptance_per_pos}, "
            f"start {started.info.engine_start_s:.1f} s"
        )
