"""Leases: one live driver per study, and the fence that keeps a driver that lost its lease
from writing.

A driver holds its study's lease (a row of ``autotune_leases``) while it runs, renewed by a
heartbeat thread (:class:`_LeaseKeeper`); every write it makes checks, in the write's own
transaction, that the lease is still its own (the fence, :func:`_fence_statement`). Who holds a
lease is a :class:`DriverIdentity` that cannot collide across containers. Every lease time is
the database's (:func:`autotune.store.connection.db_now`), never this process's.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Engine, Table, Update, bindparam, delete, event, insert, select, text, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from autotune.errors import LeaseLostError, SpecError, StoreError, StudyBusyError
from autotune.store.connection import (
    SQLITE_BUSY_TIMEOUT_MS,
    StoreConnection,
    _aware,
    _dialect,
    _sqlite_path,
    db_now,
    retried_call,
)
from autotune.store.tables import LeaseRow, utcnow

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


_LEASE = cast(Table, LeaseRow.__table__)
"""The lease table: every lease write is a Core statement on it, on the write's connection (the
ORM's bulk UPDATE would also look for the row in the session to synchronize it, which nothing
here needs)."""


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
    lease = _LEASE
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

    def __init__(self, store: LeaseRepository, lease: Lease):
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


class LeaseRepository(StoreConnection):
    """The store's leases and the fenced write path every driver write goes through
    (:meth:`_driver_write`); :class:`autotune.store.Store` is one."""

    def __init__(self, url: str | None = None):
        super().__init__(url)
        self._keepers: dict[str, _LeaseKeeper] = {}
        self._fence: Lease | None = None
        """The lease every driver write checks in its own transaction (``Store.lease``)."""

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
        tried: set[str] = set()
        for _ in range(3):
            token = uuid.uuid4().hex
            holder = self._lease_row(study)
            # A write of ours that landed, its acknowledgement lost (the connection cut after
            # the COMMIT): the lease is ours, not another driver's.
            if holder is not None and (
                holder.token in tried or (retried_call() and holder.driver_id == me.driver_id)
            ):
                return self._held(study, holder.token, ttl_s, me)
            tried.add(token)
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
                s.connection().execute(insert(_LEASE).values(study_name=study, **values))
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
            res = s.connection().execute(
                update(_LEASE)
                .where(
                    _LEASE.c.study_name == study,
                    _LEASE.c.token == holder.token,
                    _LEASE.c.beat == holder.beat,
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
            res = s.connection().execute(
                update(_LEASE)
                .where(_LEASE.c.study_name == lease.study, _LEASE.c.token == lease.token)
                .values(
                    heartbeat_at=db_now(dialect),
                    expires_at=db_now(dialect, lease.ttl_s),
                    beat=_LEASE.c.beat + 1,
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
            s.connection().execute(
                delete(_LEASE).where(
                    _LEASE.c.study_name == lease.study, _LEASE.c.token == lease.token
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
