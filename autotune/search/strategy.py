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
from autotune.evidence.scores import DEFAULT_PRECISION_PCT, median_ci_halfwidth_pct
from autotune.search.space import SearchSpace
from autotune.spec.loader import ResolvedStudy
from autotune.spec.methods import config_id
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

    def cancel_reason(self, config: EngineConfig) -> str | None:
        """Why ``config``'s engine was stopped (its ``next_cell`` returned None) before its
        cells were done because the evidence ruled it out, or None: the tuner then stores the
        trial as ``cancelled`` with this reason, its measurements kept."""
        ...

    def planned(self, state: SearchState) -> int:
        """How many engine configs the strategy expects the study to start in all (measured,
        running and still to come), as far as it can tell now: the progress total."""
        ...


Level = tuple[str, int]
"""(workload, concurrency)."""

Limits = Mapping[Level, int]
"""Level -> how many repeats an engine may take there at most (a replay's recorded ones left)."""


def repeat_limits(
    study: ResolvedStudy,
    config: EngineConfig,
    rows: Sequence[MeasurementRecord],
    trial_id: int | None = None,
) -> Limits | None:
    """On a replay, per level: the repeats of ``config`` the landscape recorded there, less
    those its other trials (``rows``, leaving out ``trial_id``'s) drew already; None on a real
    engine, which can always measure once more. A replay serves each recorded repeat once, so
    an engine never asks past these: a copy would count as new evidence."""
    if study.spec.engine.kind != "replay" or study.landscape is None:
        return None
    from autotune.engine.replay import recorded_repeats

    left = dict(recorded_repeats(study.landscape, config))
    mine = config_id(config.speculative_config())
    for r in rows:
        level = (r.workload, r.concurrency)
        if r.trial_id != trial_id and level in left and config_id(r.speculative_config) == mine:
            left[level] -= 1
    return {level: max(0, n) for level, n in left.items()}


def short_of_repeats(study: ResolvedStudy, space: SearchSpace) -> str:
    """On a replay, what of the study's ``repeats`` it cannot honour (one line; "" when it can
    honour all): the cells whose landscape recorded fewer repeats, which keep only those."""
    if study.spec.engine.kind != "replay" or study.landscape is None:
        return ""
    from autotune.engine.replay import recorded_repeats

    want = study.spec.repeats
    counts = [
        n for config in space.configs() for n in recorded_repeats(study.landscape, config).values()
    ]
    short = [n for n in counts if n < want]
    if not short:
        return ""
    return (
        f"replay: repeats {want} cannot be honoured at {len(short)} of {len(counts)} recorded "
        f"cells (the landscape recorded {min(short)}-{max(short)} there; a replay serves each "
        "recorded repeat once, so those cells keep only theirs)"
    ).replace(f"{min(short)}-{min(short)} ", f"{min(short)} ")


def can_measure(limits: Limits | None, level: Level, measured: Sequence[Measurement]) -> bool:
    """Whether an engine that ``measured`` these cells may take one more at ``level``."""
    if limits is None:
        return True
    taken = sum((m.workload, m.concurrency) == level for m in measured)
    return taken < limits.get(level, taken + 1)  # a level never recorded fails like an engine


def plan_cells(study: ResolvedStudy) -> list[Cell]:
    """Every cell of the study's protocol, repeats outermost, so drift on a long-running engine
    spreads over every cell."""
    return [
        Cell(workload=w, concurrency=c, repeat=r)
        for r in range(study.spec.repeats)
        for w in study.measured_names()
        for c in study.spec.concurrency
    ]


def precise_enough(
    throughputs: Sequence[float],
    seconds: float,
    *,
    repeats: int,
    precision_pct: float,
    max_repeats: int | None,
    max_level_s: float,
) -> bool:
    """Whether the sequential rule stops measuring a level: ``repeats`` runs are done and
    either the median's 95% CI is within ±``precision_pct`` or a cap is hit (``max_repeats``
    runs, default 3 × repeats and never below repeats; ``seconds``, the level's measured time
    on this engine, reached ``max_level_s``)."""
    n = len(throughputs)
    cap = max(repeats, max_repeats if max_repeats is not None else 3 * repeats)
    if n < repeats:
        return False
    if n >= cap or seconds >= max_level_s:
        return True
    return median_ci_halfwidth_pct(throughputs) <= precision_pct


def uses_precision_rule(study: ResolvedStudy) -> bool:
    """Whether the study re-measures levels to a precision (real engines, or a replay that sets
    ``measurement.precision_pct``) rather than by the older spread rule: a replay cycles its
    recorded repeats, so more of them add no information about the median, and the recorded
    search benchmarks were run with the spread rule."""
    return study.spec.engine.kind != "replay" or study.spec.measurement.precision_pct is not None


def precision_pct(study: ResolvedStudy) -> float:
    """The study's ``measurement.precision_pct``, or its default."""
    p = study.spec.measurement.precision_pct
    return DEFAULT_PRECISION_PCT if p is None else p


def drift_check_enabled(study: ResolvedStudy) -> bool:
    """``measurement.drift_check``; unset: on for real engines, off for replays (a replay's
    engines do not drift, and the recorded search benchmarks ran without it)."""
    d = study.spec.measurement.drift_check
    return study.spec.engine.kind != "replay" if d is None else d


def protocol_cell(
    study: ResolvedStudy, measured: Sequence[Measurement], limits: Limits | None = None
) -> Cell | None:
    """The next cell of the full protocol (every planned cell, then the sequential re-runs),
    within ``limits``: what an engine measures when no strategy screens its levels (the drift
    check's second baseline, an Optuna sampler's configs)."""
    done = {(m.workload, m.concurrency, m.repeat) for m in measured}
    planned = next(
        (
            c
            for c in plan_cells(study)
            if (c.workload, c.concurrency, c.repeat) not in done
            and can_measure(limits, (c.workload, c.concurrency), measured)
        ),
        None,
    )
    return planned or noisy_cell(study, measured, limits)


def wants_more(study: ResolvedStudy, runs: Sequence[Measurement]) -> bool:
    """Whether the study's re-run rule (see :func:`noisy_cell`) asks for one more run of a level
    this engine measured ``runs`` times (at least ``repeats``), limits aside."""
    m = study.spec.measurement
    full = study.spec.repeats
    if not m.remeasure_noisy or len(runs) < full:
        return False
    tputs = [x.output_throughput_tok_s for x in runs]
    if uses_precision_rule(study):
        return not precise_enough(
            tputs,
            sum(x.measure_s for x in runs),
            repeats=full,
            precision_pct=precision_pct(study),
            max_repeats=m.max_repeats,
            max_level_s=m.max_level_s,
        )
    if len(tputs) < max(full, 2) or len(tputs) >= 2 * full:
        return False
    median = statistics.median(tputs)
    return median > 0 and (max(tputs) - min(tputs)) / median > m.max_spread_pct / 100.0


def noisy_cell(
    study: ResolvedStudy, measured: Sequence[Measurement], limits: Limits | None = None
) -> Cell | None:
    """One more run of a level that is not yet measured precisely enough on this warm engine
    (both strategies call it once their planned cells are done); None: none is.

    Real engines use sequential stopping (:func:`precise_enough`): a level with its ``repeats``
    runs is measured again while the 95% CI of its median is wider than
    ``measurement.precision_pct``, up to ``max_repeats`` runs or ``max_level_s`` seconds. A
    replay study (unless it sets ``precision_pct``) keeps the older rule: one more run while the
    repeats spread wider than ``max_spread_pct`` ((max - min) / median), up to twice the
    repeats. ``remeasure_noisy: false`` keeps exactly ``repeats`` per level either way. A level at
    its ``limits`` (a replay's recorded repeats) is not run again."""
    levels: dict[tuple[str, int], list[Measurement]] = defaultdict(list)
    for x in measured:
        levels[(x.workload, x.concurrency)].append(x)
    for (workload, concurrency), runs in sorted(levels.items()):
        if wants_more(study, runs) and can_measure(limits, (workload, concurrency), measured):
            return Cell(workload=workload, concurrency=concurrency, repeat=len(runs))
    return None


def undecided_cell(
    study: ResolvedStudy,
    config: EngineConfig,
    rows: Sequence[MeasurementRecord],
    measured: Sequence[Measurement],
    limits: Limits | None = None,
) -> Cell | None:
    """One more repeat of a level where this warm engine's config is one of the level's two
    best by median and its verdict against the other (:func:`autotune.evidence.decide.verdict_of_runs`)
    is *undecided*: sequential stopping, until the two are decided or tied, or a cap is hit
    (``max_repeats`` runs, default 3 x ``repeats``; ``max_level_s`` on this engine; a replay's
    recorded repeats, ``limits``). ``rows``: the other configs' stored measurements (of this
    engine's prompt sets); a config measured once there (a screening run) is no contender.
    None: no level of this engine is undecided."""
    from autotune.evidence.decide import verdict_of_runs as verdict

    m = study.spec.measurement
    full = study.spec.repeats
    cap = max(full, m.max_repeats if m.max_repeats is not None else 3 * full)
    mine = config_id(config.speculative_config())
    runs: dict[Level, list[Measurement]] = defaultdict(list)
    for x in measured:
        runs[(x.workload, x.concurrency)].append(x)
    digests = {x.workload_digest for x in measured}
    others: dict[Level, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        key = config_id(r.speculative_config)
        if key != mine and r.workload_digest in digests and r.output_throughput_tok_s > 0:
            others[(r.workload, r.concurrency)][key].append(r.output_throughput_tok_s)
    for level, here in sorted(runs.items()):
        n = len(here)
        if n < full or n >= cap or sum(x.measure_s for x in here) >= m.max_level_s:
            continue
        if not can_measure(limits, level, measured):
            continue
        tputs = [x.output_throughput_tok_s for x in here]
        rivals = sorted(
            (v for v in others.get(level, {}).values() if len(v) >= 2),
            key=statistics.median,
            reverse=True,
        )
        if not rivals:
            continue
        if len(rivals) > 1 and statistics.median(tputs) < statistics.median(rivals[1]):
            continue  # not one of the two best
        if verdict(tputs, rivals[0]) == "undecided":
            return Cell(workload=level[0], concurrency=level[1], repeat=n)
    return None
