"""``autotune.report.html``'s front table says what ``recommend`` says at each level.

A replay of the recorded CPU sweep ``bench/landscapes/cpu-tiny-llama.csv``: per (workload,
concurrency) the HTML answer row carries ``recommend --format args`` as its serve line, and
marks a tie and low confidence exactly where ``recommend`` notes them (one Answer,
``autotune.recommend.answer_value``).
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

LANDSCAPE = "bench/landscapes/cpu-tiny-llama.csv"


def _rows(page: str) -> dict[tuple[str, int], str]:
    """Each answer row, its data attributes (the Answer's verdict and confidence) first."""
    table = page.split('<table class="answer">', 1)[1].split("</table>", 1)[0]
    out = {}
    for attrs, row in re.findall(
        r'<tr class="level" ([^>]*)>(.*?)</tr>', table.split("<tbody>", 1)[1], re.S
    ):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        out[(html.unescape(cells[0]), int(cells[1]))] = attrs + row
    return out


@pytest.mark.slow  # a whole recorded sweep, its figures and six recommend runs: `make test` runs it
def test_the_front_table_is_recommends_answer_tie_and_confidence(autotune, tmp_path: Path):
    created = autotune("study", "create", "--landscape", LANDSCAPE, "--name", "replayed")
    assert created.exit_code == 0, created.stderr
    run = autotune("study", "run", "replayed", "-q", "--replay-time-scale", "0")
    assert run.exit_code == 0, run.stderr
    page_path = tmp_path / "r.html"
    assert autotune("report", "replayed", "--html", str(page_path)).exit_code == 0
    rows = _rows(page_path.read_text(encoding="utf-8"))
    assert len(rows) == 6
    ties = lows = 0
    for (workload, level), row in rows.items():
        args = ("recommend", "--model", "tiny", "--workload", workload)
        answer = autotune(*args, "--concurrency", str(level), "--format", "args")
        assert answer.exit_code == 0, answer.stderr
        serve = html.unescape(re.search(r"<code>(.*?)</code>", row, re.S).group(1))
        assert serve == answer.stdout.strip()
        assert "--dtype" in serve  # the measured engine args, not only the config
        tie = f"tie at concurrency {level}:" in answer.stderr
        low = f"low confidence at concurrency {level}:" in answer.stderr
        assert ('data-verdict="tie"' in row) == tie, (workload, level, answer.stderr)
        assert ('data-confidence="low"' in row) == low, (workload, level, answer.stderr)
        ties, lows = ties + tie, lows + low
    # The recorded sweep has both (else the comparison above shows nothing).
    assert ties >= 1 and lows >= 1, (ties, lows)
