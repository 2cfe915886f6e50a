"""The store's repositories: studies, trials, measurements, recommendations and verifications.

Every write is a SQLAlchemy Core statement on the table, run on the write's connection (a
driver's through the lease fence, :meth:`LeaseRepository._driver_write`); every query returns
frozen records (``autotune.store.records``), never live ORM rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, func, insert, select, update
from sqlalchemy.engine import CursorResult, RowMapping
from sqlalchemy.orm import Session

from autotune.engine._base import EngineConfig, EngineInfo, Measurement
from autotune.errors import NotFoundError, SpecError, StoreError
from autotune.store.connection import _dialect, db_now, retried_call
from autotune.store.landed import landed_study, landed_verification
from autotune.store.leases import LeaseRepository
from autotune.store.records import (
    FINISHED_STATES,
    MEASURED_STATES,
    MeasurementRecord,
    NewRecommendation,
    RecommendationRecord,
    StudyRecord,
    TrialRecord,
)
from autotune.store.tables import (
    LeaseRow,
    MeasurementRow,
    RecommendationRow,
    StudyRow,
    TrialRow,
    VerificationRow,
    utcnow,
)


class Repositories(LeaseRepository):
    """The store's queries and writes of studies, trials, measurements, recommendations and
    verifications (:class:`autotune.store.Store` is one)."""

    # --- studies ----------------------------------------------------------------------------

    def create_study(
        self,
        *,
        name: str,
        description: str,
        model_alias: str | None,
        model: str,
        source: str,
        resolved_json: str,
        replace: bool = False,
    ) -> StudyRecord:
        """Insert a study; a duplicate name is a SpecError unless ``replace``."""
        try:
            with self.session() as s:
                conn = s.connection()
                existing = conn.execute(select(_STUDY.c.id).where(_STUDY.c.name == name)).scalar()
                values = {
                    "name": name,
                    "description": description,
                    "model_alias": model_alias,
                    "model": model,
                    "source": source,
                    "resolved_json": resolved_json,
                    "optuna_study_name": f"autotune:{name}",
                }
                if existing is not None:
                    if retried_call() and (mine := landed_study(conn, existing, values)):
                        return self._study_record(s, mine)  # the first attempt landed
                    if not replace:
                        raise SpecError(
                            f"study {name!r} already exists (use --replace, or `autotune study "
                            "delete`)",
                            source=source,
                            field="name",
                        )
                    conn.execute(delete(_STUDY).where(_STUDY.c.id == existing))
                inserted = conn.execute(insert(_STUDY), values)
                # The row as written, its defaults (status, times) included: no read back.
                written = cast(Mapping[str, Any], inserted.last_inserted_params())
                row = {**written, "id": _new_id(inserted)}
                return self._study_record(s, row)
        except StoreError as exc:
            if "UNIQUE" in str(exc).upper():  # a concurrent create won the race
                raise SpecError(
                    f"study {name!r} already exists", source=source, field="name"
                ) from None
            raise

    def get_study(self, name: str) -> StudyRecord:
        if not self.exists():
            raise NotFoundError(f"no study named {name!r} (the store {self.shown_url} is empty)")
        with self.session() as s:
            query = select(_STUDY).where(_STUDY.c.name == name)
            row = s.connection().execute(query).mappings().first()
            if row is None:
                raise NotFoundError(f"no study named {name!r} in {self.shown_url}")
            return self._study_record(s, row)

    def list_studies(self) -> list[StudyRecord]:
        if not self.exists():
            return []
        with self.session() as s:
            query = select(_STUDY).order_by(_STUDY.c.created_at)
            rows = s.connection().execute(query).mappings().all()
            return [self._study_record(s, r) for r in rows]

    def delete_study(self, name: str) -> None:
        record = self.get_study(name)
        with self.session() as s:  # its trials, measurements, ... go by ON DELETE CASCADE
            s.connection().execute(delete(_STUDY).where(_STUDY.c.id == record.id))

    def set_study_status(self, name: str, status: str) -> None:
        with self._driver_write() as s:
            done = s.connection().execute(
                update(_STUDY)
                .where(_STUDY.c.name == name)
                .values(status=status, updated_at=utcnow())
            )
            if done.rowcount != 1:
                raise NotFoundError(f"no study named {name!r}")

    def _study_record(self, s: Session, row: Mapping[Any, Any]) -> StudyRecord:
        """A study's row (its columns by name) as a record, with its counts and live status."""
        counts = s.execute(
            select(TrialRow.state, func.count())
            .where(TrialRow.study_id == row["id"])
            .group_by(TrialRow.state)
        ).all()
        by_state = {state: n for state, n in counts}
        n_meas = (
            s.scalar(
                select(func.count(MeasurementRow.id))
                .join(TrialRow)
                .where(TrialRow.study_id == row["id"])
            )
            or 0
        )
        return StudyRecord(
            id=row["id"],
            name=row["name"],
            description=row["description"],
            model_alias=row["model_alias"],
            model=row["model"],
            source=row["source"],
            resolved_json=row["resolved_json"],
            optuna_study_name=row["optuna_study_name"],
            status=_live_status(s, row),
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            num_trials=sum(by_state.values()),
            num_failed=by_state.get("failed", 0),
            num_measurements=n_meas,
        )

    # --- trials and measurements (the tuner is the only writer) ---------------------------

    def start_trial(
        self,
        study: StudyRecord,
        config: EngineConfig,
        optuna_trial_number: int | None,
        purpose: str | None = None,
    ) -> int:
        with self._driver_write() as s:
            if retried_call():  # the first attempt may have landed: its trial is the newest
                landed = (
                    s.connection()
                    .execute(
                        select(_TRIAL.c.id, _TRIAL.c.config_key, _TRIAL.c.purpose, _TRIAL.c.state)
                        .where(_TRIAL.c.study_id == study.id)
                        .order_by(_TRIAL.c.id.desc())
                        .limit(1)
                    )
                    .first()
                )
                mine = (config.key(), purpose, "running")
                if landed is not None and tuple(landed[1:]) == mine:
                    return int(landed[0])
            number = (
                s.scalar(select(func.count(TrialRow.id)).where(TrialRow.study_id == study.id)) or 0
            )
            inserted = s.connection().execute(
                insert(_TRIAL),
                {
                    "study_id": study.id,
                    "number": number,
                    "optuna_trial_number": optuna_trial_number,
                    "config_key": config.key(),
                    "method": config.method,
                    "draft": config.draft,
                    "num_speculative_tokens": config.num_speculative_tokens,
                    "method_params": dict(config.method_params),
                    "speculative_config": config.speculative_config(),
                    "engine_args": dict(config.engine_args),
                    "env": dict(config.env),
                    "tensor_parallel_size": config.tensor_parallel_size,
                    "state": "running",
                    "purpose": purpose,
                },
            )
            return _new_id(inserted)

    def record_engine(self, trial_id: int, info: EngineInfo) -> None:
        with self._driver_write() as s:
            _update_trial(
                s,
                trial_id,
                engine_start_s=info.engine_start_s,
                vllm_version=info.vllm_version,
                device_name=info.device_name,
                device_arch=info.device_arch,
                platform=info.platform,
                ray_node_id=info.ray_node_id or None,
                device_ids=info.device_ids,
                engine_started_at=info.engine_started_at or None,
            )

    def add_measurement(
        self, trial_id: int, m: Measurement, info: EngineInfo, config: EngineConfig
    ) -> MeasurementRecord:
        """Store one measurement; returns it as :meth:`measurements` will read it (read back
        in the same transaction), so the tuner need not read it again. A retry (the first attempt
        failed transiently) first looks for the trial's row of the cell (workload, prompt set,
        concurrency, repeat): a first attempt whose commit landed, its acknowledgement lost,
        is returned, not stored twice; another value there is a StoreError."""
        with self._driver_write() as s:
            conn = s.connection()
            if retried_call():  # the first attempt may have landed: the cell is stored once
                cell = {f: getattr(m, f) for f in ("workload", "workload_digest", "concurrency")}
                cell |= {"trial_id": trial_id, "repeat": m.repeat}
                stored = conn.execute(_MEASUREMENT_OF_CELL, cell).mappings().first()
                if stored is not None:
                    if stored["output_throughput_tok_s"] != m.output_throughput_tok_s:
                        raise StoreError(
                            f"trial {trial_id} already has another measurement of {m.workload} "
                            f"at concurrency {m.concurrency}, repeat {m.repeat}"
                        )
                    return _measurement_record(stored)
            inserted = conn.execute(
                _INSERT_MEASUREMENT,
                {
                    "trial_id": trial_id,
                    **observed(m),
                    "mean_acceptance_length": m.mean_acceptance_length,
                    "vllm_version": info.vllm_version,
                    "device_name": info.device_name,
                    "device_arch": info.device_arch,
                    "ray_node_id": info.ray_node_id or None,
                    "device_ids": info.device_ids,
                    "engine_args": dict(config.engine_args),
                    "env": dict(config.env),
                },
            )
            new_id = {"measurement_id": _new_id(inserted)}
            return _measurement_record(conn.execute(_MEASUREMENT_BY_ID, new_id).mappings().one())

    def finish_trial(
        self,
        trial_id: int,
        *,
        state: str,
        engine_seconds: float,
        failure_reason: str | None = None,
    ) -> None:
        if state not in FINISHED_STATES:
            raise ValueError(f"bad trial state {state!r}")
        with self._driver_write() as s:
            _update_trial(
                s,
                trial_id,
                state=state,
                failure_reason=failure_reason,
                engine_seconds=engine_seconds,
                finished_at=utcnow(),
            )

    def abandon_running_trials(self, study: StudyRecord) -> int:
        """Mark trials left ``running`` by a driver that died or lost its lease as
        ``interrupted`` (their engines are gone). Their measurements stay: a resume reopens
        the trial (:meth:`reopen_trial`) and measures only the cells it is missing."""
        with self._driver_write() as s:
            done = s.connection().execute(
                update(_TRIAL)
                .where(_TRIAL.c.study_id == study.id, _TRIAL.c.state == "running")
                .values(
                    state="interrupted",
                    failure_reason="the driver stopped before the trial finished",
                    finished_at=utcnow(),
                )
            )
            return int(done.rowcount)

    def reopen_trial(self, trial_id: int, optuna_trial_number: int | None) -> None:
        """Run an interrupted trial again: ``running`` once more, its measured cells kept."""
        with self._driver_write() as s:
            done = s.connection().execute(
                update(_TRIAL)
                .where(_TRIAL.c.id == trial_id, _TRIAL.c.state == "interrupted")
                .values(
                    state="running",
                    failure_reason=None,
                    finished_at=None,
                    optuna_trial_number=optuna_trial_number,
                )
            )
            if done.rowcount != 1:
                raise NotFoundError(f"no interrupted trial {trial_id}")

    def trial_measurements(self, trial_id: int) -> list[MeasurementRecord]:
        """One trial's stored measurements, whatever its state (an interrupted trial's too)."""
        with self.session() as s:
            q = _MEASUREMENTS_READ.where(_MEASUREMENT.c.trial_id == trial_id).order_by(
                _MEASUREMENT.c.id
            )
            return [_measurement_record(r) for r in s.connection().execute(q).mappings()]

    def trials(self, study: StudyRecord) -> list[TrialRecord]:
        with self.session() as s:
            rows = s.scalars(
                select(TrialRow).where(TrialRow.study_id == study.id).order_by(TrialRow.number)
            ).all()
            return [_trial_record(r) for r in rows]

    def measurements(
        self,
        *,
        study: str | None = None,
        model: str | None = None,
        workload: str | None = None,
        concurrency: int | None = None,
    ) -> list[MeasurementRecord]:
        """Measurements of completed trials, filtered; ``model`` matches the alias or the id."""
        if not self.exists():
            return []
        with self.session() as s:
            q = _MEASUREMENTS_READ.where(_TRIAL.c.state.in_(MEASURED_STATES))
            if study is not None:
                q = q.where(_STUDY.c.name == study)
            if model is not None:
                q = q.where((_STUDY.c.model_alias == model) | (_STUDY.c.model == model))
            if workload is not None:
                q = q.where(_MEASUREMENT.c.workload == workload)
            if concurrency is not None:
                q = q.where(_MEASUREMENT.c.concurrency == concurrency)
            q = q.order_by(_MEASUREMENT.c.id)
            return [_measurement_record(r) for r in s.connection().execute(q).mappings()]

    # --- recommendations --------------------------------------------------------------------

    def replace_recommendations(
        self, study: StudyRecord, items: Sequence[NewRecommendation]
    ) -> int:
        """Store a study's recommendations, replacing the ones a previous run stored (one
        transaction: readers see the old set or the new one, never both)."""
        rows = [
            {
                "study_id": study.id,
                "model": study.model,
                "model_alias": study.model_alias,
                "workload": item.workload,
                "workload_digest": item.workload_digest,
                "concurrency": item.concurrency,
                "trial_id": item.trial_id,
                "speculative_config": (
                    dict(item.speculative_config) if item.speculative_config else None
                ),
                "output_throughput_tok_s": item.output_throughput_tok_s,
                "baseline_tok_s": item.baseline_tok_s,
                "speedup": item.speedup,
            }
            for item in items
        ]
        with self._driver_write() as s:
            conn = s.connection()
            conn.execute(delete(_RECOMMENDATION).where(_RECOMMENDATION.c.study_id == study.id))
            if rows:
                conn.execute(insert(_RECOMMENDATION), rows)
        return len(rows)

    def recommendations(self, study: StudyRecord) -> list[RecommendationRecord]:
        with self.session() as s:
            rows = s.scalars(
                select(RecommendationRow)
                .where(RecommendationRow.study_id == study.id)
                .order_by(RecommendationRow.id)
            ).all()
            return [
                RecommendationRecord(
                    id=r.id,
                    study=study.name,
                    model=r.model,
                    model_alias=r.model_alias,
                    workload=r.workload,
                    workload_digest=r.workload_digest,
                    concurrency=r.concurrency,
                    trial_id=r.trial_id,
                    speculative_config=r.speculative_config,
                    output_throughput_tok_s=r.output_throughput_tok_s,
                    baseline_tok_s=r.baseline_tok_s,
                    speedup=r.speedup,
                    source=r.source,
                    created_at=r.created_at,
                )
                for r in rows
            ]

    def save_verification(
        self,
        study: StudyRecord,
        *,
        workload: str,
        mode: str,
        passed: bool,
        tolerance: float,
        result: Mapping[str, Any],
        vllm_version: str | None,
    ) -> None:
        """Store one ``autotune verify`` result with its study (once, when a retry finds
        its first attempt stored it)."""
        values = {
            "study_id": study.id,
            "workload": workload,
            "mode": mode,
            "passed": passed,
            "tolerance": tolerance,
            "result": dict(result),
            "vllm_version": vllm_version,
        }
        with self.session() as s:
            if not (retried_call() and landed_verification(s.connection(), values)):
                s.connection().execute(insert(_VERIFICATION), values)

    def verifications(self, study: StudyRecord, workload: str | None = None) -> list[Any]:
        """The study's verifications, oldest first: ``(created_at, result JSON)`` pairs."""
        with self.session() as s:
            query = select(VerificationRow).where(VerificationRow.study_id == study.id)
            if workload is not None:
                query = query.where(VerificationRow.workload == workload)
            rows = s.scalars(query.order_by(VerificationRow.id)).all()
            return [(r.created_at, dict(r.result)) for r in rows]


def _live_status(s: Session, row: Mapping[Any, Any]) -> str:
    """A study left ``running`` by a driver whose lease lapsed (killed, host lost) reads as
    ``interrupted``, not ``running`` forever."""
    if row["status"] != "running":
        return str(row["status"])
    live = s.scalar(
        select(func.count())
        .select_from(LeaseRow)
        .where(LeaseRow.study_name == row["name"], LeaseRow.expires_at >= db_now(_dialect(s)))
    )
    return "running" if live else "interrupted"


def _trial_record(r: TrialRow) -> TrialRecord:
    return TrialRecord(
        id=r.id,
        study_id=r.study_id,
        number=r.number,
        optuna_trial_number=r.optuna_trial_number,
        config_key=r.config_key,
        method=r.method,
        draft=r.draft,
        num_speculative_tokens=r.num_speculative_tokens,
        method_params=dict(r.method_params or {}),
        speculative_config=r.speculative_config,
        engine_args=dict(r.engine_args or {}),
        env=dict(r.env or {}),
        tensor_parallel_size=r.tensor_parallel_size,
        state=r.state,
        failure_reason=r.failure_reason,
        engine_start_s=r.engine_start_s,
        engine_seconds=r.engine_seconds,
        vllm_version=r.vllm_version,
        device_name=r.device_name,
        device_arch=r.device_arch,
        platform=r.platform,
        started_at=r.started_at,
        finished_at=r.finished_at,
        ray_node_id=r.ray_node_id,
        device_ids=r.device_ids,
        engine_started_at=r.engine_started_at,
        purpose=r.purpose,
    )


def observed(m: Measurement) -> dict[str, Any]:
    """A measurement's fields as column values (one list of them: :class:`Measurement`)."""
    values = {f.name: getattr(m, f.name) for f in fields(Measurement)}
    values["accepted_per_pos"] = list(m.accepted_per_pos)
    values["request_latencies_ms"] = [list(r) for r in m.request_latencies_ms] or None
    return values


_MEASUREMENT = cast(Table, MeasurementRow.__table__)
_TRIAL = cast(Table, TrialRow.__table__)
_STUDY = cast(Table, StudyRow.__table__)
_RECOMMENDATION = cast(Table, RecommendationRow.__table__)
_VERIFICATION = cast(Table, VerificationRow.__table__)

_INSERT_MEASUREMENT = insert(_MEASUREMENT)
"""A measurement's INSERT on the table (SQLAlchemy Core): the ORM's unit of work around one new
row was most of a stored measurement's cost, and the tuner stores one per cell."""

_FROM_TRIAL = (
    "method",
    "draft",
    "num_speculative_tokens",
    "speculative_config",
    "engine_start_s",
    "purpose",
    "tensor_parallel_size",
)
"""A measurement record's fields that its trial holds (read as ``trial_NAME``)."""

_OF_MEASUREMENT = (
    "id",
    "trial_id",
    "created_at",
    "vllm_version",
    "device_name",
    "device_arch",
    "ray_node_id",
    "device_ids",
)
"""A measurement record's fields beside the measured ones that its own row holds (the provenance
is the measurement's, not its trial's)."""

_MEASUREMENTS_READ = (
    select(
        *_MEASUREMENT.c,
        _STUDY.c.name.label("study_name"),
        _STUDY.c.model.label("study_model"),
        *(_TRIAL.c[name].label(f"trial_{name}") for name in _FROM_TRIAL),
    )
    .select_from(_MEASUREMENT)
    .join(_TRIAL, _MEASUREMENT.c.trial_id == _TRIAL.c.id)
    .join(_STUDY, _TRIAL.c.study_id == _STUDY.c.id)
)
"""Measurements with their trial's config and their study, as plain rows (Core: the reads of a
study's measurements and the tuner's read-back of each new one skip the ORM's entity loading)."""

_MEASUREMENT_BY_ID = _MEASUREMENTS_READ.where(_MEASUREMENT.c.id == bindparam("measurement_id"))
"""One measurement by id, built once: SQLAlchemy caches its compiled form under a key it computes
once per statement object, and the tuner reads each new measurement back."""

_MEASUREMENT_OF_CELL = _MEASUREMENTS_READ.where(
    *(_MEASUREMENT.c[f] == bindparam(f) for f in ("trial_id", "workload", "workload_digest")),
    *(_MEASUREMENT.c[f] == bindparam(f) for f in ("concurrency", "repeat")),
)
"""A trial's stored measurement of one cell: what a retried write whose commit landed finds."""


def _new_id(inserted: CursorResult[Any]) -> int:
    """The primary key of the row a Core INSERT wrote."""
    key = inserted.inserted_primary_key
    if key is None or key[0] is None:
        raise StoreError("the database returned no id for the new row")
    return int(key[0])


def _update_trial(s: Session, trial_id: int, **values: Any) -> None:
    """Set columns of one trial (a Core UPDATE on the write's connection); NotFoundError when
    there is no such trial."""
    done = s.connection().execute(update(_TRIAL).where(_TRIAL.c.id == trial_id).values(**values))
    if done.rowcount != 1:
        raise NotFoundError(f"no trial {trial_id}")


def _measurement_record(r: RowMapping) -> MeasurementRecord:
    """A row of :data:`_MEASUREMENTS_READ` as a record: provenance from the measurement, the
    config from its trial."""
    values = {f.name: r[f.name] for f in fields(Measurement)}
    values["accepted_per_pos"] = tuple(r["accepted_per_pos"] or ())
    values["request_latencies_ms"] = tuple((x[0], x[1]) for x in (r["request_latencies_ms"] or ()))
    return MeasurementRecord(
        **values,
        **{name: r[name] for name in _OF_MEASUREMENT},
        **{name: r[f"trial_{name}"] for name in _FROM_TRIAL},
        study=r["study_name"],
        model=r["study_model"],
        engine_args=dict(r["engine_args"] or {}),
        env=dict(r["env"] or {}),
    )
