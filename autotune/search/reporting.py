"""What a tuner run tells its caller: progress callbacks while it runs (:class:`Reporter`; the
CLI draws its progress from them, :mod:`autotune.cli.progress`) and what it did once it ended
(:class:`RunSummary`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from autotune.engine._base import EngineConfig, Measurement


class Reporter(Protocol):
    """Progress callbacks (the CLI draws a rich progress bar from them)."""

    def begin(self, total_configs: int, done_configs: int) -> None: ...

    def planned(self, total_configs: int) -> None:
        """The strategy's plan changed: it now expects ``total_configs`` engine configs."""
        ...

    def trial_started(self, config: EngineConfig) -> None: ...

    def measured(self, config: EngineConfig, m: Measurement) -> None: ...

    def trial_finished(
        self, config: EngineConfig, value: float | None, reason: str | None, best: str | None
    ) -> None: ...

    def end(self) -> None: ...


class SilentReporter:
    def begin(self, total_configs: int, done_configs: int) -> None:
        pass

    def planned(self, total_configs: int) -> None:
        pass

    def trial_started(self, config: EngineConfig) -> None:
        pass

    def measured(self, config: EngineConfig, m: Measurement) -> None:
        pass

    def trial_finished(
        self, config: EngineConfig, value: float | None, reason: str | None, best: str | None
    ) -> None:
        pass

    def end(self) -> None:
        pass


@dataclass
class RunSummary:
    """What one `study run` did."""

    trials_started: int = 0
    trials_run: int = 0
    trials_failed: int = 0
    trials_skipped: int = 0
    measurements: int = 0
    engine_seconds: float = 0.0
    stop_reason: str = ""
    failures: list[tuple[str, str]] = field(default_factory=list)
    baseline_failure: str | None = None
    """Why the baseline could not start (this run or an earlier one): the run then stops, as
    every other config would fail the same way or have nothing to be compared with."""
    confirm_starts: int = 0
    confirm_engine_seconds: float = 0.0
    confirm_wall_s: float = 0.0
    """This run's confirmation starts (:mod:`autotune.search.confirm`) and what they cost."""
    confirm_note: str = ""
    """What confirmation found and cost, one line ("" when off)."""
    replay_note: str = ""
    """On a replay: the ``repeats`` it cannot honour (:func:`short_of_repeats`; "" when none)."""
    wall_seconds: float = 0.0
    """The run's wall time, from its start to its last config's end."""
    startup_s: float | None = None
    """The run's one-time start-up (Ray, model builds, the first actor): the first finished
    config's wall time beyond its engine time (None: no config finished)."""
    wall_spent: str = ""
    """When the wall budget stopped the run: the time elapsed at that decision, as the stop
    reason shows it (``5.6 min``; autotune.search.wall_budget)."""
    unmeasured: int | None = None
    """When the wall budget stopped the run: the engine configs still to start (those the
    strategy plans and the drift check's second baseline run), which ``study resume`` starts."""
