"""Answers for the deployment (autotune.recommend.choose): a level between measured ones, a
traffic mix, the levels where one answer for all levels loses; on a replay of the recorded tiny
Llama sweep (bench/landscapes/cpu-tiny-llama.csv)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from autotune.recommend.choose import neighbour_weights, traffic_weights

REPO = Path(__file__).resolve().parents[2]
LLAMA = REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv"


def test_neighbour_weights_follow_log_concurrency() -> None:
    assert neighbour_weights(4, [1, 4, 8]) == {4: 1.0}
    two = neighbour_weights(2, [1, 4, 8])
    assert two is not None and two[1] == pytest.approx(0.5) and two[4] == pytest.approx(0.5)
    six = neighbour_weights(6, [1, 4, 8])
    assert six is not None and six[8] == pytest.approx(math.log(6 / 4) / math.log(2))
    assert neighbour_weights(16, [1, 4, 8]) is None and neighbour_weights(1, [2, 4]) is None
    mix = traffic_weights({1: 0.2, 2: 0.4, 8: 0.4}, [1, 4, 8])
    assert mix == pytest.approx({1: 0.4, 4: 0.2, 8: 0.4})
    with pytest.raises(ValueError, match="outside the measured levels"):
        traffic_weights({32: 1.0}, [1, 4, 8])


@pytest.fixture
def replayed(autotune):
    made = autotune("study", "create", "--landscape", str(LLAMA), "--name", "llama")
    assert made.exit_code == 0, made.stderr
    ran = autotune("study", "run", "llama", "--quiet")
    assert ran.exit_code == 0, ran.stderr
    return autotune


def _json(result) -> dict:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_answers_for_the_concurrency_and_traffic_deployed(replayed) -> None:
    autotune = replayed
    ask = ("recommend", "--model", "tiny", "--workload", "code")
    overall = autotune(*ask, "--json")
    doc = _json(overall)
    assert "note: answered from study 'llama'" in overall.stderr
    # The one answer for all levels loses where a level's own answer is another config.
    per_level = {c: _json(autotune(*ask, "--concurrency", str(c), "--json")) for c in (1, 4, 8)}
    for loss in doc["loses_at"]:
        level = per_level[loss["concurrency"]]
        assert loss["winner_speculative_config"] == level["speculative_config"]
        assert loss["winner_speculative_config"] != doc["speculative_config"]
        assert loss["loss_pct"] > 0 and loss["loss_pct"] == round(loss["loss_pct"], 3)
        assert f"at concurrency {loss['concurrency']} the answer" in overall.stderr
    assert doc["loses_at"], "the recorded sweep has a level the all-levels answer loses"
    # Numbers are rounded and say what they are.
    assert "speedup" not in doc and doc["speedup_vs_off"] == float(f"{doc['speedup_vs_off']:.4g}")

    # A measured level's answer is its own; a level between two is answered from them.
    between = autotune(*ask, "--concurrency", "2", "--json")
    two = _json(between)
    assert two["answered_from_levels"] == {"1": 0.5, "4": 0.5}
    assert "concurrency 2, which was not measured: from its neighbours 1 and 4" in between.stderr
    if per_level[1]["speculative_config"] == per_level[4]["speculative_config"]:
        assert two["speculative_config"] == per_level[1]["speculative_config"]
    # A traffic mix all at one measured level answers as that level does.
    only8 = _json(autotune(*ask, "--traffic", "8:1", "--json"))
    assert only8["speculative_config"] == per_level[8]["speculative_config"]
    mixed = autotune(*ask, "--traffic", "1:2,8:2")
    assert "normalised to 1:0.5,8:0.5" in mixed.stderr
    assert _json(autotune(*ask, "--traffic", "1:0.5,8:0.5", "--json"))["traffic"] == {
        "1": 0.5,
        "8": 0.5,
    }
    for bad in ("1:0", "1:-0.5", "x:1", "1", "0:1", "1:0.5,1:0.5", "1:nan"):
        refused = autotune(*ask, "--traffic", bad)
        assert refused.exit_code == 2, (bad, refused.stderr)
        assert refused.stderr.startswith("autotune: error: --traffic: ")
        assert len(refused.stderr.strip().splitlines()) == 1
    assert autotune(*ask, "--traffic", "64:1").exit_code == 1

    # Dynamic SD: no N at a level whose own answer is off.
    dsd = json.loads(autotune(*ask, "--format", "dsd").stdout)
    for lo, hi, n in dsd["num_speculative_tokens_per_batch_size"]:
        for c, level in per_level.items():
            if lo <= c <= hi and level["speculative_config"] is None:
                assert n == 0, (c, dsd)


def _score(config: dict | None, trials: tuple[int, ...], tok_s: tuple[float, ...]):
    from autotune.evidence.scores import ConfigScore

    median = sorted(tok_s)[len(tok_s) // 2]
    return ConfigScore(
        method="ngram" if config else "none",
        draft=None,
        num_speculative_tokens=config["num_speculative_tokens"] if config else 0,
        speculative_config=config,
        trial_ids=trials,
        throughputs=tok_s,
        median_tok_s=median,
        mad_tok_s=0.0,
        score_tok_s=median,
        spread_pct=0.0,
        mean_acceptance_length=None,
        acceptance_per_pos=(),
    )


def test_the_drift_checks_second_baseline_start_screens_nothing_out() -> None:
    """A study of ``repeats: 1`` with the drift check (the default on real engines): the
    baseline's two runs are two engine starts, not repeats the n-gram config was denied, so the
    n-gram config stays choosable (it was screened out, and every level answered "off, nothing
    compared"); a config the search stopped repeating on a start is still a screening run."""
    from autotune.recommend.choose import screen

    ngram = {"method": "ngram", "num_speculative_tokens": 2}
    base = _score(None, (1, 3), (299.7, 235.2))
    one = _score(ngram, (2,), (288.5,))
    ranked, screened = screen([base, one])
    assert ranked == [base, one] and screened == []
    repeated = _score(None, (1, 3), (299.7, 301.0, 298.0, 235.2, 236.0, 240.0))
    ranked, screened = screen([repeated, one])
    assert ranked == [repeated] and screened == [one]
