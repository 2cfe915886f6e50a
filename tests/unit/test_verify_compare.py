"""The verification's arithmetic, parsing and table, without a server."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.verify.compare import (
    LevelCheck,
    Verification,
    dsd_answer,
    off_verdict,
    parse_bench_result,
    render,
    summary_line,
    table_n_at,
)
from autotune.verify.server import bench_argv, requests_file, server_argv

REPO = Path(__file__).resolve().parents[2]

# The non-list fields of a real `vllm bench serve` result (vLLM 0.32.0 CPU build, tiny Llama
# with n-gram N=2 behind `vllm serve`, 4 requests at --max-concurrency 2).
REAL_RESULT = {
    "completed": 4,
    "failed": 0,
    "duration": 0.22267743299994436,
    "total_output_tokens": 128,
    "output_throughput": 574.8225057005753,
    "spec_decode_acceptance_rate": 30.76923076923077,
    "spec_decode_acceptance_length": 1.5714285714285714,
    "spec_decode_num_drafts": 28,
    "spec_decode_draft_tokens": 52,
    "spec_decode_accepted_tokens": 16,
    "spec_decode_per_position_acceptance_rates": [0.42857142857142855, 0.14285714285714285],
}


def test_parse_real_bench_result() -> None:
    run = parse_bench_result(REAL_RESULT, 2)
    assert run.concurrency == 2 and run.completed == 4 and run.failed == 0
    assert run.output_tok_s == pytest.approx(574.82, abs=0.01)
    assert run.acceptance_length == pytest.approx(1 + 16 / 28)
    assert run.acceptance_per_pos == pytest.approx((12 / 28, 4 / 28))


def test_parse_baseline_result_has_no_acceptance() -> None:
    base = {k: v for k, v in REAL_RESULT.items() if not k.startswith("spec_decode")}
    run = parse_bench_result(base, 1)
    assert run.acceptance_length is None and run.acceptance_per_pos == ()
    with pytest.raises(ValueError, match="output_throughput"):
        parse_bench_result({"completed": 0}, 1)


def _level(c: int, study: tuple[float, float], server: tuple[float, float]) -> LevelCheck:
    return LevelCheck(
        concurrency=c,
        study_tok_s=study[0],
        study_reference_tok_s=study[1],
        study_al=2.5,
        server_tok_s=server[0],
        server_reference_tok_s=server[1],
        server_al=2.4,
    )


def _verification(levels: tuple[LevelCheck, ...], tolerance: float = 0.1) -> Verification:
    return Verification(
        study="s",
        model="tiny",
        workload="code",
        mode="fixed",
        label="ngram N=2",
        reference_label="baseline",
        speculative_config={"method": "ngram", "num_speculative_tokens": 2},
        reference_config=None,
        command="vllm serve m --speculative-config {}",
        reference_command="vllm serve m",
        tolerance=tolerance,
        levels=levels,
    )


def test_speedups_and_deviation() -> None:
    lv = _level(1, (300.0, 200.0), (260.0, 200.0))
    assert lv.study_speedup == pytest.approx(1.5)
    assert lv.server_speedup == pytest.approx(1.3)
    assert lv.deviation == pytest.approx(1.3 / 1.5 - 1)
    assert not lv.within(0.10) and lv.within(0.14)


def test_verdict_and_table() -> None:
    ok = _level(1, (300.0, 200.0), (290.0, 200.0))  # 1.50x vs 1.45x: -3.3 %
    bad = _level(4, (600.0, 500.0), (450.0, 500.0))  # 1.20x vs 0.90x: -25 %
    v = _verification((ok, bad))
    assert not v.passed and v.failures() == [bad]
    table = render(v)
    lines = table.splitlines()
    assert "server tok/s" in lines[1] and "diff %" in lines[1]
    assert lines[2].split() == [
        "1",
        "300.0",
        "290.0",
        "2.50",
        "2.40",
        "1.50",
        "1.45",
        "-3.3",
        "yes",
    ]
    assert lines[3].split()[-2:] == ["-25.0", "NO"]
    assert lines[-1].endswith("NOT within 10% of the study's at concurrency 4")
    assert _verification((ok,)).passed
    assert "passed" in summary_line(_verification((ok,))) and "FAILED" in summary_line(v)


def test_json_round_trip() -> None:
    v = _verification((_level(1, (300.0, 200.0), (290.0, 200.0)),))
    data = v.to_json()
    assert data["passed"] is True
    assert Verification.from_json(data) == v


def test_missing_study_number_is_not_judged() -> None:
    lv = LevelCheck(1, None, 200.0, None, 250.0, 200.0, None)
    assert lv.study_speedup is None and lv.deviation is None and lv.within(0.0)
    assert "-" in render(_verification((lv,))).splitlines()[2].split()


def test_server_argv_runs_the_harness_engine() -> None:
    kwargs = {
        "model": "/m",
        "speculative_config": {"method": "ngram", "num_speculative_tokens": 2},
        "tensor_parallel_size": 1,
        "seed": 0,
        "enable_prefix_caching": False,
        "disable_log_stats": False,
        "enforce_eager": True,
        "kv_cache_memory_bytes": 1 << 30,
    }
    argv = server_argv(kwargs, 8123)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(argv)
    assert "--host 127.0.0.1 --port 8123" in joined
    assert "--no-enable-prefix-caching" in argv and "--enforce-eager" in argv
    assert "--kv-cache-memory-bytes 1073741824" in joined
    assert "disable-log-stats" not in joined  # a store_true flag; stats are on by default
    assert argv[-2:] == ["--speculative-config", '{"method":"ngram","num_speculative_tokens":2}']


def test_requests_follow_the_harness_order(tmp_path) -> None:
    import json

    from autotune.engine._base import PreparedWorkload, Prompt

    w = PreparedWorkload("code", "d", (Prompt("a", 8), Prompt("b", 16)), chat_template=False)
    path = requests_file(w, 5, tmp_path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["prompt"] for r in rows] == ["a", "b", "a", "b", "a"]
    assert [r["output_tokens"] for r in rows] == [8, 16, 8, 16, 8]

    class _S:
        base_url = "http://127.0.0.1:1"
        model = "/m"

    argv = bench_argv(
        _S(),  # type: ignore[arg-type]
        path,
        concurrency=2,
        num_requests=5,
        temperature=0.0,
        seed=3,
        warmups=1,
        chat_template=False,
    )
    flags = dict(zip(argv[::2], argv[1::2], strict=False))
    assert flags["--max-concurrency"] == "2" and flags["--num-prompts"] == "5"
    assert flags["--custom-output-len"] == "-1" and flags["--dataset-name"] == "custom"
    assert "--ignore-eos" in argv and "--skip-chat-template" in argv


# --- bad input: one line, exit 2, no server started, nothing written --------------------------


@pytest.fixture
def replayed(db_path):
    from autotune import api
    from autotune.search.landscape_study import study_from_landscape
    from autotune.store import Store

    landscape = REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv"
    store = Store(str(db_path))
    data = study_from_landscape(landscape, "grid", sampler="grid")
    api.create_study(store, data=data, source=str(landscape))
    api.run_study(store, "grid", max_configs=3)
    return store


def test_verify_refuses_a_replayed_study(replayed, autotune, db_path) -> None:
    from autotune.testing.studies import store_digest

    before = store_digest(db_path)
    result = autotune("verify", "--model", "tiny", "--workload", "code")
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0
    assert "replays a recorded landscape" in result.stderr and "Traceback" not in result.stderr
    assert store_digest(db_path) == before


def test_verify_bad_tolerance_and_missing_study(autotune) -> None:
    result = autotune("verify", "--model", "tiny", "--workload", "code", "--tolerance", "0")
    assert result.exit_code == 2 and "--tolerance" in result.stderr
    result = autotune("verify", "--model", "tiny", "--workload", "code")
    assert result.exit_code == 1 and "nothing measured" in result.stderr


def test_report_and_check_show_a_stored_verification(replayed, autotune, tmp_path) -> None:
    from autotune.verify.run import save

    study = replayed.get_study("grid")
    save(replayed, study, _verification((_level(1, (300.0, 200.0), (290.0, 200.0)),)))
    result = autotune("report", "grid")
    assert result.exit_code == 0 and "verified through vllm serve" in result.stdout
    deployed = tmp_path / "deployed.json"
    deployed.write_text("null\n")
    result = autotune("check", "--model", "tiny", "--workload", "code", "--config", str(deployed))
    assert "verified through vllm serve" in result.stderr and "passed" in result.stderr


def test_verifications_go_with_their_study(replayed) -> None:
    import autotune.verify as verifying
    from autotune import api
    from autotune.verify.run import save

    study = replayed.get_study("grid")
    older = _verification((_level(1, (300.0, 200.0), (200.0, 200.0)),))
    newer = _verification((_level(1, (300.0, 200.0), (295.0, 200.0)),))
    save(replayed, study, older)
    save(replayed, study, newer)
    (only,) = verifying.verifications(replayed, study)  # the newest per (workload, mode)
    assert only[1] == newer
    assert verifying.verifications(replayed, study, "chat") == []
    (line,) = verifying.verification_lines(replayed, "grid")
    assert "ngram N=2 vs off (no speculation) (code), passed" in line and "-1.7%" in line
    api.delete_study(replayed, "grid")
    assert replayed.list_studies() == []
    from sqlalchemy import text

    with replayed.session() as s:
        assert s.execute(text("SELECT count(*) FROM autotune_verifications")).scalar() == 0


def test_table_n_follows_vllms_batch_size_lookup() -> None:
    table = [[1, 2, 3], [3, 8, 0]]
    assert [table_n_at(table, c) for c in (1, 2, 3, 8, 9)] == [3, 3, 0, 0, 0]
    # vLLM carries a row's N through a gap and past the last row, capped at the config's N
    gaps = [[1, 16, 3], [32, 128, 2]]
    assert [table_n_at(gaps, c) for c in (1, 16, 17, 31, 32, 500)] == [3, 3, 3, 3, 2, 2]
    assert [table_n_at(gaps, c, cap=2) for c in (1, 17, 500)] == [2, 2, 2]


@pytest.mark.vllm
def test_table_n_is_vllms_dense_lookup() -> None:
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    for table, cap in (([[1, 2, 3], [3, 8, 0]], 3), ([[1, 16, 3], [32, 128, 2]], 2),
                       ([[1, 1, 4], [2, 3, 1], [6, 6, 0], [9, 9, 2]], 4)):  # fmt: skip
        dense = build_dynamic_sd_schedule_lookup(table, 40, cap)
        assert [table_n_at(table, c, cap) for c in range(1, 41)] == dense[1:]


def test_off_verdict_is_the_shared_rule() -> None:
    # one run each: no interval, so beyond the 1 % tie it is undecided, never decided
    assert off_verdict([95.0], [100.0]) == (pytest.approx(-5.0), "undecided")
    assert off_verdict([99.5], [100.0])[1] == "tie"
    # repeated runs whose spread is small against the gap decide; a 2x gap always decides
    assert off_verdict([90.0, 90.5, 89.5], [100.0, 100.4, 99.6])[1] == "decided"
    assert off_verdict([40.0], [100.0])[1] == "decided"


def _dsd_level(c: int, n: int, table: list[float], off: list[float]) -> LevelCheck:
    margin, verdict = off_verdict(table, off)
    return replace(
        _level(c, (300.0, 200.0), (table[0], 200.0)),
        table_n=n,
        server_off_tok_s=off[0],
        server_runs=len(table),
        off_margin_pct=margin,
        off_verdict=verdict,
    )


def test_dsd_answer_routes_by_load_only_when_a_zero_band_decidedly_loses() -> None:
    table = [[1, 1, 2], [2, 4, 0]]
    drafting = _dsd_level(1, 2, [150.0, 151.0], [100.0, 101.0])
    tied = _dsd_level(4, 0, [99.7, 100.2], [100.0, 100.1])
    ahead = _dsd_level(4, 0, [104.0, 112.0], [100.0, 101.0])  # ahead, undecided: no loss
    loses = _dsd_level(4, 0, [90.0, 90.4], [100.0, 100.3])  # -10 %, decided
    noisy = _dsd_level(4, 0, [80.0, 100.0], [100.0, 101.0])  # -10 %, wide interval: undecided
    assert dsd_answer(table, [drafting, tied])["recommended"] == "table"
    assert dsd_answer(table, [drafting, ahead])["recommended"] == "table"
    # trailing off past the tie band on too few runs: neither the table nor a route, rerun
    unsure = dsd_answer(table, [drafting, noisy])
    assert unsure["recommended"] == "undecided" and unsure["crossing"] == 2
    assert "rerun with more --repeats" in unsure["reason"] and "2 runs a side" in unsure["reason"]
    routed = dsd_answer(table, [drafting, loses])
    assert routed["recommended"] == "route" and routed["crossing"] == 2
    assert "below concurrency 2" in routed["reason"] and "plain one" in routed["reason"]
    assert dsd_answer([[1, 4, 2]], [drafting])["crossing"] is None
    v = replace(
        _verification((drafting, loses)), mode="dsd", off_command="vllm serve m",
        dsd_answer=routed,
    )  # fmt: skip
    text = render(v)
    assert "vs off" in text.splitlines()[1] and "decided" in text.splitlines()[3]
    assert "route by load" in text and "route by load" in summary_line(v)
    assert Verification.from_json(json.loads(json.dumps(v.to_json()))) == v


@pytest.mark.vllm
def test_given_table_is_read_by_vllms_parser_and_refused_in_one_line() -> None:
    from types import SimpleNamespace

    from autotune.errors import SpecError
    from autotune.verify.run import given_table

    rec = SimpleNamespace(study=SimpleNamespace(name="deploy"))
    ngram = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4}
    trials = [SimpleNamespace(state="complete", method="ngram", speculative_config=ngram)]
    table = {**ngram, "num_speculative_tokens_per_batch_size": [[2, 8, 0], [1, 1, 2]]}
    got = given_table(json.dumps(table), rec, trials)
    assert got["num_speculative_tokens_per_batch_size"] == [[1, 1, 2], [2, 8, 0]]  # sorted
    del table["num_speculative_tokens"]
    assert given_table(json.dumps(table), rec, trials)["num_speculative_tokens"] == 2
    for bad, words in (
        ({**ngram}, "num_speculative_tokens_per_batch_size"),
        ({**ngram, "num_speculative_tokens_per_batch_size": [[2, 8, 1]]}, "must start at 1"),
        ({**ngram, "num_speculative_tokens_per_batch_size": [[1, 4, 2], [3, 8, 0]]},
         "non-overlapping"),
        ({**ngram, "num_speculative_tokens_per_batch_size": [[1, 8, 0]]}, "drafts at no batch"),
        ({"method": "mtp", "num_speculative_tokens": 1,
          "num_speculative_tokens_per_batch_size": [[1, 8, 1]]}, "measured no mtp config"),
    ):  # fmt: skip
        with pytest.raises(SpecError, match=words) as exc:
            given_table(json.dumps(bad), rec, trials)
        assert exc.value.source == "--table" and "\n" not in str(exc.value)
