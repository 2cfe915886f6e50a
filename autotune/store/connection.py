"""The store's connection: where it is, how it is opened, and what its database says.

The URL (``--db`` / ``AUTOTUNE_DB`` / ``studies/autotune.db``; a bare path is SQLite), the checks
on a SQLite file before it is opened, its pragmas (WAL, busy timeout, foreign keys), the
database's clock (:func:`db_now`), the lock that serializes schema creation between processes,
and the retry of a transiently lost store. :class:`StoreConnection` is the engine and the one
scoped session every store query and write runs in.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import DateTime, Engine, String, create_engine, event, func, text
from sqlalchemy.engine import make_url
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
from autotune.errors import CorruptStoreError, SpecError, StoreError
from autotune.store.migrations import is_current, upgrade
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
    _RETRYING.again = False
    _RETRYING.since = datetime.now(timezone.utc)
    try:
        while True:
            try:
                return call()
            except Exception as exc:
                if not transient(exc):
                    raise
                _RETRYING.again = True
                if time.monotonic() + delay > deadline:
                    raise StoreError(
                        f"the store {shown_url} stayed unreachable for {bound:g} s "
                        f"({_one_line(exc)[:200]}); gave up (AUTOTUNE_STORE_RETRY_S sets how long "
                        "to retry)"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
    finally:
        _RETRYING.active = _RETRYING.again = False


def retried_call() -> bool:
    """Whether the store call running in this thread is a retry: its first attempt failed
    transiently, and may have committed all the same (the connection lost after the COMMIT
    reached the server), so an insert looks for the row it would write first."""
    return bool(getattr(_RETRYING, "again", False))


def retry_since() -> datetime:
    """When the first attempt of the retried store call running in this thread began (its
    rows' ``created_at`` are no earlier: this process's clock stamped both)."""
    since = getattr(_RETRYING, "since", None)
    return since if isinstance(since, datetime) else datetime.min.replace(tzinfo=timezone.utc)


def _retried(method: Callable[..., Any]) -> Callable[..., Any]:
    """A store method whose transaction is run again while the store is transiently lost."""

    @functools.wraps(method)
    def wrapper(self: StoreConnection, *args: Any, **kwargs: Any) -> Any:
        return _with_retry(
            lambda: method(self, *args, **kwargs),
            self.shown_url,
            lambda exc: isinstance(exc, _TransientStoreError),
        )

    return wrapper


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
        return is_current(conn)


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


class StoreConnection:
    """The engine and sessions on the store at ``url``, opened (and its schema created or
    migrated) on first use.

    Read-only use of a SQLite file that does not exist yet creates nothing: queries answer
    empty.
    """

    def __init__(self, url: str | None = None):
        self.url = resolve_url(url)
        self.shown_url = masked_url(self.url)
        """The URL as every message prints it: the password masked."""
        self._engine: Engine | None = None
        self._sessions: sessionmaker[Session] | None = None

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

    def _dialect_name(self) -> str:
        assert self._engine is not None
        return self._engine.dialect.name

    def _one_line(self, exc: BaseException) -> str:
        """A database error's first line, its store URL and password masked."""
        return scrub(_one_line(exc), self.url)

    def dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
            self._sessions = None
