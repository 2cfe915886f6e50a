"""The study's objective in Optuna's terms: its metric name and the unit progress lines print.
What a trial is worth (the geometric-mean objective the tuner, the Optuna mirror and the samplers
share) is :mod:`autotune.evidence.objectives`'s."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.spec.study import StudySpec

METRIC = "output_throughput_tok_s_geomean"
"""The Optuna objective: geometric mean over the measured (workload, concurrency) levels of the
median output throughput (see :func:`autotune.evidence.objectives.objective_value`)."""

GOODPUT_METRIC = "goodput_req_s_geomean"
"""The Optuna objective under ``objective: goodput`` (see
:func:`autotune.evidence.objectives.goodput_value`)."""


def metric_name(spec: StudySpec) -> str:
    """The name of the study's objective in its Optuna study."""
    return GOODPUT_METRIC if spec.objective == "goodput" else METRIC


def objective_unit(spec: StudySpec) -> str:
    """The unit of the study's trial value, as progress lines print it."""
    return "good req/s" if spec.objective == "goodput" else "tok/s"
