"""`autotune verify` end to end: a tiny real study (baseline + n-gram N=2 on vLLM's CPU build),
then the recommendation served by a real `vllm serve` on loopback and driven by `vllm bench
serve`; the comparison is printed, stored with the study and decides the exit code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import autotune.verify as verifying
from autotune import api
from autotune.recommend import render
from autotune.store import Store
from autotune.testing.studies import tiny_real_study, write_study
from autotune.verify.compare import Verification

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _verify(db: Path, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "AUTOTUNE_DB": str(db)}
    cmd = [sys.executable, "-m", "autotune.cli", "verify", "--model", "tiny", "--workload",
           "code", *args]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, text=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=1500)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    print(out)
    print(err[-4000:], file=sys.stderr)
    return proc.returncode, out, err


def test_verify_serves_the_recommendation(deploy_study: Any, tmp_path: Path) -> None:
    """On the session's deploy study (baseline + n-gram N=2 at concurrency 1 and 2): `verify
    --dsd` serves a Dynamic SD table, the best fixed N and true off (three servers), judges the
    table against off at each level, stores that verdict and, from the same servers, the fixed
    N's verification against off. The table is the recommended one where it has a 0-band;
    otherwise (the study answers one config at both levels) the test gives one with `--table`:
    the measured n-gram config at c=1 and N=0 at c=2, the band that runs the drafter while
    drafting nothing."""
    db, store = deploy_study.db, deploy_study.store
    recommended = render.dsd_config(api.recommend(store, "tiny", "code").per_level)
    if recommended is not None and any(
        row[2] == 0 for row in recommended["num_speculative_tokens_per_batch_size"]
    ):
        table, args = recommended, ["--dsd"]
    else:
        n = deploy_study.ngram["num_speculative_tokens"]
        table = {
            **deploy_study.ngram,
            "num_speculative_tokens_per_batch_size": [[1, 1, n], [2, 2, 0]],
        }
        args = ["--table", json.dumps(table)]
    code, out, err = _verify(db, "--workdir", str(tmp_path / "work"), "--repeats", "2", *args)
    assert code in (0, 1), err[-2000:]
    assert "server tok/s" in out and "concurrency" in out
    stored = dict(
        (v.mode, v) for _, v in verifying.verifications(store, store.get_study("deploy"), "code")
    )
    assert set(stored) == {"fixed", "dsd"}
    v = stored["fixed"]
    assert isinstance(v, Verification)
    assert [lv.concurrency for lv in v.levels] == [1, 2]
    for lv in v.levels:
        assert lv.server_tok_s > 0 and lv.server_reference_tok_s > 0
        assert lv.study_tok_s and lv.study_reference_tok_s
        # A drafting config is served even when "off" is recommended (its loss is verified).
        assert lv.server_al is not None and lv.server_al > 1.0
        assert lv.study_al is not None and lv.study_al > 1.0
    assert v.command.startswith("vllm serve ") and "--host 127.0.0.1" in v.command
    assert "--speculative-config" in v.command and "ngram" in v.command
    assert "--speculative-config" not in v.reference_command
    assert json.loads(json.dumps(v.to_json()))["passed"] == v.passed
    d = stored["dsd"]
    assert (code == 0) == d.passed
    assert "num_speculative_tokens_per_batch_size" in d.command
    assert d.speculative_config is not None
    assert (
        d.speculative_config["num_speculative_tokens_per_batch_size"]
        == (table["num_speculative_tokens_per_batch_size"])
    )
    assert d.off_command and "--speculative-config" not in d.off_command
    assert d.off_command == v.reference_command  # one off server for both
    rows = table["num_speculative_tokens_per_batch_size"]
    for lv in d.levels:
        assert lv.server_off_tok_s and lv.server_off_tok_s > 0 and lv.server_runs == 2
        assert lv.table_n == next(r[2] for r in rows if r[0] <= lv.concurrency <= r[1])
        assert lv.off_verdict in ("tie", "undecided", "decided")
        assert lv.off_margin_pct == pytest.approx(100 * (lv.server_tok_s / lv.server_off_tok_s - 1))
    assert any(lv.table_n == 0 for lv in d.levels)  # a 0-band was served against true off
    assert d.dsd_answer is not None
    zero = [lv for lv in d.levels if lv.table_n == 0]
    trails = [lv for lv in zero if lv.off_verdict == "undecided" and lv.off_margin_pct < 0]
    assert d.dsd_answer["recommended"] == (
        "route" if any(lv.off_within_noise is False for lv in zero)
        else "undecided" if trails else "table"
    )  # fmt: skip
    assert "Dynamic SD table vs true off:" in out and "vs off" in out
    # shown where the deployment is read: report/check lines and recommend --format dsd
    lines = verifying.verification_lines(store, "deploy", "code")
    assert any("vs true off:" in line for line in lines)
    assert verifying.dsd_lines(store, "deploy", "code")
    # No server is left behind: each ran in its own process group, killed at the end.
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    for command in (v.command, v.reference_command):
        assert f"--port {command.split('--port ')[1].split()[0]}" not in ps


def test_study_measured_through_vllm_serve(tmp_path: Path) -> None:
    """`engine: {kind: vllm, client: server}`: every cell is `vllm bench serve` against `vllm
    serve`, so the study's numbers are the ones vLLM's benchmark prints; acceptance comes from
    the server's /metrics and matches the counters' arithmetic. One drafting config, no
    baseline: one server start (the baseline served and measured by `vllm bench serve` is
    `verify`'s reference above; the backend's counters: test_engine_contract's vllm-serve)."""
    ngram = {"method": "ngram", "num_speculative_tokens": {"min": 2, "max": 2}}
    data = tiny_real_study("served", [ngram], concurrency=(2,), baseline=False)
    data["engine"] = {"kind": "vllm", "client": "server"}
    path = write_study(tmp_path / "served.yaml", data)
    store = Store(str(tmp_path / "served.db"))
    api.create_study(store, path)
    summary = api.run_study(store, "served")
    assert summary.trials_failed == 0, summary.failures
    rows = store.measurements(study="served")
    assert len(rows) == 1  # ngram N=2, concurrency 2, one repeat
    (drafted,) = rows
    assert drafted.output_throughput_tok_s > 0 and drafted.num_requests == 4
    assert drafted.num_output_tokens == 4 * 32  # --ignore-eos, the study's output length
    assert drafted.p99_ttft_ms and drafted.median_tpot_ms and drafted.p99_itl_ms
    assert drafted.speculative_config
    assert drafted.num_drafts > 0 and 0 < drafted.num_accepted_tokens <= drafted.num_draft_tokens
    assert len(drafted.accepted_per_pos) == 2
    assert sum(drafted.accepted_per_pos) == drafted.num_accepted_tokens
