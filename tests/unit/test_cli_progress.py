"""``autotune.cli.progress``: the terminal progress bar keeps its count and ETA at any width."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from autotune.cli.progress import RichReporter

LONG_BEST = "ngram[prompt_lookup_max=5,prompt_lookup_min=3] N=3 (1,692.5 tok/s)"


@pytest.mark.parametrize("width", [60, 80, 100, 120, 240])
def test_a_long_status_is_cut_not_the_count_or_the_eta(width: int) -> None:
    buf = io.StringIO()
    reporter = RichReporter(Console(file=buf, width=width, force_terminal=True, color_system=None))
    reporter.begin(13, 4)
    reporter.best = LONG_BEST
    reporter.current = ["draft_model (tiny:draft) N=4"]
    reporter.measurements = 7
    reporter.progress.update(reporter.task, status=reporter._status())
    reporter.progress.refresh()
    reporter.progress.stop()
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", buf.getvalue())
    last = [line for line in text.splitlines() if line.strip()][-1]
    assert "engine configs" in last and "4/13" in last and "ETA" in last, last
    assert len(last.rstrip()) <= width
    if width < 240:
        assert last.rstrip().endswith("…")  # the status is what was cut
    else:
        assert LONG_BEST in last
