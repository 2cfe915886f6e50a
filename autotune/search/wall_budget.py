"""The wall-clock budget of one run (``budget.max_wall_minutes``): when to stop starting configs.

A run that may take ``minutes`` of wall time starts no further engine config once the time since
the run began plus the next config's expected time would pass the budget; the configs already
running finish (their measurements are what the recommendation is made from). The next config's
expected time is the mean wall time (submitted to finished: engine start, warm-up, the cells it
measured, teardown) of the configs this run finished. Before the first one finishes there is no
estimate: the run goes on until the budget itself has passed. The strategy decides the order, so
what the budget buys is the baseline first, then what the strategy ranks next.

The budget is per run: ``study resume`` starts a new clock (the engine-config and engine-hour
budgets, by contrast, count the whole study).

One clock and one unit in what the run prints: the stop reason and the summary's "spent" line
both show the time elapsed when the budget stopped the run (:attr:`WallBudget.decided_s`), in
minutes (seconds for a budget under two minutes): ``wall budget (8 min): 5.6 min elapsed, next
config needs ~2.4 min``. The configs still running finish after that, so the run itself ends
later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class WallBudget:
    """Wall time of one run against ``minutes`` (None: no wall budget)."""

    minutes: float | None
    clock: Callable[[], float] = time.monotonic
    started_at: float = field(init=False)
    durations: list[float] = field(default_factory=list)
    """Wall seconds of each config this run finished (complete or failed)."""
    decided_s: float | None = None
    """Seconds since the run began when :meth:`exceeded` first stopped it (None: it did not)."""
    _submitted: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.started_at = self.clock()

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.started_at

    def trial_started(self, trial_id: int) -> None:
        self._submitted[trial_id] = self.clock()

    def trial_finished(self, trial_id: int) -> None:
        submitted = self._submitted.pop(trial_id, None)
        if submitted is not None:
            self.durations.append(self.clock() - submitted)

    def expected_s(self) -> float | None:
        """The next config's expected wall time: the mean of this run's finished configs."""
        return sum(self.durations) / len(self.durations) if self.durations else None

    def shown(self, seconds: float) -> str:
        """A time in the budget's unit: ``5.6 min``, or ``26 s`` for a budget under 2 minutes."""
        if self.minutes is not None and self.minutes < 2:
            return f"{seconds:,.0f} s"
        return f"{seconds / 60:,.1f} min"

    def spent(self) -> str:
        """The time elapsed when the budget stopped the run, as the stop reason shows it ("":
        it did not stop the run)."""
        return "" if self.decided_s is None else self.shown(self.decided_s)

    def exceeded(self) -> str:
        """Why no config may start now (the run's stop reason), or "" while one may."""
        if self.minutes is None:
            return ""
        limit_s = self.minutes * 60
        elapsed = self.elapsed_s
        expected = self.expected_s()
        budget = f"wall budget ({self.minutes:g} min)"
        if elapsed >= limit_s:
            self.decided_s = elapsed
            return f"{budget}: {self.shown(elapsed)} elapsed"
        if expected is not None and elapsed + expected > limit_s:
            self.decided_s = elapsed
            return (
                f"{budget}: {self.shown(elapsed)} elapsed, next config needs "
                f"~{self.shown(expected)}"
            )
        return ""
