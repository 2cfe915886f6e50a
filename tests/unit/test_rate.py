"""`recommend --request-rate R` (autotune.recommend.rate) on a stored study whose measurements
carry request throughputs: the import of the real `vllm bench sweep serve` in
tests/data/vllm-sweep (vLLM 0.32.0 CPU build, tiny Llama, off and n-gram N=1, 2 at concurrency 1
and 4, 2 runs each, on a loaded machine: noisy, real)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from autotune.recommend.rate import concurrency_at

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "tests" / "data" / "vllm-sweep" / "tiny-ngram"
LANDSCAPE = REPO / "tests" / "data" / "tiny-cpu-slo-landscape.csv"


def _recorded_rate(run_dir: str) -> float:
    """Median request throughput of one sweep cell, read from vLLM's own run files."""
    runs = sorted((SWEEP / run_dir).glob("run=*.json"))
    return statistics.median(json.loads(p.read_text())["request_throughput"] for p in runs)


@pytest.fixture
def imported(autotune):
    done = autotune("import", "--vllm-sweep", str(SWEEP), "--workload", "code", "--name", "sweep")
    assert done.exit_code == 0, done.stderr
    return autotune


def _at(autotune, rate: float) -> dict:
    out = autotune(
        "recommend", "--model", "tiny:llama", "--workload", "code", "--request-rate", str(rate),
        "--json",
    )  # fmt: skip
    assert out.exit_code == 0, out.stderr
    return json.loads(out.stdout)


def test_littles_law_between_two_levels() -> None:
    # L(1) = 1 s, L(4) = 2 s: on [1, 4] L(c) = 1 + (c - 1)/3, and c = R·L(c) at R = 1.5 gives
    # c = 1.5·(2/3 + c/3), c = 2: L(2) = 4/3 s and 1.5 × 4/3 = 2.
    assert concurrency_at(1.5, [1, 4], [1.0, 2.0]) == pytest.approx(2.0)
    assert concurrency_at(0.5, [1, 4], [1.0, 2.0]) == pytest.approx(0.5)  # alone, L(1)
    assert concurrency_at(2.0, [1, 4], [1.0, 2.0]) == pytest.approx(4.0)  # X(4) = 4/2
    assert concurrency_at(2.1, [1, 4], [1.0, 2.0]) is None  # beyond what 4 in flight serve
    assert concurrency_at(0.5, [2, 4], [1.0, 2.0]) is None  # below a lowest level of 2


@pytest.mark.vllm  # the import reads the sweep with vLLM's own parser
def test_every_config_runs_where_its_measured_latency_says(imported) -> None:
    data = _at(imported, 1.0)
    off = 1.0 / _recorded_rate("SERVE--baseline-BENCH--c1")  # L(1) = 1 / X(1), in s
    by = {c["config"]: c for c in data["configs"]}
    assert by["off (no speculation)"]["mean_latency_ms"] == pytest.approx(1000 * off, rel=1e-4)
    assert by["off (no speculation)"]["concurrency"] == pytest.approx(
        off, rel=1e-3
    )  # c = R × L at R = 1
    for c in data["configs"]:
        assert c["concurrency"] == pytest.approx(c["mean_latency_ms"] / 1000, rel=1e-3)
    assert data["config"] == "off (no speculation)" and data["speculative_config"] is None
    assert data["measured_levels"] == [1, 4]
    # Two runs a side spreading up to 2.8x (a loaded machine): n-gram's 7.7x latency is inside
    # the 95% interval, which is too wide to state, but a 2x gap is never a tie nor undecided
    # (the one rule, autotune.evidence.decide): off answers, tied with nothing.
    ratio = by["ngram N=1"]["mean_latency_ms"] / by["off (no speculation)"]["mean_latency_ms"]
    assert ratio > 2
    assert not data["tie"] and data["tied_with"] == []


@pytest.mark.vllm  # the import reads the sweep with vLLM's own parser
def test_at_its_capacity_at_4_in_flight_a_config_runs_at_4(imported) -> None:
    rate = _recorded_rate("SERVE--ngram-N1-BENCH--c4")
    data = _at(imported, rate)
    ngram = next(c for c in data["configs"] if c["config"] == "ngram N=1")
    assert ngram["concurrency"] == pytest.approx(4.0, rel=1e-6)
    assert ngram["interpolated_between"] == [4, 4]
    assert "ngram N=2" in data["beyond_measured_levels"]  # it served less at 4 in flight


@pytest.mark.vllm  # the import reads the sweep with vLLM's own parser
def test_a_rate_beyond_the_measured_levels_is_refused(imported) -> None:
    out = imported(
        "recommend", "--model", "tiny:llama", "--workload", "code", "--request-rate", "50"
    )  # fmt: skip
    assert out.exit_code == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "autotune: error: --request-rate: 50 requests/s lies beyond the measured levels of code "
        "(1, 4) for every config (the most any sustained: 4.29 requests/s); autotune does not "
        "extrapolate"
    ]


@pytest.mark.vllm  # the import reads the sweep with vLLM's own parser
def test_it_does_not_combine_with_concurrency(imported) -> None:
    out = imported(
        "recommend", "--model", "tiny:llama", "--workload", "code", "--request-rate", "1",
        "--concurrency", "4",
    )  # fmt: skip
    assert out.exit_code == 2
    assert out.stderr.strip().startswith("autotune: error: --request-rate: ")
    assert "--concurrency" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_replayed_landscape_has_no_request_rate_to_answer_from(autotune) -> None:
    made = autotune("study", "create", "--landscape", str(LANDSCAPE), "--name", "replayed")
    assert made.exit_code == 0, made.stderr
    assert autotune("study", "run", "replayed").exit_code == 0
    out = autotune(
        "recommend", "--model", "tiny:llama", "--workload", "code", "--request-rate", "1"
    )  # fmt: skip
    assert out.exit_code == 2 and out.stdout == ""
    assert "records a request throughput" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_latencies_are_told_apart_by_the_one_rule() -> None:
    from autotune.recommend.rate import ConfigAtRate

    def at(latency_ms: float, ci_log: float) -> ConfigAtRate:
        return ConfigAtRate("c", None, 0, None, 1.0, latency_ms, (1, 1), ci_log)

    top = at(100.0, 0.0)
    assert top.ties_with(at(100.9, 0.0))  # inside 1 %: a tie
    assert not top.ties_with(at(102.0, 0.0))  # past it with no noise: decided
    assert top.ties_with(at(130.0, 0.3))  # the interval still contains 1: undecided
    # A 2x gap is decided however wide the interval (as recommend never calls 10x a tie).
    assert not top.ties_with(at(250.0, float("inf")))


@pytest.mark.vllm  # the import reads the sweep with vLLM's own parser
def test_a_mix_of_rates_is_answered_by_the_mean_latency_over_it(imported) -> None:
    # 30 % of the time at 0.5 requests/s, 70 % at 1.5: each config holds the share-weighted
    # concurrency of the two single-rate answers in flight and serves 1.2 requests/s on average,
    # so by Little's law a request waits their ratio.
    low, high = _at(imported, 0.5), _at(imported, 1.5)
    out = imported(
        "recommend", "--model", "tiny:llama", "--workload", "code", "--request-rate",
        "0.5:3,1.5:7", "--json",
    )  # fmt: skip
    assert out.exit_code == 0, out.stderr
    data = json.loads(out.stdout)
    assert "shares sum to 10, not 1: normalised to 0.5:0.3,1.5:0.7" in out.stderr
    assert "at the rate mix 0.5:0.3,1.5:0.7 (1.2 requests/s on average)" in out.stderr
    assert data["request_rate_req_s"] == pytest.approx(1.2)
    assert data["request_rate_mix"] == [[0.5, 0.3], [1.5, 0.7]]
    lo = {c["config"]: c for c in low["configs"]}
    hi = {c["config"]: c for c in high["configs"]}
    judged = {c["config"]: c for c in data["configs"]}
    assert set(judged) == set(lo) & set(hi) and judged
    for name, c in judged.items():
        mean_c = 0.3 * lo[name]["concurrency"] + 0.7 * hi[name]["concurrency"]
        assert c["concurrency"] == pytest.approx(mean_c, rel=1e-3)
        assert c["mean_latency_ms"] == pytest.approx(1000 * mean_c / 1.2, rel=1e-3)
    best = min(judged.values(), key=lambda c: c["mean_latency_ms"])
    assert data["config"] == best["config"] or data["tie"]


def test_rates_parse_as_one_rate_or_a_mix_and_refuse_in_one_line() -> None:
    from autotune.cli.rate import parse_rates
    from autotune.errors import SpecError

    assert parse_rates("4") == (4.0, None)
    assert parse_rates("0.5:0.25,2:0.75") == ({0.5: 0.25, 2.0: 0.75}, None)
    mix, note = parse_rates("1:1,3:1")
    assert mix == {1.0: 0.5, 3.0: 0.5} and note and "normalised to 1:0.5,3:0.5" in note
    for bad in ("0", "-1", "inf", "x", "1:0", "1:0.5,x:0.5", "1:0.5,1:0.5", "1:"):
        with pytest.raises(SpecError) as exc:
            parse_rates(bad)
        assert exc.value.source == "--request-rate" and "\n" not in str(exc.value)
