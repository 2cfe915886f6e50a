"""`autotune import --sglang-bench` (autotune.engine.readers.sglang_bench): SGLang's
bench_speculative.py JSONL into a study that recommend, report and --format dsd answer from; bad
lines are one line
naming the file and field, exit 2, nothing written.

The fixture is built by hand from the keys the script writes (tests/data/README.md says so):
SGLang does not run here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.engine.readers.sglang_bench import read_sglang_bench
from autotune.errors import SpecError

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "data" / "sglang-bench" / "tiny-eagle3.jsonl"
IMPORT = ("import", "--sglang-bench", str(FIXTURE), "--model", "tiny", "--method", "eagle3")


def test_the_records_map_to_configs_levels_and_measurements():
    sweep = read_sglang_bench(FIXTURE, model="tiny:llama", method="eagle3", draft="tiny:eagle3")
    assert len(sweep.runs) == 8
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    for line, run in zip(lines, sweep.runs, strict=True):
        m = run.measurement
        assert m.concurrency == line["batch_size"]
        assert run.config.num_speculative_tokens == line["steps"]
        assert m.output_throughput_tok_s == pytest.approx(line["speed"] * line["batch_size"])
        if line["steps"] == 0:
            assert run.config.is_baseline and m.mean_acceptance_length is None
        else:
            assert run.config.speculative_config() == {
                "method": "eagle3",
                "model": "tiny:eagle3",
                "num_speculative_tokens": line["steps"],
            }
            assert m.mean_acceptance_length == pytest.approx(line["acc_length"], abs=1e-6)


def test_recommend_report_and_dsd_answer_from_the_import(autotune, db_path: Path):
    done = autotune(*IMPORT, "--draft", "tiny:eagle3", "--name", "sg")
    assert done.exit_code == 0, done.stderr
    assert "imported 8 runs of 4 engine configs" in done.stderr
    ask = ("recommend", "--model", "tiny", "--workload", "bench_speculative", "--study", "sg")
    # speed × batch size: N=2 is best at batch 1 (195.2 tok/s), the baseline at batch 4 (400)
    answer = autotune(*ask, "--concurrency", "1")
    assert json.loads(answer.stdout) == {
        "method": "eagle3",
        "model": "tiny:eagle3",
        "num_speculative_tokens": 2,
    }
    assert json.loads(autotune(*ask, "--concurrency", "4").stdout) is None
    dsd = json.loads(autotune(*ask, "--format", "dsd").stdout)
    assert dsd["num_speculative_tokens_per_batch_size"] == [[1, 1, 2], [2, 4, 0]]
    report = autotune("report", "sg")
    assert report.exit_code == 0, report.stderr
    assert "sglang bench_speculative.py output" in report.stdout  # the numbers say where from
    assert str(FIXTURE) in report.stdout
    again = autotune("study", "run", "sg")
    assert again.exit_code == 2 and "imported from sglang bench_speculative.py" in again.stderr
    dry = autotune("study", "run", "sg", "--dry-run")
    assert dry.exit_code == 1 and "nothing to run" in dry.stdout + dry.stderr


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("not json", "line 2"),
        ('{"batch_size": 1, "steps": 1, "topk": 1}', "line 2.num_draft_tokens"),
        (
            '{"batch_size": 4, "steps": 2, "topk": 4, "num_draft_tokens": 8, "acc_length": 2.5, '
            '"step_time": 0.02, "speed": 125.0, "completion_tokens": 512}',
            "line 2.topk",
        ),
        ("[1, 2]", "line 2"),
    ],
)
def test_a_bad_line_is_one_line_naming_file_and_field(autotune, db_path, tmp_path, line, field):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(FIXTURE.read_text().splitlines()[0] + "\n" + line + "\n")
    result = autotune("import", "--sglang-bench", str(bad), "--model", "tiny", "--method", "eagle3")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"autotune: error: {bad}: {field}: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not db_path.exists()


def test_what_the_file_does_not_record_must_be_given():
    with pytest.raises(SpecError, match="model_path: not recorded: give --model"):
        read_sglang_bench(FIXTURE, model=None, method="eagle3")
    with pytest.raises(SpecError, match="method 'eagle' is not one autotune maps"):
        read_sglang_bench(FIXTURE, model="tiny", method="eagle")
