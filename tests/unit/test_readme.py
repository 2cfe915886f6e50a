"""The README's five-minute start runs as written: a replay study, its recommendation, its report.

The commands are read from the code block after ``<!-- five-minute-start -->`` in README.md and
run through the CLI in-process (the ``autotune`` fixture: the checkout as working directory, a
fresh store); the answer printed must be the one the README shows after
``<!-- five-minute-start output -->``.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def _block_after(marker: str) -> list[str]:
    match = re.search(re.escape(marker) + r"\n```[a-z]*\n(.*?)\n```", README, re.S)
    assert match, f"README.md has no code block after {marker!r}"
    return match.group(1).splitlines()


def test_the_five_minute_start_is_in_the_contents_and_replay_only():
    commands = _block_after("<!-- five-minute-start -->")
    assert commands and all(c.startswith("autotune ") for c in commands)
    assert "--landscape bench/landscapes/" in commands[0]
    assert "(#a-five-minute-start-without-a-gpu)" in README


def test_the_five_minute_start_runs_and_answers_as_the_readme_shows(autotune):
    shown = _block_after("<!-- five-minute-start output -->")
    config = json.loads(shown[0])
    recommended = next(line for line in shown if line.startswith("recommended "))
    table = [line for line in shown if re.match(r"^ +\d+  ", line)]
    assert table, "the README's output shows no per-level rows"

    outputs = []
    for command in _block_after("<!-- five-minute-start -->"):
        result = autotune(*shlex.split(command)[1:])
        assert result.exit_code == 0, f"{command}: exit {result.exit_code}\n{result.stderr}"
        outputs.append((command, result))

    _, run = next((c, r) for c, r in outputs if " study run " in f" {c} ")
    for line in _block_after("<!-- five-minute-start run -->"):
        if line != "...":
            assert line in run.stdout + run.stderr, f"README line not printed: {line!r}"
    _, rec = next((c, r) for c, r in outputs if " recommend " in f" {c} ")
    assert json.loads(rec.stdout.splitlines()[0]) == config
    assert recommended in rec.stderr
    for row in table:
        assert row in rec.stderr, f"README row not printed: {row!r}"
    for line in shown[1:]:
        if line.startswith("note: ") and "..." not in line:
            assert line in rec.stderr, f"README note not printed: {line!r}"
    _, report = next((c, r) for c, r in outputs if " report " in f" {c} ")
    assert "ngram N=3" in report.stdout and "★" in report.stdout
