"""A deployed config's name next to the study's (autotune.recommend.deployed): a deployed n-gram
config whose lookup window the study never varied is not named like the measured one, in
``check``'s verdict and in ``check --measure``'s text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune import api
from autotune.recommend.deployed import deployed_label
from autotune.recommend.measured import (
    AcceptanceCheck,
    MeasuredCheck,
    failure_line,
    history_line,
    render,
)
from autotune.spec.labels import PLAIN, Labels
from autotune.store import Store
from autotune.testing.landscapes import point, write
from autotune.testing.studies import ngram, replay_study

WINDOW = {"prompt_lookup_min": 2, "prompt_lookup_max": 4}
"""The one lookup window the study measures (its label does not show it)."""
MEASURED_N3 = {"method": "ngram", "num_speculative_tokens": 3, **WINDOW}
ONE_TOKEN = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1,
             "prompt_lookup_max": 1}  # fmt: skip


def test_a_knob_the_study_never_varied_is_named_for_the_deployed_config() -> None:
    measured = [None, {**MEASURED_N3, "num_speculative_tokens": 2}, MEASURED_N3]
    labels = Labels(measured)
    assert labels(ONE_TOKEN) == labels(MEASURED_N3) == "ngram N=3"  # the defect: one name
    assert (
        deployed_label(ONE_TOKEN, measured, labels)
        == "ngram N=3 (prompt_lookup_max=1, prompt_lookup_min=1)"
    )
    only_max = {**MEASURED_N3, "prompt_lookup_max": 1, "prompt_lookup_min": 1}
    assert deployed_label({**only_max, "prompt_lookup_min": 2}, measured) == (
        "ngram N=3 (prompt_lookup_max=1)"
    )
    # the measured config itself, one no measured config is named like, and the baseline: as is
    assert deployed_label(dict(MEASURED_N3), measured, labels) == "ngram N=3"
    assert deployed_label({**ONE_TOKEN, "num_speculative_tokens": 5}, measured) == "ngram N=5"
    assert deployed_label(None, measured) == "off (no speculation)"


def test_the_nearest_measured_config_of_the_same_name_decides_what_is_shown() -> None:
    """A study that varied the window shows it in its labels; a knob it did not vary (the
    minimum here) is added against the measured config of the same name."""
    measured = [{**MEASURED_N3, "prompt_lookup_max": m} for m in (4, 5)]
    labels = Labels(measured)
    deployed = {**MEASURED_N3, "prompt_lookup_min": 1}
    assert labels(deployed) == labels(MEASURED_N3) == "ngram[max=4] N=3"
    assert deployed_label(deployed, measured, labels) == "ngram[max=4] N=3 (prompt_lookup_min=1)"
    # a knob left at vLLM's default where the measured config set it reads "default"
    draft = {"method": "draft_model", "model": "org/d", "num_speculative_tokens": 2}
    blocked = {**draft, "rejection_sample_method": "block"}
    assert deployed_label(draft, [blocked], PLAIN).endswith("(rejection_sample_method=default)")


@pytest.fixture
def study(tmp_path: Path) -> Path:
    tok_s = {("none", 0): 100.0, ("ngram", 2): 150.0, ("ngram", 3): 170.0}
    land = write(
        tmp_path / "l.csv",
        [
            point(m, n, 1, t + r, repeat=r, acceptance=(0.6,) * n, params=WINDOW if n else None)
            for (m, n), t in tok_s.items()
            for r in range(2)
        ],
    )
    db = tmp_path / "autotune.db"
    data = replay_study(land, model="tiny", concurrency=(1,), methods=[ngram(2, 3, **WINDOW)])
    api.create_study(Store(str(db)), data=data, source=str(land))
    api.run_study(Store(str(db)), "replayed")
    return db


def test_check_names_the_deployed_config_apart_from_the_recommended_one(autotune, study) -> None:
    run = autotune(
        "check", "--model", "tiny", "--workload", "code", "--config", json.dumps(ONE_TOKEN)
    )
    assert run.exit_code == 1
    assert "the deployed config ngram N=3 (prompt_lookup_max=1, prompt_lookup_min=1), {" in (
        run.stderr
    )
    assert "; the recommended config is ngram N=3: deploy {" in run.stderr
    # the measured config deployed is named as the study names it
    ok = autotune(
        "check", "--model", "tiny", "--workload", "code", "--config", json.dumps(MEASURED_N3)
    )
    assert ok.exit_code == 0 and "the deployed config ngram N=3 is the recommended one" in ok.stdout


def test_check_measure_text_and_json_carry_the_told_apart_name() -> None:
    """The result ``check --measure`` prints, stores and exits with, as autotune.verify builds
    it from the study's trials (the engine run itself is tests/integration/test_remeasure.py)."""
    name = deployed_label(ONE_TOKEN, [None, MEASURED_N3])
    result = MeasuredCheck(
        study="s",
        model="tiny",
        workload="code",
        label=name,
        speculative_config=ONE_TOKEN,
        reference_label="ngram N=3 (nearest measured)",
        vllm_version="0.32.0",
        study_vllm_versions=("0.32.0",),
        acceptance=AcceptanceCheck(3.1, 2.29, (0.79,), (0.55,), 0.05, (1,), True),
        speedup=None,
        choice_ok=True,
        choice_reason="",
    )
    text = render(result)
    assert f"{name} measured now" in text and "the study's ngram N=3 (nearest measured)" in text
    assert failure_line(result).startswith(f"{name} on vLLM 0.32.0: acceptance fell")
    stored = result.to_json()
    assert stored["label"] == "ngram N=3 (prompt_lookup_max=1, prompt_lookup_min=1)"
    assert name in history_line("2026-12-01", stored)
