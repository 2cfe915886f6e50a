"""The guard against outputs that fake acceptance (autotune.engine.degeneracy): loop detection,
distinct 4-grams, loops that ran to max_tokens, and the limit that flags a measurement."""

from __future__ import annotations

import random

import pytest

from autotune.engine._base import Measurement
from autotune.engine.degeneracy import (
    LOOP_SHARE_LIMIT,
    degeneracy,
    distinct_ngram_ratio,
    flag_line,
    loop_period,
)


def varied(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(5000) for _ in range(n)]


def test_loop_period_finds_the_repeating_tail() -> None:
    assert loop_period([7] * 20) == 1
    assert loop_period(varied(40) + [1, 2] * 10) == 2
    line = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
    assert loop_period(varied(30) + line * 3) == 10
    assert loop_period(varied(64)) is None
    # too short to call a loop: a 3x repeat of 2 tokens covers under 16 tokens
    assert loop_period(varied(10) + [1, 2] * 3) is None
    # a loop that was left before the end is not a tail loop
    assert loop_period([1, 2] * 20 + varied(20)) is None


def test_distinct_ngram_ratio() -> None:
    assert distinct_ngram_ratio(varied(100)) == 1.0
    assert distinct_ngram_ratio([1, 2] * 50) == 2 / 97
    assert distinct_ngram_ratio([1, 2, 3]) is None


def test_run_degeneracy_and_the_flag() -> None:
    loops = [([5, 6] * 32, 64), ([9] * 64, 64), ([1, 2, 3] * 10, 64)]  # the last stopped early
    fine = [(varied(64, seed), 64) for seed in range(3)]
    guard = degeneracy([*loops, *fine, ((), 64)])  # a request that produced nothing
    assert guard.loop_share == 0.5
    assert guard.loop_at_max_tokens_share == 2 / 6
    assert guard.distinct_4gram_ratio is not None and 0.5 < guard.distinct_4gram_ratio < 0.6
    assert not guard.degenerate  # the limit is "more than half"
    assert degeneracy([*loops, *fine[:1]]).degenerate
    assert degeneracy([]).loop_share is None and not degeneracy([]).degenerate
    assert LOOP_SHARE_LIMIT == 0.5
    line = flag_line(0.75, 0.1, "support-chat c=4")
    assert "75% of replies end in a repeating loop" in line and "limit 50%" in line


def test_measurement_degenerate_flag() -> None:
    base = {
        "workload": "w",
        "workload_digest": "d",
        "concurrency": 1,
        "repeat": 0,
        "seed": 0,
        "num_requests": 4,
        "num_prompt_tokens": 4,
        "num_output_tokens": 4,
        "measure_s": 1.0,
        "output_throughput_tok_s": 4.0,
        "request_throughput_req_s": 4.0,
    }
    assert not Measurement(**base).degenerate  # not checked (older rows, replays)
    assert Measurement(**base, loop_share=0.75).degenerate
    assert not Measurement(**base, loop_share=0.5).degenerate


# --- the flag in recommend, report and study run -----------------------------------------------


def _load_looping(store, tmp_path, loops: dict[int, float]) -> None:
    """The NGRAM1_CLEAR study of test_low_confidence, each measurement with the level's loop share."""
    from collections import defaultdict

    from autotune import api
    from autotune.engine import EngineConfig, EngineInfo
    from autotune.testing.landscapes import NGRAM1_CLEAR, write_rows
    from autotune.testing.studies import replay_study

    land = write_rows(tmp_path / "loops.csv", NGRAM1_CLEAR)
    record = api.create_study(store, data=replay_study(land, name="loops")).study
    by_config = defaultdict(list)
    for method, n, c, tputs, _ in NGRAM1_CLEAR:
        by_config[(method, n)].append((c, tputs))
    info = EngineInfo(10.0, "replay:" + land.name, "hand-written", "replay", "replay")
    for (method, n), cells in by_config.items():
        config = EngineConfig(model=record.model, method=method, num_speculative_tokens=n)
        trial_id = store.start_trial(record, config, None)
        store.record_engine(trial_id, info)
        for c, tputs in cells:
            for repeat, tput in enumerate(tputs):
                m = Measurement(
                    workload="code",
                    workload_digest="hand-written",
                    concurrency=c,
                    repeat=repeat,
                    seed=0,
                    num_requests=8,
                    num_prompt_tokens=800,
                    num_output_tokens=round(tput * 2),
                    measure_s=2.0,
                    output_throughput_tok_s=float(tput),
                    request_throughput_req_s=4.0,
                    max_inflight=c,
                    loop_share=loops[c],
                    distinct_4gram_ratio=0.2,
                    loop_at_max_tokens_share=loops[c],
                )
                store.add_measurement(trial_id, m, info, config)
        store.finish_trial(trial_id, state="complete", engine_seconds=10.0)
    store.set_study_status("loops", "done")


def test_a_degenerate_level_is_flagged_by_recommend_and_report(tmp_path, db_path, autotune):
    import json

    from autotune import api
    from autotune.store import Store

    store = Store(str(db_path))
    _load_looping(store, tmp_path, {1: 0.875, 4: 0.25})
    rec = api.recommend(store, "org/tiny", "code")
    assert [c.concurrency for c in rec.degenerate] == [1]
    at1 = api.recommend(store, "org/tiny", "code", 1)
    assert at1.choice.degenerate and at1.choice.best.degenerate
    assert at1.choice.loop_share == 0.875
    assert not api.recommend(store, "org/tiny", "code", 4).choice.degenerate

    out = autotune("recommend", "--model", "org/tiny", "--workload", "code", "--json")
    assert out.exit_code == 0
    assert "note: degenerate outputs at code concurrency 1: 88% of replies" in out.stderr
    doc = json.loads(out.stdout)
    assert doc["degenerate"] is True
    levels = {d["concurrency"]: d for d in doc["output_degeneracy"]}
    assert levels[1]["degenerate"] and not levels[4]["degenerate"]
    assert levels[4]["loop_share"] == 0.25
    assert levels[1]["distinct_4gram_ratio"] == pytest.approx(0.2)
    at4 = autotune(
        "recommend", "--model", "org/tiny", "--workload", "code", "--concurrency", "4", "--json"
    )
    assert "degenerate" not in at4.stderr and json.loads(at4.stdout)["degenerate"] is False

    rep = autotune("report", "loops", "--json")
    assert rep.exit_code == 0
    assert "note: degenerate outputs at code c=1" in rep.stderr
    cells = json.loads(rep.stdout)["degenerate_cells"]
    assert [(c["concurrency"], c["loop_share"]) for c in cells] == [(1, 0.875)]
    flagged = {(r["concurrency"], r["degenerate"]) for r in json.loads(rep.stdout)["summary"]}
    assert flagged == {(1, True), (4, False)}
    assert api.degenerate_lines(store, "loops") == [
        line.removeprefix("note: ") for line in rep.stderr.splitlines() if "degenerate" in line
    ]
