"""What `study run` tells a person while it works, always on stderr so stdout stays the result.

On a terminal a rich progress bar (engine configs done of those planned, the running config,
ETA, best so far); off a terminal (a pipe, ``make demo > log 2>&1``, CI) one flushed line per
finished engine config, because a redrawn bar in a file is one frozen frame. ``--quiet`` and
``--no-progress`` pick a quieter reporter.

Each class implements the tuner's reporter protocol (:class:`autotune.search.reporting.Reporter`):
``begin``, ``trial_started``, ``measured``, ``trial_finished``, ``end``, plus ``planned(total)``
for when the strategy's plan grows or shrinks; a tuner that never calls it still works.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import defaultdict
from typing import Any, TextIO

from autotune.engine._base import EngineConfig, Measurement
from autotune.search.reporting import SilentReporter
from autotune.spec.labels import PLAIN, Labels


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _finished_text(label: str, value: float | None, reason: str | None, unit: str = "tok/s") -> str:
    if reason is not None:
        return f"failed {label}: {reason}"
    shown = "-" if value is None else f"{value:,.1f}"
    return f"done   {label}: {shown} {unit} (geometric mean over its levels)"


class QuietReporter(SilentReporter):
    """Says nothing (``--quiet``): the command's final summary is the only output."""

    unit = "tok/s"
    """The trial value's unit; the tuner sets it from the study's objective."""
    labels: Labels = PLAIN
    """The study's config names (autotune.spec.labels); the tuner sets them from its space."""


class SharedLevels:
    """Each config's measured tok/s per level in this run, so a finished config and the best so
    far are compared on the levels both measured (a config the search measured at fewer levels
    has a geometric mean over other levels than the best's, which compares nothing)."""

    def __init__(self) -> None:
        self.runs: dict[str, dict[tuple[str, int], list[float]]] = defaultdict(
            lambda: defaultdict(list)
        )

    def add(self, label: str, m: Measurement) -> None:
        self.runs[label][(m.workload, m.concurrency)].append(m.output_throughput_tok_s)

    def best_text(self, label: str, best: str | None, unit: str) -> str | None:
        """``best so far``'s text: the tuner's (``Y (1,457 tok/s)``) when both configs were
        measured at the same levels, else both geometric means over their shared levels."""
        if not best or unit != "tok/s":
            return best
        other = best.rsplit(" (", 1)[0]
        mine, theirs = self.runs.get(label), self.runs.get(other)
        if other == label or not mine or not theirs or set(mine) == set(theirs):
            return best
        shared = sorted(set(mine) & set(theirs))
        if not shared:
            return f"{best}, measured at none of {label}'s levels"

        def geo(runs: dict[tuple[str, int], list[float]]) -> float:
            medians = [max(statistics.median(runs[level]), 1e-9) for level in shared]
            return math.exp(sum(map(math.log, medians)) / len(medians))

        where = ", ".join(f"{w} c={c}" for w, c in shared)
        return (
            f"{other}: {geo(theirs):,.1f} vs {geo(mine):,.1f} tok/s on the "
            f"{_plural(len(shared), 'level')} both measured ({where})"
        )


class LineReporter(QuietReporter):
    """One flushed line per finished engine config (and per failure), for logs and pipes."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.total = 0
        self.done = 0
        self.levels = SharedLevels()

    def measured(self, config: EngineConfig, m: Measurement) -> None:
        self.levels.add(config.label(self.labels), m)

    def _say(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def begin(self, total_configs: int, done_configs: int) -> None:
        self.total, self.done = total_configs, done_configs
        already = f" ({done_configs} done before)" if done_configs else ""
        self._say(f"planned: {_plural(total_configs, 'engine config')}{already}")

    def planned(self, total: int) -> None:
        if total != self.total:
            self.total = total
            self._say(f"planned: now {_plural(total, 'engine config')}")

    def trial_finished(
        self, config: EngineConfig, value: float | None, reason: str | None, best: str | None
    ) -> None:
        self.done += 1
        label = config.label(self.labels)
        text = f"[{self.done}/{max(self.total, self.done)}] " + _finished_text(
            label, value, reason, self.unit
        )
        best = self.levels.best_text(label, best, self.unit)
        if best:
            text += f"; best so far {best}"
        self._say(text)


def _status_column() -> Any:
    """The progress bar's last column: the status on one line, cut with an ellipsis.

    Its table column is the only one rich may narrow (the others are no-wrap), and the text
    itself never wraps, so a long status loses its end, not the count or the ETA."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class StatusColumn(ProgressColumn):
        def render(self, task: Any) -> Text:
            return Text(str(task.fields.get("status", "")), no_wrap=True, overflow="ellipsis")

    return StatusColumn


class RichReporter(QuietReporter):
    """A rich progress bar on stderr; finished configs print above it."""

    def __init__(self, console: Any):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.table import Column

        _StatusColumn = _status_column()

        self.console = console
        self.progress = Progress(
            TextColumn("[bold]{task.description}", table_column=Column(no_wrap=True)),
            BarColumn(bar_width=20),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            # The status (running config, best so far) takes what width is left and is cut
            # with an ellipsis: the count and ETA before it never are (they were, first, at
            # 100-120 columns when the status was long).
            _StatusColumn(table_column=Column(no_wrap=False, overflow="ellipsis")),
            console=console,
            transient=False,
        )
        self.task: Any = None
        self.best: str | None = None
        self.current: list[str] = []
        self.measurements = 0
        self.levels = SharedLevels()

    def begin(self, total_configs: int, done_configs: int) -> None:
        self.progress.start()
        self.task = self.progress.add_task(
            "engine configs", total=total_configs, completed=done_configs, status=""
        )

    def planned(self, total: int) -> None:
        if self.task is not None:
            self.progress.update(self.task, total=total)

    def _status(self) -> str:
        parts = []
        if self.current:
            parts.append(
                f"measuring {', '.join(self.current)} "
                f"({_plural(self.measurements, 'measurement')} so far)"
            )
        if self.best:
            parts.append(f"best so far {self.best}")
        return " | ".join(parts)

    def trial_started(self, config: EngineConfig) -> None:
        self.current.append(config.label(self.labels))
        self.measurements = 0
        self.progress.update(self.task, status=self._status())

    def measured(self, config: EngineConfig, m: Measurement) -> None:
        self.measurements += 1
        self.levels.add(config.label(self.labels), m)
        self.progress.update(self.task, status=self._status())

    def trial_finished(
        self, config: EngineConfig, value: float | None, reason: str | None, best: str | None
    ) -> None:
        label = config.label(self.labels)
        if label in self.current:
            self.current.remove(label)
        self.best = self.levels.best_text(label, best, self.unit)
        text = _finished_text(label, value, reason, self.unit)
        style = "red" if reason is not None else "green"
        self.progress.console.print(text, style=style, markup=False)
        self.progress.update(self.task, advance=1, status=self._status())

    def end(self) -> None:
        # A strategy that stops early planned more than it ran: end the bar full, not at 11/15.
        if self.task is not None:
            task = next(t for t in self.progress.tasks if t.id == self.task)
            self.progress.update(self.task, total=task.completed, status="")
        self.progress.stop()


def make_reporter(*, quiet: bool, no_progress: bool) -> Any:
    """The reporter for `study run`: quiet, a line per config, or a bar on a terminal."""
    if quiet:
        return QuietReporter()
    if no_progress or not sys.stderr.isatty():
        return LineReporter(sys.stderr)
    from autotune.cli._common import console

    return RichReporter(console(stderr=True))
