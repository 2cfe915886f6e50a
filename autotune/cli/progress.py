"""A rich progress bar for `study run`: engine configs done, the current one, ETA, best so far."""

from __future__ import annotations

from typing import Any

from autotune.engine._base import EngineConfig, Measurement


class RichReporter:
    """Implements :class:`autotune.search.tuner.Reporter` with a rich Progress."""

    def __init__(self, console: Any):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = console
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[status]}"),
            console=console,
            transient=False,
        )
        self.task: Any = None
        self.best: str | None = None
        self.current: list[str] = []
        self.cells = 0

    def begin(self, total_configs: int, done_configs: int) -> None:
        self.progress.start()
        self.task = self.progress.add_task(
            "engine configs", total=total_configs, completed=done_configs, status=""
        )

    def planned(self, total_configs: int) -> None:
        self.progress.update(self.task, total=total_configs)

    def _status(self) -> str:
        parts = []
        if self.current:
            parts.append(f"running {', '.join(self.current)} ({self.cells} cells)")
        if self.best:
            parts.append(f"best {self.best}")
        return " | ".join(parts)

    def trial_started(self, config: EngineConfig) -> None:
        self.current.append(config.label())
        self.cells = 0
        self.progress.update(self.task, status=self._status())

    def measured(self, config: EngineConfig, m: Measurement) -> None:
        self.cells += 1
        self.progress.update(self.task, status=self._status())

    def trial_finished(
        self, config: EngineConfig, value: float | None, reason: str | None, best: str | None
    ) -> None:
        label = config.label()
        if label in self.current:
            self.current.remove(label)
        self.best = best
        if reason is not None:
            self.progress.console.print(f"[red]failed[/red] {label}: {reason}")
        else:
            self.progress.console.print(
                f"[green]done[/green]   {label}: {value:,.1f} tok/s (geomean)"
            )
        self.progress.update(self.task, advance=1, status=self._status())

    def end(self) -> None:
        self.progress.stop()
