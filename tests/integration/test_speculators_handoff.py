"""The hand-off to training a speculator, end to end on the tiny model: a real tiny study (the
session's ``deploy_study``, so no engine is started for it here), its prompts exported with the target's responses generated on the vLLM CPU engine, a tiny EAGLE-3
draft trained on nothing but the exported rows, and a study that measures that draft.

The export round-trips through the reader vLLM Speculators' ``prepare_data.py`` uses
(``datasets.load_dataset("json", ...)`` in ``load_raw_dataset``) and the checks of its
pass-through of speculator-format rows (``check_speculator_rows``, the rules read in its
source). Speculators itself is not installed: ``pip install --dry-run speculators`` (0.9.0)
would pull torch 2.14.1, a CUDA build, over the CPU torch vLLM's CPU build needs (through its
torchvision/torchaudio requirements).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from autotune import api
from autotune.export import check_prompt_rows, check_speculator_rows
from autotune.store import Store
from autotune.testing.studies import TINY_MEASUREMENT, tiny_real_study, write_study

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _write_study(tmp_path: Path, name: str, method: dict) -> Path:
    # The deploy study's measurement (same prompts, same digest), one engine, concurrency 1.
    data = tiny_real_study(name, [method], concurrency=(1,), baseline=False, sampler="grid")
    return write_study(tmp_path / f"{name}.yaml", data)


def _run(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        args, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_export_train_and_measure_a_draft(autotune, deploy_study: Any, tmp_path: Path) -> None:
    from datasets import load_dataset

    measured = deploy_study.store.measurements(study="deploy", workload="code")
    assert measured
    digest = measured[-1].workload_digest

    env = {**os.environ, "AUTOTUNE_DB": str(deploy_study.db), "OMP_WAIT_POLICY": "PASSIVE"}
    out = tmp_path / "spec-data"
    cli = [sys.executable, "-m", "autotune.cli", "export", "--speculators-data", "deploy"]
    t0 = time.perf_counter()
    proc = _run([*cli, "--workload", "code", "-o", str(out), "--with-responses"], env, 600)
    print(f"export with responses: {time.perf_counter() - t0:.0f} s")
    assert proc.stdout == ""  # notes go to stderr
    assert f"digest {digest[:12]}" in proc.stderr

    # The reader Speculators' prepare_data.py uses, on each file as its README passes it.
    responses = load_dataset("json", data_files=str(out / "responses.jsonl"), split="train")
    assert {"input_ids", "loss_mask"} <= set(responses.column_names)  # its pass-through path
    rows = list(responses)
    assert len(rows) == TINY_MEASUREMENT["max_prompts"]
    assert check_speculator_rows(rows) > 0
    for row in rows:
        meta = row["metadata"]
        assert meta["workload_digest"] == digest and meta["sampling_params"]["temperature"] == 0
        generated = sum(row["loss_mask"])
        assert 0 < generated <= TINY_MEASUREMENT["max_tokens"]
        # The mask is 0 over the prompt, then 1 over the response: one boundary.
        assert row["loss_mask"] == sorted(row["loss_mask"])
        if meta["finish_reason"] == "length":
            assert generated == TINY_MEASUREMENT["max_tokens"]
    prompts = list(load_dataset("json", data_files=str(out / "prompts.jsonl"), split="train"))
    assert check_prompt_rows(prompts) == len(rows)
    study_text = (out / "measure-draft.yaml").read_text()
    readme = (out / "README.md").read_text()
    assert "scripts/train.py" in readme and "--speculator-type dflash" in readme
    assert study_text.strip() in readme

    # A second export into the same directory is bad input: exit 2, nothing rewritten.
    before = (out / "prompts.jsonl").stat().st_mtime_ns
    again = autotune(
        "--db", str(deploy_study.db), "export", "--speculators-data", "deploy",
        "--workload", "code", "-o", str(out), db=False,
    )  # fmt: skip
    assert again.exit_code == 2 and "already holds" in again.stderr
    assert "Traceback" not in again.stderr
    assert (out / "prompts.jsonl").stat().st_mtime_ns == before

    # The repo's tiny trainer, on the exported rows only.
    draft = tmp_path / "trained-eagle3"
    trained = _run(
        [sys.executable, "-m", "autotune.testing.train_draft", str(out / "responses.jsonl"),
         str(draft), "--steps", "40"], env, 600,
    )  # fmt: skip
    report = json.loads(trained.stdout.strip().splitlines()[-1])
    assert report["supervised_tokens"] == sum(sum(r["loss_mask"]) for r in rows)
    assert report["loss_after"] < report["loss_before"]

    # The trained draft measured by a study on the same prompt set.
    eagle = {
        "method": "eagle3",
        "draft": str(draft),
        "num_speculative_tokens": {"min": 2, "max": 2},
    }
    # Its own store: the deploy store's answer for tiny/code is what test_verify serves.
    store = Store(str(tmp_path / "trained.db"))
    api.create_study(store, _write_study(tmp_path, "trained", eagle))
    t0 = time.perf_counter()
    summary = api.run_study(store, "trained")
    print(f"study of the trained draft: {time.perf_counter() - t0:.0f} s")
    assert summary.trials_failed == 0, summary
    new = store.measurements(study="trained", workload="code")
    assert new and {r.workload_digest for r in new} == {digest}
    assert all(r.method == "eagle3" and r.num_drafts > 0 for r in new)
    accepted = sum(r.num_accepted_tokens for r in new)
    print(f"trained draft: {accepted} of {sum(r.num_draft_tokens for r in new)} draft tokens "
          f"accepted; AL {new[0].mean_acceptance_length:.2f}; per position "
          f"{[round(a / new[0].num_drafts, 3) for a in new[0].accepted_per_pos]}; "
          f"train report {report}")  # fmt: skip
    assert accepted > 0
