"""What a measurement is worth under the study's objective: the SLO's latency metrics, goodput,
and the geometric mean that folds levels into one number.

:data:`METRICS` are the p99 latencies a measurement records and an SLO limits.
:func:`good_requests` is vLLM's goodput count (requests that met the SLO), computed from the
per-request (TTFT, TPOT) every measurement stores since schema 4, so goodput can be recomputed
for any SLO later; :func:`measurement_goodput` is one measurement's goodput in requests/s and
:func:`median_goodput` a level's per config. :func:`geometric_mean` (optionally weighted) is how
the trial value, the all-levels answer and the live prediction fold levels together.

A trial's value (Optuna's, :func:`study_objective`) is the geometric mean over its measured
levels of the median of :func:`measurement_value`: output throughput (:func:`objective_value`),
or under ``objective: goodput`` requests/s that met the SLO (:func:`goodput_value`). Its name in
the Optuna study is :mod:`autotune.search.objective`'s.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from autotune.evidence.cells import Evidence, Rows
from autotune.spec.methods import config_id
from autotune.spec.slo import SLO

if TYPE_CHECKING:
    from autotune.engine._base import Measurement
    from autotune.engine.stats import RequestTiming
    from autotune.spec.study import StudySpec
    from autotune.store.records import MeasurementRecord as MeasuredRow

METRICS = ("p99_tpot_ms", "p99_ttft_ms", "p99_itl_ms")
"""The p99 latencies a measurement records and an SLO may limit (milliseconds)."""


def study_slo(spec: StudySpec, workload: str) -> SLO:
    """The SLO a study sets for ``workload`` (empty when the study has no ``slo:`` block)."""
    return spec.slo.for_workload(workload) if spec.slo else SLO()


def good_requests(latencies_ms: Sequence[tuple[float | None, float | None]], slo: SLO) -> int:
    """How many requests met the SLO, by ``vllm bench serve``'s definition of goodput.

    vLLM (``benchmarks/serve.py``: ``calculate_metrics``) counts a completed request as good
    when each limited metric *of that request* is within its limit: TTFT, and TPOT as
    (e2e - TTFT) / (output tokens - 1), taken as 0 for a one-token reply. The SLO's p99 limits
    serve as those per-request limits; vLLM's goodput has no ITL term, so ``p99_itl_ms`` does not
    enter. Requests that produced no chunk (TTFT None) did not complete and are not good.
    """
    good = 0
    for ttft_ms, tpot_ms in latencies_ms:
        if ttft_ms is None or tpot_ms is None:
            continue
        if slo.p99_ttft_ms is not None and ttft_ms > slo.p99_ttft_ms:
            continue
        if slo.p99_tpot_ms is not None and tpot_ms > slo.p99_tpot_ms:
            continue
        good += 1
    return good


def request_goodput(timings: Sequence[RequestTiming], duration_s: float, slo: SLO) -> float:
    """Requests per second that met the SLO (:func:`good_requests`), for a run's timings."""
    from autotune.engine.stats import request_latencies_ms

    if duration_s <= 0:
        raise ValueError("duration_s must be positive")
    return good_requests(request_latencies_ms(timings), slo) / duration_s


def measurement_goodput(m: Measurement, slo: SLO) -> float | None:
    """A stored measurement's goodput in requests/s under ``slo``; None when it has no
    per-request latencies (a replayed landscape, or stored before schema 4)."""
    if not m.request_latencies_ms or m.measure_s <= 0:
        return None
    return good_requests(m.request_latencies_ms, slo) / m.measure_s


def median_goodput(rows: Rows, workload: str, concurrency: int, slo: SLO) -> dict[str, float]:
    """Per config (by :func:`config_id`), the median goodput over its repeats at one level of
    the workload's latest prompt set; configs without per-request data are left out."""
    values: dict[str, list[float]] = defaultdict(list)
    for r in Evidence.of(rows).cell(workload, concurrency):
        g = measurement_goodput(r, slo)
        if g is not None:
            values[config_id(r.speculative_config)].append(g)
    return {key: statistics.median(v) for key, v in values.items()}


def geometric_mean(values: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """``exp(mean(log(values)))``, weighted by ``weights`` (one per value) when given; every
    value must be positive."""
    if weights is None:
        return math.exp(sum(math.log(v) for v in values) / len(values))
    return math.exp(
        sum(w * math.log(v) for w, v in zip(weights, values, strict=True)) / sum(weights)
    )


def study_objective(
    spec: StudySpec,
) -> Callable[[Sequence[Measurement | MeasuredRow]], float]:
    """The trial value the study's ``objective`` selects, over one config's measurements."""
    if spec.objective == "goodput":
        return functools.partial(goodput_value, spec=spec)
    return objective_value


def measurement_value(
    spec: StudySpec,
) -> Callable[[Measurement | MeasuredRow], float | None]:
    """One measurement's worth under the study's ``objective``: its output throughput, or under
    ``goodput`` its requests/s that met the workload's SLO (None: no per-request latencies)."""
    if spec.objective != "goodput":
        return lambda m: m.output_throughput_tok_s
    return lambda m: measurement_goodput(m, study_slo(spec, m.workload))


def goodput_value(measurements: Sequence[Measurement | MeasuredRow], spec: StudySpec) -> float:
    """Geometric mean over the measured (workload, concurrency) levels of the median goodput
    (requests/s that met the workload's SLO, vLLM's definition: :func:`good_requests`). A level
    where no request met the SLO makes the value 0: under an SLO a config that fails somewhere
    measured is not a candidate there. Measurements without per-request latencies (stored before schema 4) do not count."""
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


def objective_value(measurements: Sequence[Measurement | MeasuredRow]) -> float:
    """Geometric mean over the measured (workload, concurrency) cells of the median output
    throughput (Optuna's trial value; the model-guided search leaves out cells where a config
    cannot win, so compare values only between configs measured at the same cells)."""
    medians = list(level_medians(measurements).values())
    if not medians or any(v <= 0 for v in medians):
        return 0.0
    return geometric_mean(medians)


def level_medians(
    measurements: Sequence[Measurement | MeasuredRow],
) -> dict[tuple[str, int], float]:
    """(workload, concurrency) -> the median output throughput of its repeats."""
    cells: dict[tuple[str, int], list[float]] = defaultdict(list)
    for m in measurements:
        cells[(m.workload, m.concurrency)].append(m.output_throughput_tok_s)
    return {level: statistics.median(v) for level, v in sorted(cells.items())}
