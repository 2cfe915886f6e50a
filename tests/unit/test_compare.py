"""`autotune compare A B` (autotune.recommend.compare, autotune.cli.compare) on real studies: two
imports of the recorded `vllm bench sweep serve` (tests/data/vllm-sweep), and replays of two real
CPU sweeps of the tiny Llama on workload code (8 HumanEval prompts, 64 output tokens) recorded on
2026-11-30 by different sessions: bench/landscapes/cpu-tiny-llama.csv at 02:20 UTC ("early") and
tests/data/tiny-cpu-slo-landscape.csv at 15:16 UTC ("late"). The late one is faster and accepts
more at every shared config (its acceptance differs, so it is not the same model build or
outputs): early after late is a real regression, late after early none."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from autotune import api
from autotune.engine.readers.landscape import read_landscape
from autotune.recommend.compare import Change
from autotune.search.landscape_study import study_from_landscape
from autotune.store import Store

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "tests" / "data" / "vllm-sweep" / "tiny-ngram"
EARLY = REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv"
LATE = REPO / "tests" / "data" / "tiny-cpu-slo-landscape.csv"


@pytest.fixture(scope="module")
def replays(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with both recorded sweeps replayed on a grid (every config measured)."""
    db = tmp_path_factory.mktemp("compare") / "autotune.db"
    store = Store(str(db))
    for name, path in (("early", EARLY), ("late", LATE)):
        data = study_from_landscape(path, name, sampler="grid")
        data["workloads"] = ["code"]  # the workload both sweeps measured
        api.create_study(store, data=data, source=str(path))
        api.run_study(store, name)
    return db


def _recorded_median(path: Path, method: str, n: int, level: int) -> float:
    return statistics.median(
        p.output_throughput_tok_s
        for p in read_landscape(path)
        if (p.workload, p.method, p.num_speculative_tokens, p.concurrency)
        == ("code", method, n, level)
    )


@pytest.mark.vllm  # the import reads the sweep with vLLM's own parser
def test_two_imports_of_one_sweep_show_no_change(autotune) -> None:
    for name in ("first", "second"):
        done = autotune("import", "--vllm-sweep", str(SWEEP), "--workload", "code", "--name", name)
        assert done.exit_code == 0, done.stderr
    out = autotune("compare", "first", "second", "--json")
    assert out.exit_code == 0, out.stderr
    data = json.loads(out.stdout)
    assert [(c["workload"], c["concurrency"]) for c in data["cells"]] == [("code", 1), ("code", 4)]
    for cell in data["cells"]:
        assert cell["a"] == cell["b"] and not cell["answer_changed"]
        assert cell["changes"] and all(ch["change_pct"] == 0 for ch in cell["changes"])
        assert not any(ch["beyond_noise"] for ch in cell["changes"])
    assert data["regression"] is False


@pytest.mark.vllm  # the import reads the sweep with vLLM's own parser
def test_study_b_from_another_store(autotune, replays: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    done = autotune("--db", str(other), "import", "--vllm-sweep", str(SWEEP), "--workload",
                    "code", "--name", "late", db=False)  # fmt: skip
    assert done.exit_code == 0, done.stderr
    # same study name, other store: B is the other store's (an n-gram sweep, not a replay)
    out = autotune("--db", str(replays), "compare", "late", "late", "--b-db", str(other),
                   "--json", db=False)  # fmt: skip
    assert out.exit_code in (0, 1), out.stderr
    data = json.loads(out.stdout)
    assert [c["concurrency"] for c in data["cells"]] == [1]  # the levels both measured
    assert {c["concurrency"] for c in data["only_in_b"]} == {4}
    missing = autotune("--db", str(replays), "compare", "late", "early", "--b-db", str(other),
                       db=False)  # fmt: skip
    assert missing.exit_code == 2 and f"no study named 'early' in sqlite:///{other}" in (
        missing.stderr
    )


def test_the_slower_sweep_after_the_faster_one_is_a_regression(autotune, replays: Path) -> None:
    out = autotune("--db", str(replays), "compare", "late", "early", "--json", db=False)
    assert out.exit_code == 1, out.stderr
    data = json.loads(out.stdout)
    c8 = next(c for c in data["cells"] if c["concurrency"] == 8)
    assert c8["a"]["answer"] == "ngram N=3" and c8["answer_changed"]
    tput = next(ch for ch in c8["changes"] if ch["metric"] == "output_throughput_tok_s")
    # The medians are the recordings' own (the grid replays every recorded repeat).
    assert tput["a"] == pytest.approx(_recorded_median(LATE, "ngram", 3, 8), rel=1e-6)
    assert tput["b"] == pytest.approx(_recorded_median(EARLY, "ngram", 3, 8), rel=1e-6)
    assert tput["regression"] and tput["change_pct"] < -50
    lines = [x for x in out.stderr.splitlines() if x.startswith("regression: ")]
    assert any("code at concurrency 8: ngram N=3 output_throughput_tok_s" in x for x in lines)
    assert out.stderr.rstrip().splitlines()[-1].startswith("autotune: error: ")


def test_the_other_direction_is_no_regression(autotune, replays: Path) -> None:
    """early -> late: everything A answered got faster and every drafter accepted more."""
    out = autotune("--db", str(replays), "compare", "early", "late", db=False)
    assert out.exit_code == 0, out.stderr
    assert "regression:" not in out.stderr
    assert "A = early, B = late" in out.stdout


def test_the_tolerance_decides(autotune, replays: Path) -> None:
    """The largest fall from late to early is ngram N=3's throughput at 8 in flight, -53.7%."""
    args = ("--db", str(replays), "compare", "late", "early", "--json")
    assert autotune(*args, "--tolerance", "60", db=False).exit_code == 0
    assert autotune(*args, "--tolerance", "50", db=False).exit_code == 1


def test_an_unknown_study_is_one_line_and_exit_2(autotune, replays: Path) -> None:
    out = autotune("--db", str(replays), "compare", "early", "nope", db=False)
    assert out.exit_code == 2
    assert out.stderr.strip().splitlines() == [
        f"autotune: error: no study named 'nope' in sqlite:///{replays}"
    ]
    assert out.stdout == ""


def test_one_repeat_a_side_is_undecided_never_a_regression() -> None:
    change = Change("output_throughput_tok_s", "ngram N=1", 100.0, 50.0, float("inf"), 5.0)
    assert change.undecided and not change.beyond_noise and not change.regression
    exact = Change("mean_acceptance_length", "ngram N=1", 2.0, 1.9, 0.0, 5.0)
    assert exact.beyond_noise and exact.regression  # counters at T=0: no noise to hide in
    assert not Change("mean_acceptance_length", "x", 2.0, 1.95, 0.0, 5.0).regression


def test_a_change_inside_the_tie_band_is_no_change_as_recommend_says() -> None:
    # The one rule (autotune.evidence.decide.verdict): within 1 % is a tie, even for an exact
    # counter ratio; past it, the same interval decides.
    inside = Change("mean_acceptance_length", "x", 2.0, 1.99, 0.0, 0.0)
    assert not inside.beyond_noise and not inside.regression
    past = Change("mean_acceptance_length", "x", 2.0, 1.97, 0.0, 0.0)
    assert past.beyond_noise and past.regression
