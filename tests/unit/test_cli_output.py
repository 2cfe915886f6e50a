"""Output a person and a pipeline can both use: stdout results, stderr notes, whole numbers.

Runs the CLI in-process on a replay of a real recorded sweep (bench/landscapes/cpu-tiny-llama.csv).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from autotune.tables import Column, TextTable, plain, to_rich, tsv

REPO = Path(__file__).resolve().parents[2]
LANDSCAPE = REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv"


@pytest.fixture
def study(autotune, tmp_path: Path):
    spec = (REPO / "bench" / "record" / "tiny-cpu-grid.yaml").read_text()
    spec = spec.replace("name: tiny-cpu-grid", "name: tiny-replay").replace(
        "sampler: grid", "sampler: model"
    )
    spec += f"engine:\n  kind: replay\n  landscape: {LANDSCAPE}\n"
    path = tmp_path / "replay.yaml"
    path.write_text(spec)
    created = autotune("study", "create", str(path))
    assert created.exit_code == 0, created.stderr
    return autotune


def _cells(table: TextTable) -> list[str]:
    """Every number and id cell of a table."""
    return [
        row[i] for row in table.rows for i, col in enumerate(table.columns) if col.whole and row[i]
    ]


def _render_80(table: TextTable) -> str:
    from autotune.tables import fits

    if not fits(table, 80):
        return plain(table)  # what emit_table prints when rich would have to cut
    con = Console(width=80, record=True, force_terminal=True, color_system=None)
    con.print(to_rich(table))
    return con.export_text()


def _tables(study) -> list[TextTable]:
    """Every table the CLI prints, captured from emit_table while the commands run."""
    import autotune.cli._common as common

    seen: list[TextTable] = []
    real = common.emit_table

    def spy(table: TextTable, *args, **kwargs) -> None:
        seen.append(table)
        real(table, *args, **kwargs)

    import importlib

    mp = pytest.MonkeyPatch()
    for mod in ("study", "report", "models", "workload", "bench"):
        # the module, not the click command of the same name that autotune.cli exports
        mp.setattr(importlib.import_module(f"autotune.cli.{mod}"), "emit_table", spy)
    try:
        assert study("study", "run", "tiny-replay").exit_code == 0
        for args in (
            ("study", "list"),
            ("study", "show", "tiny-replay"),
            ("report", "tiny-replay"),
            ("models",),
            ("workload", "list"),
        ):
            result = study(*args)
            assert result.exit_code == 0, (args, result.stderr)
    finally:
        mp.undo()
    return seen


def test_every_table_keeps_every_id_and_number_whole_at_80_columns(study):
    tables = _tables(study)
    assert len(tables) >= 6
    ids = {c for t in tables for c in _cells(t)}
    assert {"moonshotai/Kimi-K2.5", "lightseekorg/kimi-k2.5-eagle3", "ngram N=4"} <= ids
    for table in tables:
        out = _render_80(table)
        for cell in _cells(table):
            assert cell in out, f"{cell!r} cut in {table.columns[0].name!r} table"


def test_plain_and_tsv_forms():
    t = TextTable([Column("name", "id"), Column("tok/s", "number"), Column("note")], group=1)
    t.add_row("a-very-long-model-id/with-a-path", "1,918.5", "x")
    t.add_row("a-very-long-model-id/with-a-path", "12.0", "y")
    lines = plain(t).splitlines()
    assert lines[1].startswith("a-very-long-model-id/with-a-path  1,918.5")
    assert lines[2].startswith(" " * 32)  # the repeated group cell is blanked for people
    assert tsv(t).splitlines()[2] == "a-very-long-model-id/with-a-path\t12.0\ty"  # not for tools


def test_study_run_reports_on_stderr_one_line_per_config(study):
    result = study("study", "run", "tiny-replay")
    assert result.exit_code == 0
    out = result.stdout.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("13 engine configs measured")
    done = [line for line in result.stderr.splitlines() if re.match(r"\[\d+/\d+\] done", line)]
    assert len(done) == 13  # dflash is predicted from its own N only (not a prefix)
    assert "next: autotune --db" in result.stderr and "recommend --model tiny" in result.stderr
    quiet = study("study", "resume", "tiny-replay", "--quiet")
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_json_and_tsv_stdout_parse(study):
    assert study("study", "run", "tiny-replay", "-q").exit_code == 0
    result = study("report", "tiny-replay", "--json")
    assert json.loads(result.stdout)["study"] == "tiny-replay"
    tsv_out = study("report", "tiny-replay", "--format", "tsv").stdout.splitlines()
    assert tsv_out[0].split("\t")[:3] == ["workload", "conc", "config"]
    assert all(len(line.split("\t")) == 9 for line in tsv_out)


def test_check_takes_inline_json_yaml_and_names_the_difference(study, tmp_path: Path):
    assert study("study", "run", "tiny-replay", "-q").exit_code == 0
    rec = study("recommend", "--model", "tiny", "--workload", "code", "--format", "yaml")
    (tmp_path / "c.yaml").write_text(rec.stdout)
    ok = study(
        "check", "--model", "tiny", "--workload", "code", "--config", str(tmp_path / "c.yaml")
    )
    assert ok.exit_code == 0, ok.stderr
    config = json.loads(study("recommend", "--model", "tiny", "--workload", "code").stdout)
    inline = study("check", "--model", "tiny", "--workload", "code", "--config", json.dumps(config))
    assert inline.exit_code == 0, inline.stderr
    bare = {"method": "ngram", "num_speculative_tokens": config["num_speculative_tokens"]}
    missing = study("check", "--model", "tiny", "--workload", "code", "--config", json.dumps(bare))
    assert missing.exit_code == 1
    assert "prompt_lookup_min 5 (measured: 2)" in missing.stderr  # vLLM's default, named


def test_delete_without_a_terminal_needs_yes(study):
    result = study("study", "delete", "tiny-replay")
    assert result.exit_code == 2 and "--yes" in result.stderr
    assert "tiny-replay" in study("study", "list").stdout


def test_missing_study_names_the_store(study, db_path: Path):
    result = study("report", "nope")
    assert result.exit_code == 2 and str(db_path) in result.stderr


def test_spec_errors_in_one_line_with_did_you_mean_and_the_count(
    autotune, tmp_path: Path, db_path: Path
):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\nmodel: {name: tiny}\nworkloads: [code]\nconcurency: [1, 4]\n"
        "sampler: modle\nmethods:\n  - method: ngram\n    num_speculative_token: {min: 1, max: 3}\n"
    )
    result = autotune("study", "create", str(bad))
    assert result.exit_code == 2 and not db_path.exists()
    # One line (issue #33: a file that is no spec, such as /etc/shadow, must not be quoted line
    # after line): the first error with its guess, and how many more there are.
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0], lines
    assert "did you mean '" in lines[0] and "(and 2 more errors)" in lines[0], lines


def test_reporters_follow_the_plan():
    import io

    from rich.console import Console

    from autotune.cli.progress import LineReporter, RichReporter
    from autotune.engine import EngineConfig

    cfg = EngineConfig(model="tiny:llama", method="ngram", num_speculative_tokens=2)
    out = io.StringIO()
    line = LineReporter(out)
    line.begin(15, 0)
    line.planned(10)
    line.trial_finished(cfg, 321.0, None, "ngram N=2")
    assert out.getvalue().splitlines()[-1].startswith("[1/10] done   ngram N=2: 321.0 tok/s")
    con = Console(file=io.StringIO(), force_terminal=True, width=120)
    bar = RichReporter(con)
    bar.begin(15, 0)
    bar.planned(12)
    bar.trial_started(cfg)
    bar.trial_finished(cfg, 321.0, None, "ngram N=2")
    bar.end()  # the strategy stopped after one config: the bar ends full
    task = bar.progress.tasks[0]
    assert task.completed == task.total == 1


def test_db_after_the_command_and_export_asks_before_overwriting(autotune, db_path, tmp_path):
    """`--db` works after the command as before it; `export --landscape` never overwrites a
    file unasked (off a terminal: refused, exit 2, the file untouched; --force overwrites)."""
    db = ("--db", str(db_path))
    made = autotune(
        "study", "create", "--landscape", str(LANDSCAPE), "--name", "after", *db, db=False
    )
    assert made.exit_code == 0, made.stderr
    assert autotune("study", "run", "after", "--quiet", *db, db=False).exit_code == 0
    listed = autotune("study", "list", "--json", *db, db=False)
    assert listed.exit_code == 0 and [s["name"] for s in json.loads(listed.stdout)] == ["after"]
    out = tmp_path / "after.csv"
    first = autotune("export", "--landscape", "after", "-o", str(out), *db, db=False)
    assert first.exit_code == 0, first.stderr
    out.write_text("kept\n")
    again = autotune("export", "--landscape", "after", "-o", str(out), *db, db=False)
    assert again.exit_code == 2 and "--force" in again.stderr and out.read_text() == "kept\n"
    forced = autotune("export", "--landscape", "after", "-o", str(out), "--force", *db, db=False)
    assert forced.exit_code == 0 and out.read_text() != "kept\n"
