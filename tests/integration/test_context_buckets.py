"""The context-length axis on the real vLLM CPU engine (issue #20.2): a tiny study with two
buckets (the session's ``bucket_study``, a goodput study too) builds each one from the
workload's own text with the target's tokenizer, the engine
receives exactly the prompt tokens the buckets recorded, and the answer is read per bucket;
a workload too short for its bucket is refused at create (exit 2, nothing written)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune import api
from autotune.spec.loader import ResolvedStudy
from autotune.store import Store
from autotune.testing.studies import ngram, store_digest, tiny_real_study, write_study

pytestmark = pytest.mark.integration

LENGTHS = [128, 512]
"""The session's bucket study's context lengths (tests/integration/conftest.py)."""


def _study(tmp_path: Path, **extra: object) -> Path:
    data = tiny_real_study("ctx", [ngram(2, 2)], concurrency=(1, 4), context_lengths=LENGTHS)
    return write_study(tmp_path / "ctx.yaml", {**data, **extra})


def test_two_context_buckets_on_the_real_engine(bucket_study: Any):
    """On the session's bucket study (its goodput side: tests/integration/test_goodput_e2e.py)."""
    store = bucket_study.store
    buckets = bucket_study.created.resolved.context_buckets
    assert list(buckets) == ["code@ctx128", "code@ctx512"]
    for name, b in buckets.items():
        # Grown from HumanEval's own prompts to about L tokens of the tiny BPE, never past it.
        assert b.num_prompts == 4
        assert 0.9 * b.context_length <= b.prompt_tokens_min <= b.prompt_tokens_max
        assert b.prompt_tokens_max <= b.context_length, name

    summary = bucket_study.summary
    assert summary.trials_run == 2 and summary.trials_failed == 0, summary
    rows = store.measurements(study="ctx")
    assert {r.workload for r in rows} == set(buckets)
    for r in rows:
        b = buckets[r.workload]
        assert r.workload_digest == b.digest
        # The engine's own count of the prompt tokens it was sent is the bucket's, exactly:
        # each measurement cycles its 4 prompts a whole number of times.
        assert r.num_prompt_tokens / r.num_requests == pytest.approx(b.prompt_tokens_mean)

    record = store.get_study("ctx")
    assert ResolvedStudy.from_json(record.resolved_json).context_buckets == buckets
    lines = []
    for context in LENGTHS:
        pick = api.context_bucket(store, "tiny", "code", context)
        assert pick.context_length == context
        for level in (1, 4):
            rec = api.recommend(store, "tiny", pick.workload, level)
            best = rec.choice.best
            lines.append(
                f"{pick.workload} c={level}: {best.label()} {best.median_tok_s:.1f} tok/s "
                f"speedup {rec.choice.speedup or 1.0:.2f}x AL "
                f"{best.mean_acceptance_length or 0:.2f}"
            )
    print("\n".join(lines))  # the per-bucket answers, for the record (pytest -s)


def test_a_workload_too_short_for_its_bucket_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    wdir = tmp_path / "workloads"
    wdir.mkdir()
    (wdir / "tiny-text.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "tiny-text",
                "source": {"kind": "inline", "prompts": ["Say hello.", "Count to three."]},
                "max_tokens": 16,
            }
        )
    )
    monkeypatch.setenv("AUTOTUNE_WORKLOADS", str(wdir))
    db = tmp_path / "short.db"
    store = Store(str(db))
    before = store_digest(db)
    from autotune.errors import SpecError

    with pytest.raises(SpecError) as err:
        api.create_study(store, _study(tmp_path, workloads=["tiny-text"]))
    assert err.value.field == "context_lengths.0"
    assert "too little text for a 128-token bucket" in err.value.reason
    assert store_digest(db) == before
    assert store.list_studies() == []
