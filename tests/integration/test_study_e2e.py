"""End to end on the real vLLM CPU engine in Ray actors: a study runs, failures become failed
trials, the recommendation comes from the store, and a killed driver resumes without measuring a
completed config twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune import api
from autotune.evidence.decide import PRACTICAL_TIE_PCT as DEFAULT_TIE_PCT
from autotune.store import Store
from autotune.testing.studies import tiny_real_study, write_study

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _study(tmp_path: Path, name: str, methods: list[dict], concurrency=(1, 2)) -> Path:
    return write_study(tmp_path / f"{name}.yaml", tiny_real_study(name, methods, concurrency))


def test_study_runs_on_real_engines(tmp_path: Path):
    store = Store(str(tmp_path / "e2e.db"))
    path = _study(
        tmp_path,
        "e2e",
        [
            {"method": "ngram", "num_speculative_tokens": {"min": 2, "max": 2}},
            # The target drafting for itself, greedy: every draft token is accepted.
            {
                "method": "draft_model",
                "draft": "tiny:llama",
                "num_speculative_tokens": {"min": 2, "max": 2},
            },
            {
                "method": "eagle3",
                "draft": str(tmp_path / "no-such-draft"),
                "num_speculative_tokens": {"min": 1, "max": 1},
            },
        ],
    )
    api.create_study(store, path)
    summary = api.run_study(store, "e2e")
    assert summary.trials_run == 3, summary
    assert summary.trials_failed == 1
    trials = {t.method: t for t in store.trials(store.get_study("e2e"))}
    assert trials["eagle3"].state == "failed"
    assert trials["eagle3"].failure_reason and "no-such-draft" in trials["eagle3"].failure_reason
    assert trials["none"].engine_start_s and trials["none"].vllm_version
    rows = store.measurements(study="e2e")
    assert len(rows) == 3 * 2  # baseline, ngram, draft_model x 2 concurrency levels
    for r in rows:
        assert r.output_throughput_tok_s > 0 and r.max_inflight == r.concurrency
        assert r.device_arch == "cpu" and r.workload_digest
        if r.method == "none":
            assert r.num_drafts == 0 and r.accepted_per_pos == ()
        else:
            assert r.num_drafts > 0 and sum(r.accepted_per_pos) == r.num_accepted_tokens
    self_draft = [r for r in rows if r.method == "draft_model"]
    for r in self_draft:
        assert min(a / r.num_drafts for a in r.accepted_per_pos) >= 0.95
    rec = api.recommend(store, "tiny", "code", 1)
    # One repeat each: the fastest config at c=1 heads the tie group, and the recommendation
    # is a member of that group (the smallest N among configs within the tie margin).
    fastest = max(r.output_throughput_tok_s for r in rows if r.concurrency == 1)
    assert max(s.median_tok_s for s in rec.choice.tied) == fastest
    assert rec.choice.best in rec.choice.tied
    assert rec.choice.best.median_tok_s >= fastest * (1 - DEFAULT_TIE_PCT / 100)


def test_killed_driver_resumes_without_remeasuring(tmp_path: Path):
    db = tmp_path / "resume.db"
    path = _study(
        tmp_path,
        "resume",
        # the baseline and one drafter: the kill lands while the second config starts
        [{"method": "ngram", "num_speculative_tokens": {"min": 1, "max": 1}}],
        concurrency=(1,),
    )
    env = {**os.environ, "AUTOTUNE_DB": str(db)}
    exe = [sys.executable, "-m", "autotune.cli"]
    subprocess.run([*exe, "study", "create", str(path)], env=env, check=True, cwd=REPO)
    store = Store(str(db))
    proc = subprocess.Popen(
        [*exe, "study", "run", "resume"],
        env=env,
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            done = [t for t in store.trials(store.get_study("resume")) if t.state == "complete"]
            if done:
                break
            assert proc.poll() is None, "the driver exited before finishing one trial"
            time.sleep(1)
        else:
            pytest.fail("no trial finished in time")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the local Ray it started
        proc.wait()
    first = {
        t.config_key: t.id for t in store.trials(store.get_study("resume")) if t.state == "complete"
    }
    before = {m.id for m in store.measurements(study="resume")}
    subprocess.run([*exe, "study", "resume", "resume"], env=env, check=True, cwd=REPO, timeout=900)
    trials = store.trials(store.get_study("resume"))
    complete = [t for t in trials if t.state == "complete"]
    assert len(complete) == 2  # baseline, N=1
    assert len({t.config_key for t in complete}) == 2  # none measured twice
    for key, tid in first.items():
        assert next(t.id for t in complete if t.config_key == key) == tid
    after = store.measurements(study="resume")
    assert before <= {m.id for m in after}
