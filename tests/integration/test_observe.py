"""`autotune observe` against a real loopback `vllm serve` (the study's n-gram engine): traffic
from the study's workload at concurrency 1 and 2, and the window's counters compared exactly
with the server's own, scraped independently with vLLM's benchmark client's parser."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from autotune.engine.server.bench import bench_argv, requests_file, run_bench
from autotune.observe.run import observe
from autotune.spec.loader import ResolvedStudy
from autotune.verify.run import prepare_study_workload

pytestmark = pytest.mark.integration


def _server_counters(base_url: str) -> Any:
    """The server's spec-decode counters as `vllm bench serve` reads them (vLLM's own parser)."""
    import aiohttp
    from vllm.benchmarks.serve import fetch_spec_decode_metrics

    async def go() -> Any:
        async with aiohttp.ClientSession() as session:
            return await fetch_spec_decode_metrics(base_url, session)

    return asyncio.run(go())


def test_observe_reads_the_servers_own_counters(
    deploy_study: Any,
    ngram_server: Any,
    tmp_path: Any,
) -> None:
    store = deploy_study.store
    record = store.get_study("deploy")
    workload = prepare_study_workload(ResolvedStudy.from_json(record.resolved_json), "code")
    before = _server_counters(ngram_server.base_url)
    first_scrape = threading.Event()
    out: dict[str, Any] = {}

    def watch() -> None:
        try:
            out["obs"] = observe(
                store,
                ngram_server.base_url + "/metrics",
                model="tiny",
                workload="code",
                config=deploy_study.ngram,
                duration_s=40.0,
                interval_s=0.2,
                on_sample=lambda *_: first_scrape.set(),
            )
        except BaseException as exc:  # surfaced below
            out["error"] = exc
            first_scrape.set()

    thread = threading.Thread(target=watch)
    thread.start()
    assert first_scrape.wait(30)
    for c in (1, 2):  # traffic inside the window only
        n = 8
        run_bench(
            bench_argv(
                ngram_server,
                requests_file(workload, n, tmp_path),
                concurrency=c,
                num_requests=n,
                temperature=workload.temperature,
                seed=workload.seed,
                warmups=0,
                chat_template=workload.chat_template,
            )
        )
    assert thread.is_alive(), "the traffic outlasted the window"
    thread.join(60)
    after = _server_counters(ngram_server.base_url)
    assert "error" not in out, out.get("error")
    w = out["obs"].window
    assert w.num_drafts == after.num_drafts - before.num_drafts > 0
    assert w.num_draft_tokens == after.num_draft_tokens - before.num_draft_tokens
    assert w.num_accepted_tokens == after.num_accepted_tokens - before.num_accepted_tokens
    assert list(w.accepted_per_pos) == [
        after.accepted_per_pos[i] - before.accepted_per_pos.get(i, 0) for i in range(2)
    ]
    assert sum(w.accepted_per_pos) == w.num_accepted_tokens
    busy = w.busy_concurrency()
    assert busy and set(busy) <= {1, 2}
    obs = out["obs"]
    # The study's own prompts at temperature 0: the live acceptance is the study's.
    assert len(obs.study_acceptance_per_pos) == 2
    for live, study in zip(w.acceptance_per_pos, obs.study_acceptance_per_pos, strict=True):
        assert live == pytest.approx(study, rel=0.05)
    assert obs.prediction is not None
    assert {c.num_speculative_tokens for c in obs.prediction.candidates} >= {0, 1, 2}
