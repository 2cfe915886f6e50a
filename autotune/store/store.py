"""The study store: one write path (a scoped session) and queries that return frozen records.

SQLite by default (``studies/autotune.db``, WAL mode, busy timeout); any SQLAlchemy URL works
(PostgreSQL for several drivers). The same database is the Optuna storage of every study.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

from sqlalchemy import (
    DateTime,
    Engine,
    String,
    Table,
    Update,
    bindparam,
    create_engine,
    delete,
    event,
    func,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.engine import CursorResult, RowMapping, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql.elements import ColumnElement

from autotune import DEFAULT_DB as DEFAULT_DB
from autotune.engine._base import EngineConfig, EngineInfo, Measurement
from autotune.errors import (
    CorruptStoreError,
    LeaseLostError,
    NotFoundError,
    SpecError,
    StoreError,
    StudyBusyError,
)
from autotune.store import migrations
from autotune.store.migrations import current_version, upgrade
from autotune.store.records import (
    FINISHED_STATES,
    MEASURED_STATES,
    MeasurementRecord,
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
from autotune.store.urls import masked_url, scrub

SQLITE_BUSY_TIMEOUT_MS = 30_000

STORE_RETRY_S = 60.0
"""How long a transient loss of the store (a PostgreSQL restart, a SQLite file locked past its
busy timeout) is retried, with back-off, before the run gives up in one line; the environment's
``AUTOTUNE_STORE_RETRY_S`` sets another bound (0: no retry)."""

_TRANSIENT = (
    "database is locked",
    "server closed the connection",
    "connection refused",
    "terminating connection",
    "could not connect",
    "connection is closed",
    "the database system is",
    "consuming input failed",
    "connection timed out",
    "no connection to the server",
    "connection reset",
    "connection not open",
    "closed the connection unexpectedly",
    "server conn crashed",
)
"""What a database driver says when the server went away for a while or a lock is held: worth
another try. Anything else (a refused login, a database that accepts no connections, a full
disk, a constraint) fails at once."""


def _is_transient(exc: BaseException | None) -> bool:
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    said = str(getattr(exc, "orig", None) or exc).lower()
    return any(t in said for t in _TRANSIENT)


class _TransientStoreError(StoreError):
    """A store operation failed for a reason that may pass (see :func:`_is_transient`)."""


def store_retry_s() -> float:
    """The retry bound: ``AUTOTUNE_STORE_RETRY_S`` or :data:`STORE_RETRY_S`."""
    raw = os.environ.get("AUTOTUNE_STORE_RETRY_S", "")
    try:
        value = float(raw) if raw.strip() else STORE_RETRY_S
    except ValueError:
        raise SpecError(
            f"not a number of seconds: {raw[:40]!r}", source="AUTOTUNE_STORE_RETRY_S"
        ) from None
    if not math.isfinite(value) or not 0 <= value <= 3600:
        raise SpecError("must be between 0 and 3600 seconds", source="AUTOTUNE_STORE_RETRY_S")
    return value


_RETRYING = threading.local()
"""Set while a retried call runs in this thread: the calls inside it do not retry again."""


def _with_retry(
    call: Callable[[], Any], shown_url: str, transient: Callable[[Exception], bool]
) -> Any:
    """Run ``call``, again with back-off (0.1 s doubling to 2 s) while it fails transiently,
    for :func:`store_retry_s` at most; then a StoreError in one line."""
    if getattr(_RETRYING, "active", False):
        return call()
    bound = store_retry_s()
    deadline = time.monotonic() + bound
    delay = 0.1
    _RETRYING.active = True
    try:
        while True:
            try:
                return call()
            except Exception as exc:
                if not transient(exc):
                    raise
                if time.monotonic() + delay > deadline:
                    raise StoreError(
                        f"the store {shown_url} stayed unreachable for {bound:g} s "
                        f"({_one_line(exc)[:200]}); gave up (AUTOTUNE_STORE_RETRY_S sets how long "
                        "to retry)"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
    finally:
        _RETRYING.active = False


def _retried(method: Callable[..., Any]) -> Callable[..., Any]:
    """A Store method whose transaction is run again while the store is transiently lost."""

    @functools.wraps(method)
    def wrapper(self: Store, *args: Any, **kwargs: Any) -> Any:
        return _with_retry(
            lambda: method(self, *args, **kwargs),
            self.shown_url,
            lambda exc: isinstance(exc, _TransientStoreError),
        )

    return wrapper


LEASE_LOCK_WAIT_MS = 3_000
"""How long a lease write waits for SQLite's write lock before saying who holds it."""


LEASE_TTL_S = 60.0
"""A driver's lease on its study lapses this long after its last heartbeat."""

MAX_LEASE_TTL_S = 7 * 24 * 3600.0
"""The longest lease TTL (a week): a driver that dies holds its study this long at most."""


def check_lease_ttl(ttl_s: float) -> None:
    """A lease TTL is a finite number of seconds in (0, a week]; SpecError naming the flag."""
    if (
        isinstance(ttl_s, bool)
        or not isinstance(ttl_s, int | float)
        or not math.isfinite(ttl_s)
        or not 0 < ttl_s <= MAX_LEASE_TTL_S
    ):
        raise SpecError(
            f"must be a number of seconds > 0 and <= {MAX_LEASE_TTL_S:.0f}, not {ttl_s!r}",
            source="--lease-ttl",
        )


def db_now(dialect: str, offset_s: float = 0.0) -> ColumnElement[Any]:
    """The database's clock (+ ``offset_s``) as a SQL expression, for every lease time.

    PostgreSQL: ``statement_timestamp()``. SQLite: its own ``'now'``, written the way
    SQLAlchemy stores a DateTime there (``YYYY-MM-DD HH:MM:SS.ffffff``, UTC), so comparisons
    with stored times are string comparisons of one format."""
    if dialect == "sqlite":
        return func.strftime(
            "%Y-%m-%d %H:%M:%f", "now", f"{offset_s:+.3f} seconds", type_=String
        ).concat("000")
    now = (
        func.statement_timestamp(type_=DateTime(timezone=True))
        if dialect == "postgresql"
        else func.now(type_=DateTime(timezone=True))
    )
    return now + timedelta(seconds=offset_s) if offset_s else now


def _dialect(s: Session) -> str:
    return s.get_bind().dialect.name


def _fence_statement(conn: Session | Any, lease: Lease) -> bool:
    """The fence: touch the lease's heartbeat if the token is still ours, in the caller's
    transaction (on PostgreSQL the row stays locked until it commits, so a takeover waits for
    it; on SQLite the UPDATE takes the database's write lock). False: another driver took the
    lease over, and the caller must write nothing."""
    if isinstance(conn, Session):
        conn = conn.connection()
    dialect = conn.dialect.name
    if dialect == "postgresql":
        # A driver suspended inside this transaction must not hold the lease row (and with it
        # every takeover) for much longer than its TTL: the server ends its session then (not
        # under 10 s, so a loaded client is not cut off between two statements of one write).
        conn.execute(
            text("SELECT set_config('idle_in_transaction_session_timeout', :ms, true)"),
            {"ms": str(round(max(lease.ttl_s, 10.0) * 1000))},
        )
    res = conn.execute(
        _touch_lease(dialect), {"lease_study": lease.study, "lease_token": lease.token}
    )
    return getattr(res, "rowcount", 0) == 1


@functools.cache
def _touch_lease(dialect: str) -> Update:
    """The fence's UPDATE (it counts a heartbeat), built once per dialect (it runs before every write a driver makes;
    building it anew each time was a third of its cost); the lease comes as parameters. On the
    table (Core), not the ORM class: the ORM's bulk UPDATE would also look for the lease row in
    the session to synchronize it, which nothing here needs."""
    lease = cast(Table, LeaseRow.__table__)
    return (
        update(lease)
        .where(
            lease.c.study_name == bindparam("lease_study"),
            lease.c.token == bindparam("lease_token"),
        )
        .values(beat=lease.c.beat + 1)
    )


def _is_write(statement: str) -> bool:
    head = statement.lstrip()[:7].upper()
    return head.startswith(("INSERT", "UPDATE", "DELETE"))


def _lost_message(lease: Lease) -> str:
    return (
        f"this driver lost the lease on study {lease.study!r} (no heartbeat for "
        f"{lease.ttl_s:g} s: suspended or cut off from the database) and another driver took it "
        "over; it stopped and wrote nothing after that (see `autotune study show "
        f"{lease.study}`)"
    )


_PG_SCHEMA_LOCK = 0x6175746F  # "auto": the advisory-lock key that serializes schema creation


def resolve_url(db: str | None = None) -> str:
    """``--db`` / ``AUTOTUNE_DB`` / the default; a bare file path means SQLite.

    An empty or unparsable value is a SpecError naming ``--db``, never the default in disguise.
    """
    if db is None:
        db = os.environ.get("AUTOTUNE_DB") or DEFAULT_DB
    if not db.strip() or "\x00" in db or len(db) > 4096:
        raise SpecError("empty or invalid store URL", source="--db")
    url = db if "://" in db else f"sqlite:///{db}"
    try:
        make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise SpecError(f"not a database URL: {scrub(str(exc), db, url)}", source="--db") from None
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
        self.shown_url = masked_url(self.url)
        """The URL as every message prints it: the password masked."""
        self._engine: Engine | None = None
        self._sessions: sessionmaker[Session] | None = None
        self._keepers: dict[str, _LeaseKeeper] = {}
        self._fence: Lease | None = None
        """The lease every driver write checks in its own transaction (``Store.lease``)."""
        self._optuna_ready = False
        """Optuna's tables were found or created (:meth:`ensure_optuna_schema`)."""

    # --- plumbing ---------------------------------------------------------------------------

    def exists(self) -> bool:
        path = _sqlite_path(self.url)
        return path is None or path.exists()

    def _connect(self) -> sessionmaker[Session]:
        if self._sessions is None:
            path = _sqlite_path(self.url)
            if path is not None:
                check_sqlite_file(path)
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise SpecError(
                        f"cannot create the store's folder {path.parent}: {exc.strerror or exc}",
                        source="--db",
                    ) from None
            try:
                # A server restarted under a running driver leaves the pool's connections dead:
                # each is checked before use (SQLite files have no server to lose).
                engine = create_engine(self.url, pool_pre_ping=path is None)
            except (SQLAlchemyError, ImportError, ValueError, TypeError) as exc:
                raise SpecError(
                    f"cannot open {self.shown_url}: {self._one_line(exc)}", source="--db"
                ) from None
            if engine.dialect.name == "sqlite":
                event.listen(engine, "connect", _sqlite_pragmas)
            try:
                if not _schema_current(engine):
                    with schema_lock(engine, path), engine.begin() as conn:
                        upgrade(conn)
            except SQLAlchemyError as exc:
                engine.dispose()
                raise SpecError(
                    f"cannot open {self.shown_url}: {self._one_line(exc)}", source="--db"
                ) from None
            except OSError as exc:
                engine.dispose()
                raise SpecError(
                    f"cannot open {self.shown_url}: {scrub(str(exc.strerror or exc), self.url)}",
                    source="--db",
                ) from None
            self._engine = engine
            self._sessions = sessionmaker(engine, expire_on_commit=False)
        return self._sessions

    def optuna_storage(self, **kwargs: Any) -> Any:
        """Optuna's ``RDBStorage`` on this store, its tables created first under the schema lock
        (Optuna creates them on first use, and N drivers doing that at once collide: ``table
        studies already exists``, ``UNIQUE constraint failed: alembic_version``)."""
        import optuna

        if self.url.startswith("sqlite"):
            kwargs.setdefault("engine_kwargs", {"connect_args": {"timeout": 30}})
        else:
            kwargs.setdefault("engine_kwargs", {"pool_pre_ping": True})
        self.ensure_optuna_schema()
        kwargs.setdefault("skip_table_creation", True)  # they exist: just ensured
        storage = _optuna_rdb(optuna, self.url, **kwargs)
        self._fence_engine(storage.engine)
        return storage

    def _fence_engine(self, engine: Engine) -> None:
        """Fence the writes of another engine on this store (Optuna's): the first write
        statement of each of its transactions is preceded, on the same connection and so in
        the same transaction, by the lease check of :meth:`_check_fence`."""
        flag = "autotune_fenced"

        def before_write(
            conn: Any, _cursor: Any, statement: str, _params: Any, _ctx: Any, _many: bool
        ) -> None:
            lease = self._fence
            if lease is None or conn.info.get(flag) or not _is_write(statement):
                return
            conn.info[flag] = True  # before the check: it is a write itself
            if not _fence_statement(conn, lease):
                self._lost(lease)

        def reset(conn: Any) -> None:
            conn.info.pop(flag, None)

        event.listen(engine, "before_cursor_execute", before_write)
        event.listen(engine, "commit", reset)
        event.listen(engine, "rollback", reset)

    def ensure_optuna_schema(self) -> None:
        """Create Optuna's tables unless they exist, serialized with every other creator."""
        if self._optuna_ready:  # tables once there stay there: checked once per Store
            return
        self._connect()
        assert self._engine is not None
        if not _optuna_schema_current(self._engine):
            import optuna

            kwargs: dict[str, Any] = {}
            if self.url.startswith("sqlite"):
                kwargs["engine_kwargs"] = {"connect_args": {"timeout": 30}}
            with schema_lock(self._engine, _sqlite_path(self.url)):
                try:
                    _create_optuna_schema(optuna, self._engine, self.url, **kwargs)
                except SQLAlchemyError as exc:
                    raise StoreError(
                        f"cannot create Optuna's tables: {self._one_line(exc)}"
                    ) from None
        self._optuna_ready = True

    @contextmanager
    def session(self) -> Iterator[Session]:
        """The one write path: commit on success, roll back and re-raise as StoreError."""
        sessions = self._connect()
        session = sessions()
        try:
            yield session
            session.commit()
        except SQLAlchemyError as exc:
            with contextlib.suppress(SQLAlchemyError):  # a lost connection cannot roll back
                session.rollback()
            if _is_transient(exc):
                raise _TransientStoreError(self._one_line(exc)) from None
            raise StoreError(self._one_line(exc)) from None
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    @contextmanager
    def _driver_write(self) -> Iterator[Session]:
        """A driver's write: :meth:`session`, whose first statement checks the lease the driver
        holds (``Store.lease``), so a driver that lost it writes nothing."""
        with self.session() as s:
            lease = self._fence
            if lease is not None and not _fence_statement(s, lease):
                self._lost(lease)
            yield s

    def _lost(self, lease: Lease) -> None:
        keeper = self._keepers.get(lease.token)
        if keeper is not None:
            keeper.lost = True
        raise LeaseLostError(_lost_message(lease))

    def check_lease(self) -> None:
        """Raise LeaseLostError once the heartbeat thread saw the lease taken over (the tuner
        calls it between steps, so a driver stops within one heartbeat of the loss)."""
        lease = self._fence
        if lease is not None and self.lease_lost(lease):
            raise LeaseLostError(_lost_message(lease))

    def _one_line(self, exc: BaseException) -> str:
        """A database error's first line, its store URL and password masked."""
        return scrub(_one_line(exc), self.url)

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
            raise NotFoundError(f"no study named {name!r} (the store {self.shown_url} is empty)")
        with self.session() as s:
            row = s.scalar(select(StudyRow).where(StudyRow.name == name))
            if row is None:
                raise NotFoundError(f"no study named {name!r} in {self.shown_url}")
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
        with self._driver_write() as s:
            done = s.connection().execute(
                update(_STUDY)
                .where(_STUDY.c.name == name)
                .values(status=status, updated_at=utcnow())
            )
            if done.rowcount != 1:
                raise NotFoundError(f"no study named {name!r}")

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
            status=_live_status(s, row),
            created_at=row.created_at,
            updated_at=row.updated_at,
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
        in the same transaction), so the tuner need not read it again."""
        with self._driver_write() as s:
            conn = s.connection()
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
            rows = s.scalars(
                select(TrialRow).where(TrialRow.study_id == study.id, TrialRow.state == "running")
            ).all()
            for row in rows:
                row.state = "interrupted"
                row.failure_reason = "the driver stopped before the trial finished"
                row.finished_at = utcnow()
            return len(rows)

    def reopen_trial(self, trial_id: int, optuna_trial_number: int | None) -> None:
        """Run an interrupted trial again: ``running`` once more, its measured cells kept."""
        with self._driver_write() as s:
            row = s.get(TrialRow, trial_id)
            if row is None or row.state != "interrupted":
                raise NotFoundError(f"no interrupted trial {trial_id}")
            row.state = "running"
            row.failure_reason = None
            row.finished_at = None
            row.optuna_trial_number = optuna_trial_number

    def trial_measurements(self, trial_id: int) -> list[MeasurementRecord]:
        """One trial's stored measurements, whatever its state (an interrupted trial's too)."""
        with self.session() as s:
            q = _MEASUREMENTS_READ.where(_MEASUREMENT.c.trial_id == trial_id).order_by(
                _MEASUREMENT.c.id
            )
            return [_measurement_record(r) for r in s.connection().execute(q).mappings()]

    # --- leases: one live driver per study --------------------------------------------------
    #
    # Every time here is the database's (``now()`` on PostgreSQL, SQLite's own clock), never
    # this process's: a client whose clock runs ahead or behind cannot steal a live lease or
    # keep a dead one.

    def acquire_lease(
        self,
        study: str,
        ttl_s: float = LEASE_TTL_S,
        on_watch: Callable[[str], None] | None = None,
    ) -> Lease:
        """Take the study's lease, or raise StudyBusyError naming the live driver that holds it.

        Atomic on SQLite and PostgreSQL alike: a lapsed row is taken over with one UPDATE
        conditional on the token and heartbeat count read (compare and swap), a missing one is
        created by an INSERT the primary key serializes. A takeover changes the row's token, so
        the previous holder's next write (fenced by its token, :meth:`_driver_write`) fails and
        its heartbeat learns that it lost.

        On SQLite the database's clock is each client's own (SQLite computes ``'now'`` in the
        calling process): a lease that lapsed by this process's clock is taken over only once
        its heartbeat count stood still for its whole TTL on this process's monotonic clock,
        so a client clock off by any amount evicts no live driver (``on_watch`` hears of the
        wait). A driver on the same machine and in the same PID namespace whose PID is gone
        (kill -9, OOM) is taken over at once.
        """
        check_lease_ttl(ttl_s)
        self._connect()
        me = driver_identity()
        for _ in range(3):
            token = uuid.uuid4().hex
            holder = self._lease_row(study)
            if holder is None:
                if self._insert_lease(study, token, ttl_s, me):
                    return self._held(study, token, ttl_s, me)
                continue  # someone just took it: read who
            # A killed driver of this machine and PID namespace: no need to wait for its lease.
            dead_here = same_pid_space(holder, me) and not _pid_alive(holder.pid)
            if holder.lapsed or dead_here:
                if (
                    self._dialect_name() == "sqlite"
                    and not (holder.marked_expired or dead_here)
                    and self._still_beating(holder, on_watch)
                ):
                    raise StudyBusyError(
                        f"{_busy_message(study, holder)}; its heartbeat goes on although its "
                        "lease lapsed by this host's clock (the two clocks differ)"
                    )
                if self._take_over(study, holder, token, ttl_s, me):
                    return self._held(study, token, ttl_s, me)
                continue  # another driver was quicker (or the holder beat): read again
            raise StudyBusyError(_busy_message(study, holder))
        raise StoreError(f"could not take the lease of study {study!r}")

    def _dialect_name(self) -> str:
        assert self._engine is not None
        return self._engine.dialect.name

    def _lease_values(
        self, dialect: str, token: str, ttl_s: float, me: DriverIdentity
    ) -> dict[str, Any]:
        now = db_now(dialect)
        return {
            "token": token,
            "pid": me.pid,
            "host": me.host,
            "driver_id": me.driver_id,
            "pid_ns": me.pid_ns,
            "boot_id": me.boot_id,
            "beat": 0,
            "acquired_at": now,
            "heartbeat_at": now,
            "expires_at": db_now(dialect, ttl_s),
        }

    def _insert_lease(self, study: str, token: str, ttl_s: float, me: DriverIdentity) -> bool:
        try:
            with self._lease_write(study, None) as s:
                values = self._lease_values(_dialect(s), token, ttl_s, me)
                s.execute(insert(LeaseRow).values(study_name=study, **values))
        except StoreError as exc:
            if isinstance(exc, StudyBusyError):
                raise
            return False  # the primary key: someone holds it (or just took it)
        return True

    def _take_over(
        self, study: str, holder: LeaseHolder, token: str, ttl_s: float, me: DriverIdentity
    ) -> bool:
        """The compare and swap: the row as read (same token, same heartbeat count) becomes
        ours; False when it changed in between."""
        with self._lease_write(study, holder) as s:
            res = s.execute(
                update(LeaseRow)
                .where(
                    LeaseRow.study_name == study,
                    LeaseRow.token == holder.token,
                    LeaseRow.beat == holder.beat,
                )
                .values(**self._lease_values(_dialect(s), token, ttl_s, me))
            )
            return getattr(res, "rowcount", 0) == 1

    @contextmanager
    def _lease_write(self, study: str, holder: LeaseHolder | None) -> Iterator[Session]:
        """A lease write that waits for SQLite's write lock a few seconds at most: a driver
        stopped inside a write holds that lock until it goes on or dies, and no lease rule can
        break it. That is a StudyBusyError (``--wait`` waits) in one line, never ``database is
        locked`` after the 30 s busy timeout."""
        sqlite = self._dialect_name() == "sqlite"
        try:
            with self.session() as s:
                if sqlite:
                    s.connection().exec_driver_sql(f"PRAGMA busy_timeout={LEASE_LOCK_WAIT_MS}")
                try:
                    yield s
                finally:
                    if sqlite:
                        with contextlib.suppress(SQLAlchemyError):
                            s.connection().exec_driver_sql(
                                f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}"
                            )
        except StoreError as exc:
            if sqlite and "database is locked" in str(exc):
                who = f" ({holder.shown()}, whose lease lapsed)" if holder is not None else ""
                raise StudyBusyError(
                    f"study {study!r}: the store file {_sqlite_path(self.url)} is locked by a "
                    f"write that has not finished{who}: a driver stopped inside a write holds "
                    "the lock until it goes on or exits; `study run/resume --wait` waits for it"
                ) from None
            raise

    def _still_beating(self, holder: LeaseHolder, on_watch: Callable[[str], None] | None) -> bool:
        """Watch a lapsed SQLite lease for its TTL on this process's monotonic clock: True as
        soon as its heartbeat count moves (a live driver whose clock differs from ours)."""
        ttl = min(max(holder.ttl_s, 0.0), MAX_LEASE_TTL_S)
        if on_watch is not None:
            on_watch(
                f"the lease of study {holder.study!r} ({holder.shown()}) lapsed by this host's "
                f"clock; taking it over if its heartbeat stays still for {ttl:g} s"
            )
        deadline = time.monotonic() + ttl
        while True:
            now = self._lease_row(holder.study)
            if now is None or (now.token, now.beat) != (holder.token, holder.beat):
                return now is not None and now.token == holder.token
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(0.5, max(ttl / 12, 0.05)))

    def _held(self, study: str, token: str, ttl_s: float, me: DriverIdentity) -> Lease:
        with self.session() as s:
            row = s.get(LeaseRow, study)
            acquired = _aware(row.acquired_at) if row is not None else utcnow()
        return Lease(
            study, token, me.pid, me.host, acquired, ttl_s, me.driver_id, me.pid_ns, me.boot_id
        )

    def _lease_row(self, study: str) -> LeaseHolder | None:
        """The study's lease row, live or lapsed (``lapsed``: by the database's clock)."""
        with self.session() as s:
            lapsed = (LeaseRow.expires_at < db_now(_dialect(s))).label("lapsed")
            found = s.execute(select(LeaseRow, lapsed).where(LeaseRow.study_name == study)).first()
            if found is None:
                return None
            return _holder(found[0], bool(found[1]))

    def lease_holder(self, study: str) -> LeaseHolder | None:
        """The driver that holds a live lease on ``study``, if any."""
        if not self.exists():
            return None
        with self.session() as s:
            row = s.scalar(
                select(LeaseRow).where(
                    LeaseRow.study_name == study, LeaseRow.expires_at >= db_now(_dialect(s))
                )
            )
            return None if row is None else _holder(row, False)

    def renew_lease(self, lease: Lease) -> bool:
        """Push the lease's expiry forward and count the beat; False when it is no longer ours."""
        with self.session() as s:
            dialect = _dialect(s)
            res = s.execute(
                update(LeaseRow)
                .where(LeaseRow.study_name == lease.study, LeaseRow.token == lease.token)
                .values(
                    heartbeat_at=db_now(dialect),
                    expires_at=db_now(dialect, lease.ttl_s),
                    beat=LeaseRow.beat + 1,
                )
            )
            return getattr(res, "rowcount", 0) == 1

    def lease_lost(self, lease: Lease) -> bool:
        """Whether a lease held with ``Store.lease`` was taken over by another driver (this
        one missed its heartbeats for a whole TTL: suspended, or cut off from the database)."""
        keeper = self._keepers.get(lease.token)
        return keeper is not None and keeper.lost

    def release_lease(self, lease: Lease) -> None:
        with self.session() as s:
            s.execute(
                delete(LeaseRow).where(
                    LeaseRow.study_name == lease.study, LeaseRow.token == lease.token
                )
            )

    @contextmanager
    def lease(
        self,
        study: str,
        *,
        ttl_s: float = LEASE_TTL_S,
        wait: bool = False,
        on_wait: Callable[[str], None] | None = None,
    ) -> Iterator[Lease]:
        """Hold the study's lease for the block, renewed by a heartbeat thread every
        ``ttl_s / 6`` seconds; with ``wait``, poll until the holder releases it or dies.

        While it is held, every driver write of this store (trials, measurements,
        recommendations, the study's status, Optuna's writes through :meth:`optuna_storage`)
        checks it in the write's own transaction: LeaseLostError, and no row, once another
        driver took it over."""
        check_lease_ttl(ttl_s)
        while True:
            try:
                lease = self.acquire_lease(study, ttl_s, on_watch=on_wait)
                break
            except StudyBusyError as exc:
                if not wait:
                    raise
                if on_wait is not None:
                    on_wait(str(exc))
                    on_wait = None  # say it once
                time.sleep(min(5.0, ttl_s / 6))
        keeper = _LeaseKeeper(self, lease)
        self._keepers[lease.token] = keeper
        previous, self._fence = self._fence, lease
        keeper.start()
        try:
            yield lease
        finally:
            keeper.stop()
            self._fence = previous
            self._keepers.pop(lease.token, None)
            with contextlib.suppress(StoreError):  # else it lapses by itself at expires_at
                self.release_lease(lease)

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
        self, study: StudyRecord, items: Sequence[Mapping[str, Any]]
    ) -> int:
        """Store a study's recommendations, replacing the ones a previous run stored (one
        transaction: readers see the old set or the new one, never both)."""
        with self._driver_write() as s:
            s.execute(delete(RecommendationRow).where(RecommendationRow.study_id == study.id))
            for item in items:
                config = item.get("speculative_config")
                s.add(
                    RecommendationRow(
                        study_id=study.id,
                        model=study.model,
                        model_alias=study.model_alias,
                        workload=item["workload"],
                        workload_digest=item["workload_digest"],
                        concurrency=item["concurrency"],
                        trial_id=item.get("trial_id"),
                        speculative_config=dict(config) if config else None,
                        output_throughput_tok_s=item["output_throughput_tok_s"],
                        baseline_tok_s=item.get("baseline_tok_s"),
                        speedup=item.get("speedup"),
                    )
                )
        return len(items)

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


@dataclass(frozen=True)
class DriverIdentity:
    """Who a driver process is: a random id of its own, and where it runs (host, PID, the PID
    namespace that PID is in, the kernel's boot id). Host and PID alone collide: two containers
    with the host's name each have a PID 7."""

    driver_id: str
    host: str
    pid: int
    pid_ns: str
    boot_id: str


def _read_link(path: str) -> str:
    try:
        return os.readlink(path)[:64]
    except OSError:
        return ""


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:64]
    except OSError:
        return ""


_DRIVER_ID = [uuid.uuid4().hex]
"""This process's driver id; a forked child draws its own."""
os.register_at_fork(after_in_child=lambda: _DRIVER_ID.__setitem__(0, uuid.uuid4().hex))


def driver_identity() -> DriverIdentity:
    """This process's identity as a lease stores it."""
    return DriverIdentity(
        driver_id=_DRIVER_ID[0],
        host=socket.gethostname()[:256],
        pid=os.getpid(),
        pid_ns=_read_link("/proc/self/ns/pid"),
        boot_id=_boot_id(),
    )


def same_pid_space(holder: LeaseHolder | DriverIdentity, me: DriverIdentity) -> bool:
    """Whether a PID the holder stored means the same process here: one host, one running
    kernel (boot id), one PID namespace. Unknown (a lease of schema 7) is not the same."""
    return bool(holder.pid_ns and holder.boot_id and me.pid_ns and me.boot_id) and (
        holder.host,
        holder.pid_ns,
        holder.boot_id,
    ) == (me.host, me.pid_ns, me.boot_id)


@dataclass(frozen=True)
class Lease:
    """A driver's hold on one study (see ``Store.lease``)."""

    study: str
    token: str
    pid: int
    host: str
    acquired_at: datetime
    ttl_s: float
    driver_id: str = ""
    pid_ns: str = ""
    boot_id: str = ""


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a lease (live unless ``lapsed``), for the message a second driver prints."""

    token: str
    pid: int
    host: str
    acquired_at: datetime
    expires_at: datetime
    study: str = ""
    driver_id: str | None = None
    pid_ns: str | None = None
    boot_id: str | None = None
    beat: int = 0
    ttl_s: float = LEASE_TTL_S
    """The holder's TTL: its expiry minus its last heartbeat, both from its one clock."""
    lapsed: bool = False
    marked_expired: bool = False
    """Expired on purpose (expiry before the last heartbeat: a driver found its PID gone)."""

    def shown(self) -> str:
        """``PID 7 on host (PID namespace pid:[4026532], driver 1f2e3d4c5b6a)``."""
        ns = self.pid_ns or "unknown"
        driver = (self.driver_id or "unknown")[:12]
        return f"PID {self.pid} on {self.host} (PID namespace {ns}, driver {driver})"


def _holder(row: LeaseRow, lapsed: bool) -> LeaseHolder:
    heartbeat, expires = _aware(row.heartbeat_at), _aware(row.expires_at)
    return LeaseHolder(
        token=row.token,
        pid=row.pid,
        host=row.host,
        acquired_at=_aware(row.acquired_at),
        expires_at=expires,
        study=row.study_name,
        driver_id=row.driver_id,
        pid_ns=row.pid_ns,
        boot_id=row.boot_id,
        beat=row.beat or 0,
        ttl_s=(expires - heartbeat).total_seconds(),
        lapsed=lapsed,
        marked_expired=expires <= heartbeat,
    )


def _busy_message(study: str, holder: LeaseHolder) -> str:
    return (
        f"study {study!r} is being run by PID {holder.pid} on {holder.host} since "
        f"{holder.acquired_at:%Y-%m-%d %H:%M:%S} UTC (PID namespace {holder.pid_ns or 'unknown'}, "
        f"driver {(holder.driver_id or 'unknown')[:12]}; lease renewed until "
        f"{holder.expires_at:%H:%M:%S} UTC); `study run/resume --wait` waits for it"
    )


class _LeaseKeeper(threading.Thread):
    """Renews a lease until stopped; a failed renewal is retried at the next beat."""

    def __init__(self, store: Store, lease: Lease):
        super().__init__(name=f"autotune-lease-{lease.study}", daemon=True)
        self.store = store
        self.lease = lease
        self.lost = False
        self._stop_event = threading.Event()

    def run(self) -> None:
        interval = max(0.2, self.lease.ttl_s / 6)
        while not self._stop_event.wait(interval):
            try:
                if not self.store.renew_lease(self.lease):
                    self.lost = True
                    return
            except Exception:  # a busy database: try again next beat
                continue

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def _writable(path: Path) -> bool:
    """Whether the store file and its folder can be written (``access`` also sees a read-only
    mount, for root too)."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def check_sqlite_file(path: Path) -> None:
    """``PRAGMA quick_check`` on an existing store file: a damaged file, or one that is not a
    database at all, is a one-line error naming it instead of reading as an empty store."""
    try:
        if not path.exists() or path.stat().st_size == 0:
            return
        if not path.is_file():
            raise CorruptStoreError(f"{path}: not a file")
    except OSError as exc:
        raise SpecError(f"cannot open the store: {exc.strerror or exc}", source=str(path)) from None
    try:
        conn = sqlite3.connect(str(path), timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
        try:
            rows = conn.execute("PRAGMA quick_check(1)").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and not _writable(path):
            raise SpecError(
                "the store's folder is read-only (SQLite writes its -wal and -shm files beside "
                "the store, even to read it); give --db a writable place",
                source=str(path),
            ) from None
        raise CorruptStoreError(f"{path}: not a usable SQLite store ({exc})") from None
    if not rows or rows[0][0] != "ok":
        detail = rows[0][0] if rows else "no answer"
        raise CorruptStoreError(f"{path}: the SQLite store is damaged (quick_check: {detail})")


@contextmanager
def schema_lock(engine: Engine, sqlite_path: Path | None) -> Iterator[None]:
    """Serialize schema creation between processes: an advisory lock on PostgreSQL, an
    exclusive ``flock`` on a ``.lock`` file beside a SQLite store."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _PG_SCHEMA_LOCK})
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_SCHEMA_LOCK})
                conn.commit()
    elif sqlite_path is not None:
        import fcntl

        with open(f"{sqlite_path}.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
    else:
        yield


def _schema_current(engine: Engine) -> bool:
    with engine.connect() as conn:
        # Read at call time: tests (and future steps) change the target version.
        return current_version(conn) == migrations.SCHEMA_VERSION


_OPTUNA_HEAD: list[str] = []
"""The head revision of the installed Optuna's table schema, read once per process."""


def _optuna_rdb(optuna: Any, url: str, **kwargs: Any) -> Any:
    """``optuna.storages.RDBStorage(url, **kwargs)`` with Optuna's schema compatibility check
    done against the head revision read once per process: Optuna's own check loads every one
    of its migration scripts on each storage it opens (tens of milliseconds, several times per
    study run). A store whose tables are not at the head gets Optuna's own check and message."""
    rdb = _retrying_rdb(optuna)
    storage = rdb(url, skip_compatibility_check=True, **kwargs)
    if not _OPTUNA_HEAD:
        _OPTUNA_HEAD.append(storage.get_head_version())
    if storage.get_current_version() != _OPTUNA_HEAD[0]:
        storage.engine.dispose()
        storage = rdb(url, **kwargs)
    return storage


_OPTUNA_CALLS = (
    "create_new_study",
    "delete_study",
    "set_study_user_attr",
    "set_study_system_attr",
    "get_study_id_from_name",
    "get_study_name_from_id",
    "get_study_directions",
    "get_study_user_attrs",
    "get_study_system_attrs",
    "get_all_studies",
    "create_new_trial",
    "set_trial_param",
    "get_trial_id_from_study_id_trial_number",
    "get_trial_number_from_id",
    "get_trial_param",
    "set_trial_state_values",
    "set_trial_intermediate_value",
    "set_trial_user_attr",
    "set_trial_system_attr",
    "get_trial",
    "get_all_trials",
    "get_n_trials",
    "get_best_trial",
    "record_heartbeat",
)
"""The RDBStorage calls run again while the store is transiently lost (as :func:`_retried`)."""


@functools.cache
def _retrying_rdb(optuna: Any) -> Any:
    """Optuna's RDBStorage whose calls are retried while the store is transiently lost (Optuna
    turns the database's error into StorageInternalError, the cause kept)."""
    base = optuna.storages.RDBStorage

    def transient(exc: Exception) -> bool:
        return isinstance(exc, optuna.exceptions.StorageInternalError) and _is_transient(
            exc.__cause__
        )

    def retrying(name: str) -> Callable[..., Any]:
        call = getattr(base, name)

        @functools.wraps(call)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            return _with_retry(lambda: call(self, *args, **kwargs), masked_url(self.url), transient)

        return wrapper

    names = {name: retrying(name) for name in _OPTUNA_CALLS if callable(getattr(base, name, None))}
    cls = type("RetryingRDBStorage", (base,), {"__module__": __name__, **names})
    globals()["RetryingRDBStorage"] = cls  # found by name, should anything pickle a storage
    return cls


_OPTUNA_SCRIPT: list[Any] = []
"""Optuna's own migration scripts (an Alembic ``ScriptDirectory``), loaded once per process."""


def _create_optuna_schema(optuna: Any, engine: Engine, url: str, **kwargs: Any) -> None:
    """Create Optuna's tables in a new store, as ``RDBStorage`` does, with its Alembic scripts
    loaded once per process.

    On a new database ``RDBStorage`` creates its tables from its models, writes its version row
    and stamps ``alembic_version`` at its head revision, loading its 20-odd migration scripts
    twice to do so (their module bodies declare SQLAlchemy models: about 0.2 s of CPU each time
    on 2 cores, per store created), on two engines of its own. The first store a process creates
    goes through Optuna's own path, and its script directory is kept; later ones get the same
    three steps from Optuna's own models and scripts in one transaction on the store's engine
    (Alembic's ``MigrationContext.stamp``). The result is the same tables and rows
    (``tests/unit/test_store_optuna_schema.py`` checks it against a store Optuna made alone).
    Should Optuna's internals move, or the database hold part of a schema, its own path is used.
    """
    models = _optuna_models()
    if _OPTUNA_SCRIPT and _OPTUNA_HEAD and models is not None:
        from alembic.runtime.migration import MigrationContext

        with engine.begin() as conn:
            context = MigrationContext.configure(conn)
            if context.get_current_revision() is None:
                models.BaseModel.metadata.create_all(conn)
                version = models.VersionInfoModel.__table__
                if conn.execute(select(func.count()).select_from(version)).scalar_one() == 0:
                    conn.execute(
                        insert(version).values(
                            schema_version=models.SCHEMA_VERSION,
                            library_version=optuna.__version__,
                        )
                    )
                context.stamp(_OPTUNA_SCRIPT[0], _OPTUNA_HEAD[0])
                return
    storage = _optuna_rdb(optuna, url, **kwargs)
    try:
        manager = getattr(storage, "_version_manager", None)
        make = getattr(manager, "_create_alembic_script", None)
        if make is not None and not _OPTUNA_SCRIPT:
            _OPTUNA_SCRIPT.append(make())
    finally:
        storage.engine.dispose()


def _optuna_models() -> Any:
    """Optuna's table models (``optuna.storages._rdb.models``), or None should they move."""
    try:
        from optuna.storages._rdb import models
    except ImportError:
        return None
    needed = ("BaseModel", "VersionInfoModel", "SCHEMA_VERSION")
    return models if all(hasattr(models, n) for n in needed) else None


def _optuna_schema_current(engine: Engine) -> bool:
    with engine.connect() as conn:
        names = set(inspect(conn).get_table_names())
        if not {"studies", "trials", "version_info", "alembic_version"} <= names:
            return False
        return int(conn.execute(text("SELECT count(*) FROM alembic_version")).scalar_one()) > 0


def _live_status(s: Session, row: StudyRow) -> str:
    """A study left ``running`` by a driver whose lease lapsed (killed, host lost) reads as
    ``interrupted``, not ``running`` forever."""
    if row.status != "running":
        return row.status
    live = s.scalar(
        select(func.count())
        .select_from(LeaseRow)
        .where(LeaseRow.study_name == row.name, LeaseRow.expires_at >= db_now(_dialect(s)))
    )
    return row.status if live else "interrupted"


def _aware(value: datetime) -> datetime:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    from datetime import timezone

    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # The busy timeout first: switching to WAL needs a lock another process may hold.
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA journal_mode=WAL")
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


for _name in (
    "create_study",
    "get_study",
    "list_studies",
    "delete_study",
    "set_study_status",
    "start_trial",
    "record_engine",
    "add_measurement",
    "finish_trial",
    "abandon_running_trials",
    "reopen_trial",
    "trial_measurements",
    "acquire_lease",
    "lease_holder",
    "release_lease",
    "trials",
    "measurements",
    "replace_recommendations",
    "recommendations",
    "save_verification",
    "verifications",
):
    setattr(Store, _name, _retried(getattr(Store, _name)))
