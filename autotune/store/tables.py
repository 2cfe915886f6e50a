"""SQLAlchemy tables of the study store. Every table is prefixed ``autotune_`` because the same
database also holds Optuna's own tables (``studies``, ``trials``, ...)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class MetaRow(Base):
    """Key/value facts about the database itself (the schema version)."""

    __tablename__ = "autotune_meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(256))


class StudyRow(Base):
    __tablename__ = "autotune_studies"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    model_alias: Mapped[str | None] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(512))
    source: Mapped[str] = mapped_column(String(1024), default="")
    resolved_json: Mapped[str] = mapped_column(Text)
    optuna_study_name: Mapped[str] = mapped_column(String(256))
    status: Mapped[str] = mapped_column(String(32), default="created")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    trials: Mapped[list[TrialRow]] = relationship(
        back_populates="study", cascade="all, delete-orphan", passive_deletes=True
    )


class TrialRow(Base):
    """One engine config, measured on one engine (or failed with a reason)."""

    __tablename__ = "autotune_trials"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("autotune_studies.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    optuna_trial_number: Mapped[int | None] = mapped_column(Integer)
    config_key: Mapped[str] = mapped_column(String(32))
    method: Mapped[str] = mapped_column(String(32))
    draft: Mapped[str | None] = mapped_column(String(512))
    num_speculative_tokens: Mapped[int] = mapped_column(Integer)
    method_params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    speculative_config: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    engine_args: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    env: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    tensor_parallel_size: Mapped[int] = mapped_column(Integer, default=1)
    state: Mapped[str] = mapped_column(String(16), default="running")
    failure_reason: Mapped[str | None] = mapped_column(Text)
    engine_start_s: Mapped[float | None] = mapped_column(Float)
    engine_seconds: Mapped[float | None] = mapped_column(Float)
    vllm_version: Mapped[str | None] = mapped_column(String(64))
    device_name: Mapped[str | None] = mapped_column(String(256))
    device_arch: Mapped[str | None] = mapped_column(String(64))
    platform: Mapped[str | None] = mapped_column(String(16))
    # Where the engine ran (schema 2): Ray node, the device ids it held, when it started.
    ray_node_id: Mapped[str | None] = mapped_column(String(64))
    device_ids: Mapped[str | None] = mapped_column(String(256))
    engine_started_at: Mapped[float | None] = mapped_column(Float)
    # Why the engine ran again (schema 6): "drift" (the drift check's second baseline),
    # "confirm" (a confirmation start, autotune.search.confirm); NULL: the config's search run.
    purpose: Mapped[str | None] = mapped_column(String(16))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    study: Mapped[StudyRow] = relationship(back_populates="trials")
    measurements: Mapped[list[MeasurementRow]] = relationship(
        back_populates="trial", cascade="all, delete-orphan", passive_deletes=True
    )

    __table_args__ = (Index("ix_autotune_trials_study_key", "study_id", "config_key"),)


class MeasurementRow(Base):
    """One (workload, concurrency, repeat) on a warm engine, with its provenance."""

    __tablename__ = "autotune_measurements"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("autotune_trials.id", ondelete="CASCADE"))
    workload: Mapped[str] = mapped_column(String(128))
    workload_digest: Mapped[str] = mapped_column(String(64))
    concurrency: Mapped[int] = mapped_column(Integer)
    repeat: Mapped[int] = mapped_column(Integer)
    seed: Mapped[int] = mapped_column(Integer)
    num_requests: Mapped[int] = mapped_column(Integer)
    num_prompt_tokens: Mapped[int] = mapped_column(Integer)
    num_output_tokens: Mapped[int] = mapped_column(Integer)
    measure_s: Mapped[float] = mapped_column(Float)
    output_throughput_tok_s: Mapped[float] = mapped_column(Float)
    request_throughput_req_s: Mapped[float] = mapped_column(Float)
    median_ttft_ms: Mapped[float | None] = mapped_column(Float)
    p99_ttft_ms: Mapped[float | None] = mapped_column(Float)
    median_tpot_ms: Mapped[float | None] = mapped_column(Float)
    p99_tpot_ms: Mapped[float | None] = mapped_column(Float)
    median_itl_ms: Mapped[float | None] = mapped_column(Float)
    p99_itl_ms: Mapped[float | None] = mapped_column(Float)
    num_drafts: Mapped[int] = mapped_column(Integer, default=0)
    num_draft_tokens: Mapped[int] = mapped_column(Integer, default=0)
    num_accepted_tokens: Mapped[int] = mapped_column(Integer, default=0)
    accepted_per_pos: Mapped[list[int]] = mapped_column(JSON, default=list)
    mean_acceptance_length: Mapped[float | None] = mapped_column(Float)
    max_inflight: Mapped[int] = mapped_column(Integer, default=0)
    # Per request [TTFT ms, TPOT ms] (schema 4), so goodput can be recomputed for any SLO.
    request_latencies_ms: Mapped[list[list[float | None]] | None] = mapped_column(JSON)
    # How degenerate the outputs were (schema 5): the guard against outputs that fake acceptance.
    loop_share: Mapped[float | None] = mapped_column(Float)
    distinct_4gram_ratio: Mapped[float | None] = mapped_column(Float)
    loop_at_max_tokens_share: Mapped[float | None] = mapped_column(Float)
    # Provenance: enough to tell whether two numbers may be compared.
    vllm_version: Mapped[str] = mapped_column(String(64))
    device_name: Mapped[str] = mapped_column(String(256))
    device_arch: Mapped[str] = mapped_column(String(64))
    ray_node_id: Mapped[str | None] = mapped_column(String(64))
    device_ids: Mapped[str | None] = mapped_column(String(256))
    engine_args: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    env: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    trial: Mapped[TrialRow] = relationship(back_populates="measurements")

    __table_args__ = (Index("ix_autotune_measurements_trial", "trial_id"),)


class RecommendationRow(Base):
    """The chosen engine config per (study, workload, concurrency); null config = "off"."""

    __tablename__ = "autotune_recommendations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("autotune_studies.id", ondelete="CASCADE"))
    model: Mapped[str] = mapped_column(String(512))
    model_alias: Mapped[str | None] = mapped_column(String(64))
    workload: Mapped[str] = mapped_column(String(128))
    workload_digest: Mapped[str] = mapped_column(String(64))
    concurrency: Mapped[int] = mapped_column(Integer)
    trial_id: Mapped[int | None] = mapped_column(
        ForeignKey("autotune_trials.id", ondelete="SET NULL")
    )
    speculative_config: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    output_throughput_tok_s: Mapped[float] = mapped_column(Float)
    baseline_tok_s: Mapped[float | None] = mapped_column(Float)
    speedup: Mapped[float | None] = mapped_column(Float)
    source: Mapped[str] = mapped_column(String(32), default="measured")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class LeaseRow(Base):
    """Which driver runs a study now: one row per study while a `study run`/`resume` is alive.

    The driver renews ``expires_at`` every few seconds (a heartbeat, as Optuna's RDBStorage does
    for its trials); a row past ``expires_at`` belongs to a dead driver and may be taken over.
    """

    __tablename__ = "autotune_leases"

    study_name: Mapped[str] = mapped_column(String(128), primary_key=True)
    token: Mapped[str] = mapped_column(String(64))
    pid: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(256))
    acquired_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Who holds it beyond host and PID (schema 8): a random id per driver process, its PID
    # namespace and the kernel's boot id, so two containers with one hostname never read as one
    # driver; and a counter every renewal and fenced write bumps (SQLite's clock is each
    # client's own, so a takeover there also waits to see the counter stand still).
    driver_id: Mapped[str | None] = mapped_column(String(64))
    pid_ns: Mapped[str | None] = mapped_column(String(64))
    boot_id: Mapped[str | None] = mapped_column(String(64))
    beat: Mapped[int] = mapped_column(Integer, default=0)


class VerificationRow(Base):
    """A recommendation checked through ``vllm serve`` + ``vllm bench serve`` (``autotune
    verify``): the per-level comparison with the study's numbers, as JSON."""

    __tablename__ = "autotune_verifications"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("autotune_studies.id", ondelete="CASCADE"))
    workload: Mapped[str] = mapped_column(String(128))
    mode: Mapped[str] = mapped_column(String(16))
    passed: Mapped[bool] = mapped_column(Boolean)
    tolerance: Mapped[float] = mapped_column(Float)
    result: Mapped[dict[str, Any]] = mapped_column(JSON)
    vllm_version: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
