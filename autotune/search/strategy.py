"""The search-strategy interface: what the tuner asks a strategy, and what it shows it.

A strategy decides which engine configs to start (``propose``), which cell a warm engine
measures next (``next_cell``) and learns from finished configs (``observe``). The tuner owns
everything else: the pool, the store, the budget and the Optuna mirror. Implementations:
``OptunaStrategy`` (any Optuna sampler, :mod:`autotune.search.samplers`) and ``ModelStrategy``
(the model-guided default, :mod:`autotune.search.model_strategy`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from autotune.cluster.jobs import Cell
from autotune.engine._base import EngineConfig, Measurement
from autotune.search.space import SearchSpace
from autotune.spec.loader import ResolvedStudy
from autotune.store import MeasurementRecord


@dataclass(frozen=True)
class SearchState:
    """What a strategy sees: the study, its space, and what is measured or running."""

    study: ResolvedStudy
    space: SearchSpace
    rows: Sequence[MeasurementRecord]
    """Every stored measurement of this study's finished trials (and, for ``next_cell``, of the
    other running trials so far)."""
    done: Mapping[str, float | None]
    """Config key -> trial value (None: the config failed)."""
    in_flight: frozenset[str]
    """Config keys being measured now."""

    def taken(self) -> set[str]:
        """Config keys that are measured, failed or running: never proposed again."""
        return set(self.done) | set(self.in_flight)


class Strategy(Protocol):
    """Decides what to measure. ``reason`` says why the last ``propose`` returned nothing."""

    reason: str

    def propose(self, state: SearchState, slots: int) -> list[EngineConfig]:
        """Up to ``slots`` configs to start now, none of them taken. An empty list means
        nothing is worth starting now; the tuner stops once nothing is in flight either."""
        ...

    def next_cell(
        self, state: SearchState, config: EngineConfig, measured: Sequence[Measurement]
    ) -> Cell | None:
        """The next cell on ``config``'s warm engine, given what it ``measured`` so far, or
        None to stop the engine."""
        ...

    def observe(self, config: EngineConfig, value: float | None) -> None:
        """A config finished (``value`` None: it failed)."""
        ...

    def planned(self, state: SearchState) -> int:
        """How many engine configs the strategy expects the study to start in all (measured,
        running and still to come), as far as it can tell now: the progress total."""
        ...


def plan_cells(study: ResolvedStudy) -> list[Cell]:
    """Every cell of the study's protocol, repeats outermost, so drift on a long-running engine
    spreads over every cell."""
    return [
        Cell(workload=w, concurrency=c, repeat=r)
        for r in range(study.spec.repeats)
        for w in study.spec.workloads
        for c in study.spec.concurrency
    ]


def noisy_cell(study: ResolvedStudy, measured: Sequence[Measurement]) -> Cell | None:
    """One more repeat of a level whose repeats on this engine spread wider than the study's
    ``measurement.max_spread_pct`` (the report's "noisy" flag: (max - min) / median), up to
    twice the study's repeats: a cell hit by interference is measured again while its engine
    is warm instead of being flagged and kept."""
    if not study.spec.measurement.remeasure_noisy:
        return None
    full = study.spec.repeats
    limit = study.spec.measurement.max_spread_pct / 100.0
    levels: dict[tuple[str, int], list[float]] = defaultdict(list)
    for m in measured:
        levels[(m.workload, m.concurrency)].append(m.output_throughput_tok_s)
    for (workload, concurrency), tputs in sorted(levels.items()):
        if len(tputs) < max(full, 2) or len(tputs) >= 2 * full:
            continue
        median = statistics.median(tputs)
        if median > 0 and (max(tputs) - min(tputs)) / median > limit:
            return Cell(workload=workload, concurrency=concurrency, repeat=len(tputs))
    return None
