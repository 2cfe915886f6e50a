"""What a trial is worth: the study's objective over one config's measurements (Optuna's trial
value), its metric name and unit. One home for the geometric-mean objective that the tuner, the
Optuna mirror and the samplers share."""

from __future__ import annotations

import functools
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from autotune.engine._base import Measurement
from autotune.evidence.objectives import geometric_mean
from autotune.store import MeasurementRecord

if TYPE_CHECKING:
    from autotune.spec.study import StudySpec

METRIC = "output_throughput_tok_s_geomean"
"""The Optuna objective: geometric mean over the measured (workload, concurrency) levels of the
median output throughput (see :func:`objective_value`)."""

GOODPUT_METRIC = "goodput_req_s_geomean"
"""The Optuna objective under ``objective: goodput`` (see :func:`goodput_value`)."""


def metric_name(spec: StudySpec) -> str:
    """The name of the study's objective in its Optuna study."""
    return GOODPUT_METRIC if spec.objective == "goodput" else METRIC


def objective_unit(spec: StudySpec) -> str:
    """The unit of the study's trial value, as progress lines print it."""
    return "good req/s" if spec.objective == "goodput" else "tok/s"


def study_objective(
    spec: StudySpec,
) -> Callable[[Sequence[Measurement | MeasurementRecord]], float]:
    """The trial value the study's ``objective`` selects, over one config's measurements."""
    if spec.objective == "goodput":
        return functools.partial(goodput_value, spec=spec)
    return objective_value


def measurement_value(
    spec: StudySpec,
) -> Callable[[Measurement | MeasurementRecord], float | None]:
    """One measurement's worth under the study's ``objective``: its output throughput, or under
    ``goodput`` its requests/s that met the workload's SLO (None: no per-request latencies)."""
    if spec.objective != "goodput":
        return lambda m: m.output_throughput_tok_s
    from autotune.evidence.objectives import measurement_goodput, study_slo

    return lambda m: measurement_goodput(m, study_slo(spec, m.workload))


def goodput_value(
    measurements: Sequence[Measurement | MeasurementRecord], spec: StudySpec
) -> float:
    """Geometric mean over the measured (workload, concurrency) levels of the median goodput
    (requests/s that met the workload's SLO, vLLM's definition:
    :func:`autotune.evidence.objectives.good_requests`). A level where no request met the SLO
    makes the value 0: under an SLO a config that fails somewhere measured is not a candidate there.
    Measurements without per-request latencies (stored before schema 4) do not count."""
    value = measurement_value(spec)
    cells: dict[tuple[str, int], list[float]] = defaultdict(list)
    for m in measurements:
        g = value(m)
        if g is not None:
            cells[(m.workload, m.concurrency)].append(g)
    medians = [statistics.median(v) for v in cells.values()]
    if not medians or any(v <= 0 for v in medians):
        return 0.0
    return geometric_mean(medians)


def objective_value(measurements: Sequence[Measurement | MeasurementRecord]) -> float:
    """Geometric mean over the measured (workload, concurrency) cells of the median output
    throughput (Optuna's trial value; the model-guided search leaves out cells where a config
    cannot win, so compare values only between configs measured at the same cells)."""
    medians = list(level_medians(measurements).values())
    if not medians or any(v <= 0 for v in medians):
        return 0.0
    return geometric_mean(medians)


def level_medians(
    measurements: Sequence[Measurement | MeasurementRecord],
) -> dict[tuple[str, int], float]:
    """(workload, concurrency) -> the median output throughput of its repeats."""
    cells: dict[tuple[str, int], list[float]] = defaultdict(list)
    for m in measurements:
        cells[(m.workload, m.concurrency)].append(m.output_throughput_tok_s)
    return {level: statistics.median(v) for level, v in sorted(cells.items())}
