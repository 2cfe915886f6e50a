"""The wall-clock budget of one run (``budget.max_wall_minutes``): when to stop starting configs.

A run that may take ``minutes`` of wall time starts no further engine config once the time since
the run began plus the next config's expected time would pass the budget; the configs already
running finish (their measurements are what the recommendation is made from).

One-time start-up is measured apart from a config's own time. A config's own time is its engine
time (engine start, warm-up, the cells it measured: what the trial stores as engine-seconds)
plus the per-config overhead seen on the configs after the first (actor hand-over, teardown);
the first config's wall time beyond its engine time is the run's start-up (Ray, model builds,
the first actor's imports), paid once (:attr:`WallBudget.startup_s`). The next config's expected
time is the mean own time of the configs this run finished, so a slow first start no longer
makes every later config look as slow. (Where the engine time is not reported, the wall time
submitted to finished stands in for it.) Before the first one finishes there is no estimate:
the run goes on until the budget itself has passed. The run's first config always starts,
however long the run took to get there (Ray, a slow store, a loaded machine), so every
``study resume`` measures at least one config, as :func:`configs_bought` counts. The strategy
decides the order, so what the budget buys is what the strategy ranks first (the model
strategy: the first method's anchor, then the baseline; the Optuna samplers: the baseline);
:func:`configs_bought` counts them ahead of a run (``study run --dry-run``).

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

WALL_BUDGET_STATUS = "stopped: wall budget"
"""The study's status after its wall budget (``budget.max_wall_minutes``) stopped a run."""


@dataclass
class WallBudget:
    """Wall time of one run against ``minutes`` (None: no wall budget)."""

    minutes: float | None
    clock: Callable[[], float] = time.monotonic
    started_at: float = field(init=False)
    durations: list[float] = field(default_factory=list)
    """Wall seconds of each config this run finished (complete or failed)."""
    engine_s: list[float] = field(default_factory=list)
    """Engine-seconds of each config this run finished (its wall seconds when not reported)."""
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

    def trial_finished(self, trial_id: int, engine_seconds: float | None = None) -> None:
        """A config finished; ``engine_seconds``: its engine time (None: not known, its wall
        time stands in)."""
        submitted = self._submitted.pop(trial_id, None)
        if submitted is not None:
            wall = self.clock() - submitted
            self.durations.append(wall)
            own = wall if engine_seconds is None else min(max(engine_seconds, 0.0), wall)
            self.engine_s.append(own)

    @property
    def startup_s(self) -> float | None:
        """The run's one-time start-up: the first finished config's wall time beyond its engine
        time (Ray, model builds, the first actor); None before a config finished."""
        if not self.durations:
            return None
        return max(0.0, self.durations[0] - self.engine_s[0])

    def overhead_s(self) -> float:
        """Per-config wall time beyond engine time, from the configs after the first (0 with
        fewer than two)."""
        later = [w - e for w, e in zip(self.durations[1:], self.engine_s[1:], strict=True)]
        return sum(later) / len(later) if later else 0.0

    def expected_s(self) -> float | None:
        """The next config's expected wall time: the mean engine time of this run's finished
        configs plus the per-config overhead (one-time start-up left out)."""
        if not self.engine_s:
            return None
        return sum(self.engine_s) / len(self.engine_s) + self.overhead_s()

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
        """Why no config may start now (the run's stop reason), or "" while one may (always
        before this run started its first config)."""
        if self.minutes is None or not (self._submitted or self.durations):
            return ""  # no budget, or this run has not started a config yet
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


def configs_bought(minutes: float, per_config_s: float, startup_s: float, planned: int) -> int:
    """How many of ``planned`` configs (in the strategy's order) a ``minutes`` wall budget
    starts, each expected to take ``per_config_s`` after a one-time ``startup_s``: the run
    starts a config while the time so far plus one config's time fits (the first one always
    starts)."""
    limit = minutes * 60
    bought, elapsed = 0, startup_s
    while bought < planned and (bought == 0 or elapsed + per_config_s <= limit):
        bought += 1
        elapsed += per_config_s
    return bought
