"""Plain frozen records the store's queries return (never live ORM rows), and the typed inputs
of its writes (:class:`NewRecommendation`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from autotune.engine._base import Measurement


@dataclass(frozen=True)
class StudyRecord:
    id: int
    name: str
    description: str
    model_alias: str | None
    model: str
    source: str
    resolved_json: str
    optuna_study_name: str
    status: str
    created_at: datetime
    updated_at: datetime
    num_trials: int = 0
    num_failed: int = 0
    num_measurements: int = 0


MEASURED_STATES = ("complete", "cancelled")
"""Trial states whose measurements count: ``cancelled`` is a trial the search stopped early
because the evidence ruled its config out (its reason in ``failure_reason``)."""

FINISHED_STATES = (*MEASURED_STATES, "failed")
"""Trial states that are never run again."""


@dataclass(frozen=True)
class TrialRecord:
    id: int
    study_id: int
    number: int
    optuna_trial_number: int | None
    config_key: str
    method: str
    draft: str | None
    num_speculative_tokens: int
    method_params: dict[str, Any]
    speculative_config: dict[str, Any] | None
    engine_args: dict[str, Any]
    env: dict[str, str]
    tensor_parallel_size: int
    state: str
    failure_reason: str | None
    engine_start_s: float | None
    engine_seconds: float | None
    vllm_version: str | None
    device_name: str | None
    device_arch: str | None
    platform: str | None
    started_at: datetime
    finished_at: datetime | None
    ray_node_id: str | None = None
    device_ids: str | None = None
    engine_started_at: float | None = None
    purpose: str | None = None
    """Why the config ran again: "drift", "confirm" (:mod:`autotune.search.confirm`); None: its
    search run (or stored before schema 6)."""


@dataclass(frozen=True, kw_only=True)
class MeasurementRecord(Measurement):
    """A stored measurement: the engine's :class:`~autotune.engine.Measurement` (every metric,
    declared once there) with what the store adds: its ids, the config it measured and the
    engine's provenance."""

    id: int
    trial_id: int
    study: str
    model: str
    method: str
    draft: str | None
    num_speculative_tokens: int
    speculative_config: dict[str, Any] | None
    engine_start_s: float | None
    vllm_version: str
    device_name: str
    device_arch: str
    engine_args: dict[str, Any]
    env: dict[str, str]
    created_at: datetime
    ray_node_id: str | None = None
    """The Ray node the engine ran on (None outside Ray, or stored before schema 3)."""
    device_ids: str | None = None
    """The accelerator ids the engine held, comma-separated ("" on the CPU)."""
    purpose: str | None = None
    """Its trial's purpose (:attr:`TrialRecord.purpose`): "confirm" tags a confirmation start."""
    tensor_parallel_size: int = 1
    """The engine's tensor-parallel size (its trial's), so a report's serve line is the
    measured one."""


@dataclass(frozen=True)
class RecommendationRecord:
    id: int
    study: str
    model: str
    model_alias: str | None
    workload: str
    workload_digest: str
    concurrency: int
    trial_id: int | None
    speculative_config: dict[str, Any] | None
    output_throughput_tok_s: float
    baseline_tok_s: float | None
    speedup: float | None
    source: str
    created_at: datetime


@dataclass(frozen=True)
class NewRecommendation:
    """One recommendation to store (``Store.replace_recommendations``): the chosen config of a
    (workload, concurrency) cell of the study, ``speculative_config`` None for "off"."""

    workload: str
    workload_digest: str
    concurrency: int
    output_throughput_tok_s: float
    trial_id: int | None = None
    speculative_config: Mapping[str, Any] | None = None
    baseline_tok_s: float | None = None
    speedup: float | None = None
