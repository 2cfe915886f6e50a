"""The study store: one write path (a scoped session) and queries that return frozen records.

SQLite by default (``studies/autotune.db``, WAL mode, busy timeout); any SQLAlchemy URL works
(PostgreSQL for several drivers). The same database is the Optuna storage of every study.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from autotune.engine._base import EngineConfig, EngineInfo, Measurement
from autotune.errors import NotFoundError, SpecError, StoreError
from autotune.store.migrations import upgrade
from autotune.store.records import (
    MeasurementRecord,
    RecommendationRecord,
    StudyRecord,
    TrialRecord,
)
from autotune.store.tables import (
    MeasurementRow,
    RecommendationRow,
    StudyRow,
    TrialRow,
    VerificationRow,
    utcnow,
)

DEFAULT_DB = "sqlite:///studies/autotune.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000


def resolve_url(db: str | None = None) -> str:
    """``--db`` / ``AUTOTUNE_DB`` / the default; a bare file path means SQLite."""
    url = db or os.environ.get("AUTOTUNE_DB") or DEFAULT_DB
    if "://" not in url:
        url = f"sqlite:///{url}"
    return url


def _sqlite_path(url: str) -> Path | None:
    parsed = make_url(url)
    if (
        parsed.get_backend_name() != "sqlite"
        or not parsed.database
        or parsed.database == ":memory:"
    ):
        return None
    return Path(parsed.database)


class Store:
    """A handle on the study store at ``url``.

    Read-only use of a SQLite file that does not exist yet creates nothing: queries answer
    empty. The schema is created (or migrated) on the first write.
    """

    def __init__(self, url: str | None = None):
        self.url = resolve_url(url)
        self._engine: Engine | None = None
        self._sessions: sessionmaker[Session] | None = None

    # --- plumbing ---------------------------------------------------------------------------

    def exists(self) -> bool:
        path = _sqlite_path(self.url)
        return path is None or path.exists()

    def _connect(self) -> sessionmaker[Session]:
        if self._sessions is None:
            path = _sqlite_path(self.url)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
            try:
                engine = create_engine(self.url, future=True)
            except (SQLAlchemyError, ImportError) as exc:
                raise StoreError(f"cannot open {self.url}: {exc}") from None
            if engine.dialect.name == "sqlite":
                event.listen(engine, "connect", _sqlite_pragmas)
            try:
                with engine.begin() as conn:
                    upgrade(conn)
            except SQLAlchemyError as exc:
                raise StoreError(f"cannot open {self.url}: {_one_line(exc)}") from None
            self._engine = engine
            self._sessions = sessionmaker(engine, expire_on_commit=False)
        return self._sessions

    @contextmanager
    def session(self) -> Iterator[Session]:
        """The one write path: commit on success, roll back and re-raise as StoreError."""
        sessions = self._connect()
        session = sessions()
        try:
            yield session
            session.commit()
        except SQLAlchemyError as exc:
            session.rollback()
            raise StoreError(_one_line(exc)) from None
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
            self._sessions = None

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
                existing = s.scalar(select(StudyRow).where(StudyRow.name == name))
                if existing is not None:
                    if not replace:
                        raise SpecError(
                            f"study {name!r} already exists (use --replace, or `autotune study "
                            "delete`)",
                            source=source,
                            field="name",
                        )
                    s.delete(existing)
                    s.flush()
                row = StudyRow(
                    name=name,
                    description=description,
                    model_alias=model_alias,
                    model=model,
                    source=source,
                    resolved_json=resolved_json,
                    optuna_study_name=f"autotune:{name}",
                )
                s.add(row)
                s.flush()
                return self._study_record(s, row)
        except StoreError as exc:
            if "UNIQUE" in str(exc).upper():  # a concurrent create won the race
                raise SpecError(
                    f"study {name!r} already exists", source=source, field="name"
                ) from None
            raise

    def get_study(self, name: str) -> StudyRecord:
        if not self.exists():
            raise NotFoundError(f"no study named {name!r} (the store {self.url} is empty)")
        with self.session() as s:
            row = s.scalar(select(StudyRow).where(StudyRow.name == name))
            if row is None:
                raise NotFoundError(f"no study named {name!r} in {self.url}")
            return self._study_record(s, row)

    def list_studies(self) -> list[StudyRecord]:
        if not self.exists():
            return []
        with self.session() as s:
            rows = s.scalars(select(StudyRow).order_by(StudyRow.created_at)).all()
            return [self._study_record(s, r) for r in rows]

    def delete_study(self, name: str) -> None:
        record = self.get_study(name)
        with self.session() as s:
            row = s.get(StudyRow, record.id)
            if row is not None:
                s.delete(row)

    def set_study_status(self, name: str, status: str) -> None:
        with self.session() as s:
            row = s.scalar(select(StudyRow).where(StudyRow.name == name))
            if row is None:
                raise NotFoundError(f"no study named {name!r}")
            row.status = status
            row.updated_at = utcnow()

    def _study_record(self, s: Session, row: StudyRow) -> StudyRecord:
        counts = s.execute(
            select(TrialRow.state, func.count())
            .where(TrialRow.study_id == row.id)
            .group_by(TrialRow.state)
        ).all()
        by_state = {state: n for state, n in counts}
        n_meas = (
            s.scalar(
                select(func.count(MeasurementRow.id))
                .join(TrialRow)
                .where(TrialRow.study_id == row.id)
            )
            or 0
        )
        return StudyRecord(
            id=row.id,
            name=row.name,
            description=row.description,
            model_alias=row.model_alias,
            model=row.model,
            source=row.source,
            resolved_json=row.resolved_json,
            optuna_study_name=row.optuna_study_name,
            status=row.status,
            created_at=row.created_at,
            updated_at=row.updated_at,
            num_trials=sum(by_state.values()),
            num_failed=by_state.get("failed", 0),
            num_measurements=n_meas,
        )

    # --- trials and measurements (the tuner is the only writer) ---------------------------

    def start_trial(
        self, study: StudyRecord, config: EngineConfig, optuna_trial_number: int | None
    ) -> int:
        with self.session() as s:
            number = (
                s.scalar(select(func.count(TrialRow.id)).where(TrialRow.study_id == study.id)) or 0
            )
            row = TrialRow(
                study_id=study.id,
                number=number,
                optuna_trial_number=optuna_trial_number,
                config_key=config.key(),
                method=config.method,
                draft=config.draft,
                num_speculative_tokens=config.num_speculative_tokens,
                method_params=dict(config.method_params),
                speculative_config=config.speculative_config(),
                engine_args=dict(config.engine_args),
                env=dict(config.env),
                tensor_parallel_size=config.tensor_parallel_size,
                state="running",
            )
            s.add(row)
            s.flush()
            return row.id

    def record_engine(self, trial_id: int, info: EngineInfo) -> None:
        with self.session() as s:
            row = s.get(TrialRow, trial_id)
            if row is None:
                raise NotFoundError(f"no trial {trial_id}")
            row.engine_start_s = info.engine_start_s
            row.vllm_version = info.vllm_version
            row.device_name = info.device_name
            row.device_arch = info.device_arch
            row.platform = info.platform

    def add_measurement(
        self, trial_id: int, m: Measurement, info: EngineInfo, config: EngineConfig
    ) -> None:
        with self.session() as s:
            s.add(
                MeasurementRow(
                    trial_id=trial_id,
                    workload=m.workload,
                    workload_digest=m.workload_digest,
                    concurrency=m.concurrency,
                    repeat=m.repeat,
                    seed=m.seed,
                    num_requests=m.num_requests,
                    num_prompt_tokens=m.num_prompt_tokens,
                    num_output_tokens=m.num_output_tokens,
                    measure_s=m.measure_s,
                    output_throughput_tok_s=m.output_throughput_tok_s,
                    request_throughput_req_s=m.request_throughput_req_s,
                    ttft_ms_p50=m.ttft_ms_p50,
                    ttft_ms_p99=m.ttft_ms_p99,
                    tpot_ms_p50=m.tpot_ms_p50,
                    tpot_ms_p99=m.tpot_ms_p99,
                    itl_ms_p50=m.itl_ms_p50,
                    itl_ms_p99=m.itl_ms_p99,
                    num_drafts=m.num_drafts,
                    num_draft_tokens=m.num_draft_tokens,
                    num_accepted_tokens=m.num_accepted_tokens,
                    accepted_per_pos=list(m.accepted_per_pos),
                    mean_acceptance_length=m.mean_acceptance_length,
                    max_inflight=m.max_inflight,
                    vllm_version=info.vllm_version,
                    device_name=info.device_name,
                    device_arch=info.device_arch,
                    engine_args=dict(config.engine_args),
                    env=dict(config.env),
                )
            )

    def finish_trial(
        self,
        trial_id: int,
        *,
        state: str,
        engine_seconds: float,
        failure_reason: str | None = None,
    ) -> None:
        if state not in ("complete", "failed"):
            raise ValueError(f"bad trial state {state!r}")
        with self.session() as s:
            row = s.get(TrialRow, trial_id)
            if row is None:
                raise NotFoundError(f"no trial {trial_id}")
            row.state = state
            row.failure_reason = failure_reason
            row.engine_seconds = engine_seconds
            row.finished_at = utcnow()

    def abandon_running_trials(self, study: StudyRecord) -> int:
        """Mark trials left ``running`` by a killed driver as ``interrupted`` (their engines are
        gone); their partial measurements are removed so a resume measures the config afresh."""
        with self.session() as s:
            rows = s.scalars(
                select(TrialRow).where(TrialRow.study_id == study.id, TrialRow.state == "running")
            ).all()
            for row in rows:
                row.measurements.clear()
                row.state = "interrupted"
                row.failure_reason = "the driver stopped before the trial finished"
                row.finished_at = utcnow()
            return len(rows)

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
            q = (
                select(MeasurementRow, TrialRow, StudyRow)
                .join(TrialRow, MeasurementRow.trial_id == TrialRow.id)
                .join(StudyRow, TrialRow.study_id == StudyRow.id)
                .where(TrialRow.state == "complete")
            )
            if study is not None:
                q = q.where(StudyRow.name == study)
            if model is not None:
                q = q.where((StudyRow.model_alias == model) | (StudyRow.model == model))
            if workload is not None:
                q = q.where(MeasurementRow.workload == workload)
            if concurrency is not None:
                q = q.where(MeasurementRow.concurrency == concurrency)
            q = q.order_by(MeasurementRow.id)
            return [_measurement_record(m, t, st) for m, t, st in s.execute(q).all()]

    # --- recommendations --------------------------------------------------------------------

    def save_recommendation(
        self,
        study: StudyRecord,
        *,
        workload: str,
        workload_digest: str,
        concurrency: int,
        trial_id: int | None,
        speculative_config: Mapping[str, Any] | None,
        output_throughput_tok_s: float,
        baseline_tok_s: float | None,
        speedup: float | None,
    ) -> None:
        with self.session() as s:
            s.add(
                RecommendationRow(
                    study_id=study.id,
                    model=study.model,
                    model_alias=study.model_alias,
                    workload=workload,
                    workload_digest=workload_digest,
                    concurrency=concurrency,
                    trial_id=trial_id,
                    speculative_config=dict(speculative_config) if speculative_config else None,
                    output_throughput_tok_s=output_throughput_tok_s,
                    baseline_tok_s=baseline_tok_s,
                    speedup=speedup,
                )
            )

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
        """Store one ``autotune verify`` result with its study."""
        with self.session() as s:
            s.add(
                VerificationRow(
                    study_id=study.id,
                    workload=workload,
                    mode=mode,
                    passed=passed,
                    tolerance=tolerance,
                    result=dict(result),
                    vllm_version=vllm_version,
                )
            )

    def verifications(self, study: StudyRecord, workload: str | None = None) -> list[Any]:
        """The study's verifications, oldest first: ``(created_at, result JSON)`` pairs."""
        with self.session() as s:
            query = select(VerificationRow).where(VerificationRow.study_id == study.id)
            if workload is not None:
                query = query.where(VerificationRow.workload == workload)
            rows = s.scalars(query.order_by(VerificationRow.id)).all()
            return [(r.created_at, dict(r.result)) for r in rows]


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _one_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


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
    )


def _measurement_record(m: MeasurementRow, t: TrialRow, st: StudyRow) -> MeasurementRecord:
    return MeasurementRecord(
        id=m.id,
        trial_id=t.id,
        study=st.name,
        model=st.model,
        method=t.method,
        draft=t.draft,
        num_speculative_tokens=t.num_speculative_tokens,
        speculative_config=t.speculative_config,
        workload=m.workload,
        workload_digest=m.workload_digest,
        concurrency=m.concurrency,
        repeat=m.repeat,
        seed=m.seed,
        num_requests=m.num_requests,
        num_prompt_tokens=m.num_prompt_tokens,
        num_output_tokens=m.num_output_tokens,
        measure_s=m.measure_s,
        output_throughput_tok_s=m.output_throughput_tok_s,
        request_throughput_req_s=m.request_throughput_req_s,
        ttft_ms_p50=m.ttft_ms_p50,
        ttft_ms_p99=m.ttft_ms_p99,
        tpot_ms_p50=m.tpot_ms_p50,
        tpot_ms_p99=m.tpot_ms_p99,
        itl_ms_p50=m.itl_ms_p50,
        itl_ms_p99=m.itl_ms_p99,
        num_drafts=m.num_drafts,
        num_draft_tokens=m.num_draft_tokens,
        num_accepted_tokens=m.num_accepted_tokens,
        accepted_per_pos=tuple(m.accepted_per_pos or ()),
        mean_acceptance_length=m.mean_acceptance_length,
        max_inflight=m.max_inflight,
        engine_start_s=t.engine_start_s,
        vllm_version=m.vllm_version,
        device_name=m.device_name,
        device_arch=m.device_arch,
        engine_args=dict(m.engine_args or {}),
        env=dict(m.env or {}),
        created_at=m.created_at,
    )
