"""The model strategy's view of the stored measurements (:mod:`autotune.search.model_strategy`):
rows grouped into (workload, concurrency) cells as model points, the search space's options,
the p99 TPOT ratios an SLO bound rests on, and the close-call repeats a study already took.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence

from autotune.engine._base import EngineConfig, Measurement
from autotune.evidence.cells import Evidence
from autotune.evidence.points import point
from autotune.perf import Point
from autotune.search.space import Option, SearchSpace
from autotune.search.strategy import wants_more
from autotune.spec.loader import ResolvedStudy
from autotune.spec.methods import BASELINE, config_id
from autotune.store import MeasurementRecord

Level = tuple[str, int]
"""A (workload, concurrency) cell: every config is measured at all of them on one engine."""


def close_calls_taken(
    study: ResolvedStudy, rows: Sequence[MeasurementRecord], measured: Sequence[Measurement]
) -> int:
    """The close-call repeats the study took so far (:meth:`ModelStrategy._close_call`), read
    from the measurements themselves: the stored ``rows`` (per trial) and a running engine's
    ``measured``. A level's repeat beyond the study's ``repeats`` was a close call exactly when
    the re-run rule (:func:`autotune.search.strategy.wants_more`) did not ask for it: an engine
    takes a close call only once no level of it wants a re-run. The repeats an undecided level
    took (:func:`autotune.search.strategy.undecided_cell`) count too: both are extra repeats
    spent on the choice between a level's two best."""
    runs: dict[tuple[int | None, Level], list[Measurement]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r.trial_id, r.repeat)):
        runs[(r.trial_id, (r.workload, r.concurrency))].append(r)
    for m in sorted(measured, key=lambda m: m.repeat):
        runs[(None, (m.workload, m.concurrency))].append(m)
    full = study.spec.repeats
    return sum(
        not wants_more(study, level_runs[:k])
        for level_runs in runs.values()
        for k in range(full, len(level_runs))
    )


def _tpot_ratios(rows: Sequence[MeasurementRecord]) -> dict[Level, float]:
    """Per level, the smallest ratio over measured configs of their p99 TPOT (median over
    repeats) to c / throughput (median), the mean time per token of one of c streams."""
    groups: dict[tuple[str, Level], list[MeasurementRecord]] = defaultdict(list)
    for r in rows:
        if r.p99_tpot_ms is not None and r.output_throughput_tok_s > 0:
            groups[(config_id(r.speculative_config), (r.workload, r.concurrency))].append(r)
    out: dict[Level, float] = {}
    for (_, level), group in groups.items():
        tpot = statistics.median(float(r.p99_tpot_ms or 0.0) for r in group)
        stream_ms = level[1] * 1000.0 / statistics.median(r.output_throughput_tok_s for r in group)
        out[level] = min(out.get(level, math.inf), tpot / stream_ms)
    return out


def _option_of(space: SearchSpace, config: EngineConfig) -> Option | None:
    """The search space's option ``config`` is an N of."""
    return next(
        (
            o
            for o in _speculative(space)
            if (o.method, o.draft, dict(o.params))
            == (config.method, config.draft, dict(config.method_params))
        ),
        None,
    )


def _levels_of(study: ResolvedStudy) -> frozenset[Level]:
    return frozenset((w, c) for w in study.measured_names() for c in study.spec.concurrency)


def _speculative(space: SearchSpace) -> list[Option]:
    return [o for o in space.options if o.method != BASELINE]


def _current_rows(rows: Sequence[MeasurementRecord]) -> list[MeasurementRecord]:
    """Rows of each workload's newest prompt set only (older prompt sets never mix in)."""
    return list(Evidence.of(rows).rows)


def _cells(rows: Sequence[MeasurementRecord]) -> dict[str, dict[Level, Point]]:
    """speculative config -> (workload, concurrency) -> its repeats as one point."""
    groups: dict[str, dict[Level, list[MeasurementRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.output_throughput_tok_s > 0:
            groups[config_id(r.speculative_config)][(r.workload, r.concurrency)].append(r)
    return {
        key: {level: _point(group) for level, group in cells.items()}
        for key, cells in groups.items()
    }


def _by_level(cells: Mapping[str, Mapping[Level, Point]]) -> dict[Level, list[Point]]:
    out: dict[Level, list[Point]] = defaultdict(list)
    for per_level in cells.values():
        for level, p in per_level.items():
            out[level].append(p)
    return out


def _point(group: Sequence[MeasurementRecord]) -> Point:
    """One cell's repeats as a model point (:func:`autotune.evidence.points.point`)."""
    return point(group, group[0].method, group[0].num_speculative_tokens)


def _as_method(p: Point, method: str) -> Point:
    # Points are keyed by method in the model; an option's rows already carry it.
    return (
        p
        if p.method == method
        else Point(
            method,
            p.num_speculative_tokens,
            p.concurrency,
            p.output_throughput_tok_s,
            p.acceptance_per_pos,
            p.num_repeats,
            p.spread,
        )
    )
