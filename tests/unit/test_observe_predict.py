"""`observe`'s prediction (autotune.observe.predict) on a recorded sweep of the tiny CPU model
(bench/landscapes/cpu-tiny-llama.csv, replayed): the study's step cost with the live acceptance
substituted decides which N wins for the traffic seen."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import api
from autotune.observe.predict import (
    family_points,
    level_weights,
    predict_live,
    study_acceptance,
)
from autotune.observe.run import family_key
from autotune.store import Store

LANDSCAPE = Path(__file__).resolve().parents[2] / "bench" / "landscapes" / "cpu-tiny-llama.csv"


@pytest.fixture(scope="module")
def ngram_points(tmp_path_factory: pytest.TempPathFactory):
    store = Store(str(tmp_path_factory.mktemp("observe") / "autotune.db"))
    api.create_replay_study(store, LANDSCAPE, "tiny-sweep", sampler="grid")
    api.run_study(store, "tiny-sweep")
    rows = store.measurements(study="tiny-sweep", workload="code")
    ngram = next(r.speculative_config for r in rows if r.method == "ngram")
    key = family_key(ngram)
    family = [r for r in rows if r.speculative_config and family_key(r.speculative_config) == key]
    base = [r for r in rows if not r.speculative_config]
    return family_points([*family, *base], "ngram")


def test_study_acceptance_is_the_measured_curve(ngram_points) -> None:
    a2 = study_acceptance(ngram_points, "ngram", 2)
    assert len(a2) == 2 and 1 > a2[0] > a2[1] > 0
    # the recorded sweep's ngram N=1 runs accept 0.7707 at position 1 (landscape rows)
    assert study_acceptance(ngram_points, "ngram", 1)[0] == pytest.approx(0.7707, abs=1e-3)


def test_level_weights_move_each_count_to_the_nearest_level() -> None:
    w = level_weights({1: 0.25, 2: 0.25, 3: 0.25, 6: 0.25}, [1, 4, 8])
    assert w == {1: 0.5, 4: 0.25, 8: 0.25}  # 2 sits nearer 1 than 4 in log c (a tie: lower)


def test_the_studys_own_acceptance_keeps_the_deployed_n_competitive(ngram_points) -> None:
    a = study_acceptance(ngram_points, "ngram", 2)
    p = predict_live(ngram_points, "ngram", 2, a, {1: 1.0})
    deployed = next(c for c in p.candidates if c.num_speculative_tokens == 2)
    assert deployed.gain == 0.0
    assert {c.num_speculative_tokens for c in p.candidates} >= {0, 1, 2, 3, 4}
    for c in p.candidates:
        assert c.gain_low <= c.gain <= c.gain_high


def test_traffic_that_accepts_nothing_turns_speculation_off(ngram_points) -> None:
    p = predict_live(ngram_points, "ngram", 2, (0.02, 0.0), {1: 0.5, 4: 0.5})
    assert p.best.num_speculative_tokens == 0 and p.best.gain > 0
    assert all(row[2] == 0 for row in p.dsd_table)


def test_traffic_that_accepts_everything_wants_the_longest_n(ngram_points) -> None:
    p = predict_live(ngram_points, "ngram", 2, (1.0, 1.0), {1: 1.0})
    assert p.best.num_speculative_tokens >= 3 and p.best.gain > 0
    low = predict_live(ngram_points, "ngram", 2, (0.3, 0.1), {1: 1.0})
    assert low.best.num_speculative_tokens < p.best.num_speculative_tokens
