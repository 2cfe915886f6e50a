"""The store's leases (autotune.store.leases, issue #33 item 2): an identity that cannot collide
(driver id, host, PID, PID namespace, boot id), one clock for takeovers on SQLite (a client clock
±90 s, skewed for real in C by an LD_PRELOAD shim, evicts no live driver), and a driver stopped inside a
write reported in one line within the lease rules, not ``database is locked`` after 30 s."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import update

from autotune.errors import StudyBusyError
from autotune.store import Store
from autotune.store.leases import _boot_id, _read_link, driver_identity, same_pid_space
from autotune.store.tables import LeaseRow

REPO = Path(__file__).resolve().parents[2]
SPAWN_40 = "i=0; while [ $i -lt 40 ]; do /bin/true; i=$((i+1)); done;"
"""Forty processes, so a PID namespace's next PID is above 40."""


def _store(tmp_path: Path) -> Store:
    store = Store(str(tmp_path / "a.db"))
    store.create_study(
        name="s", description="", model_alias=None, model="m", source="", resolved_json="{}"
    )
    return store


def _dead_pid() -> int:
    """A PID no process of this namespace has."""
    pid = 4_000_000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1


def test_the_identity_names_driver_host_pid_and_pid_namespace():
    me = driver_identity()
    assert len(me.driver_id) == 32 and me.pid == os.getpid()
    assert me.pid_ns == os.readlink("/proc/self/ns/pid") and me.pid_ns.startswith("pid:[")
    assert me.boot_id == _boot_id() and me.boot_id
    assert same_pid_space(me, me)
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "from autotune.store.leases import _DRIVER_ID; print(_DRIVER_ID[0])",
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() != me.driver_id  # random per process, never host + PID
    assert _read_link("/nonexistent") == ""


def test_same_host_and_pid_in_another_pid_namespace_is_not_evicted(tmp_path: Path):
    """Two containers with the host's name: the holder's PID means nothing in this namespace,
    so a PID that is gone here is no reason to take its live lease over."""
    store = _store(tmp_path)
    other = Store(store.url)
    me = driver_identity()
    held = store.acquire_lease("s", ttl_s=30)
    dead = _dead_pid()
    with store.session() as s:
        s.execute(update(LeaseRow).values(pid=dead, pid_ns="pid:[4026599999]"))
    with pytest.raises(StudyBusyError) as busy:
        other.acquire_lease("s", ttl_s=30)
    message = str(busy.value)
    assert f"is being run by PID {dead} on {me.host}" in message
    assert "PID namespace pid:[4026599999]" in message and held.driver_id[:12] in message
    with store.session() as s:  # another machine (boot id) with our namespace's inode number
        s.execute(update(LeaseRow).values(pid_ns=me.pid_ns, boot_id="another-kernel"))
    with pytest.raises(StudyBusyError):
        other.acquire_lease("s", ttl_s=30)
    with store.session() as s:  # the same namespace on the same kernel: that PID is dead
        s.execute(update(LeaseRow).values(boot_id=me.boot_id))
    taken = other.acquire_lease("s", ttl_s=30)
    assert taken.token != held.token and taken.driver_id == me.driver_id
    assert not store.renew_lease(held)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root unshare")
def test_two_pid_namespaces_with_one_hostname_keep_their_leases(tmp_path: Path):
    """For real: a holder in its own PID namespace (``unshare --pid --fork``), a second driver
    in another one; the holder's PID is gone in the second's namespace, and its lease stays."""
    store = _store(tmp_path)
    hold = tmp_path / "hold"
    hold.touch()
    holder_code = (
        "import os, sys, time\n"
        "from autotune.store import Store\n"
        f"store = Store({store.url!r})\n"
        "with store.lease('s', ttl_s=1.0) as lease:\n"
        "    print(os.getpid(), lease.pid_ns, flush=True)\n"
        f"    while os.path.exists({str(hold)!r}): time.sleep(0.05)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # 40 processes first, so the holder's PID (above 40) is none in the thief's namespace
    shell = f'{SPAWN_40} "$0" -c "$1"'
    holder = subprocess.Popen(
        ["unshare", "--pid", "--fork", "sh", "-c", shell, sys.executable, holder_code],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        pid, ns = holder.stdout.readline().split()
        assert ns != driver_identity().pid_ns and int(pid) > 40
        thief_code = (
            "import os\n"
            "from autotune.errors import StudyBusyError\n"
            "from autotune.store import Store\n"
            f"assert os.getpid() < {pid}  # the holder's PID is none of this namespace\n"
            "try:\n"
            f"    Store({store.url!r}).acquire_lease('s', ttl_s=1.0)\n"
            "    print('took')\n"
            "except StudyBusyError as exc:\n"
            "    print('busy', exc)\n"
        )
        time.sleep(2.5)  # more than two TTLs: only the heartbeat keeps it
        thief = subprocess.run(
            ["unshare", "--pid", "--fork", sys.executable, "-c", thief_code],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert thief.stdout.startswith("busy"), thief.stdout + thief.stderr
        assert f"is being run by PID {pid}" in thief.stdout and ns in thief.stdout
    finally:
        hold.unlink()
        holder.wait(timeout=30)
    assert holder.returncode == 0
    assert store.lease_holder("s") is None  # released on exit


SKEW_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long skew_s(void) {
    const char *s = getenv("CLOCK_SKEW_S");
    return s ? atol(s) : 0;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = dlsym(RTLD_NEXT, "clock_gettime");
    int r = real(clock, ts);
    if (r == 0 && ts && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE))
        ts->tv_sec += skew_s();
    return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    static int (*real)(struct timeval *, void *);
    if (!real) real = dlsym(RTLD_NEXT, "gettimeofday");
    int r = real(tv, tz);
    if (r == 0 && tv) tv->tv_sec += skew_s();
    return r;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
"""
"""An LD_PRELOAD shim: the process's wall clock (``clock_gettime(CLOCK_REALTIME)``,
``gettimeofday``, ``time``) reads ``CLOCK_SKEW_S`` seconds off, for Python and for SQLite's C
library alike (SQLite's ``'now'`` is the calling process's clock); the monotonic clock is
untouched, as on a machine whose clock was set wrong. (libfaketime breaks Python's timed waits.)"""

_CC = shutil.which("cc") or shutil.which("gcc")


@pytest.fixture(scope="module")
def skew_shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert _CC is not None
    root = tmp_path_factory.mktemp("skew")
    (root / "skew.c").write_text(SKEW_C)
    subprocess.run(
        [_CC, "-shared", "-fPIC", "-O2", "-o", str(root / "skew.so"), str(root / "skew.c"), "-ldl"],
        check=True,
    )
    return root / "skew.so"


def _skewed_env(shim: Path, skew_s: int) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "LD_PRELOAD": str(shim),
        "CLOCK_SKEW_S": str(skew_s),
    }


def _skewed(shim: Path, skew_s: int, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env=_skewed_env(shim, skew_s),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.skipif(_CC is None, reason="no C compiler for the clock shim")
def test_the_shim_skews_sqlite_and_python_clocks(skew_shim: Path):
    code = (
        "import sqlite3, time\n"
        "db = sqlite3.connect(':memory:').execute(\"select strftime('%s', 'now')\").fetchone()\n"
        "print(int(db[0]) - int(time.time()), time.time())\n"
    )
    now = time.time()
    out = _skewed(skew_shim, 90, code).stdout.split()
    assert abs(int(out[0])) <= 1 and 85 < float(out[1]) - now < 120


@pytest.mark.slow
@pytest.mark.skipif(_CC is None, reason="no C compiler for the clock shim")
@pytest.mark.parametrize("holder_skew", [-90, 0])
def test_a_client_clock_90_s_off_evicts_no_live_driver_on_sqlite(
    tmp_path: Path, skew_shim: Path, holder_skew: int
):
    """A holder whose clock runs 90 s behind (its lease lapses at once by a true clock), and
    challengers whose clocks run 90 s ahead, true, or behind: the live driver keeps its lease;
    once it died without releasing (its heartbeat stands still) a challenger takes it over."""
    store = _store(tmp_path)
    hold = tmp_path / "hold"
    hold.touch()
    holder_code = (
        "import os, time\n"
        "from autotune.store import Store\n"
        f"store = Store({store.url!r})\n"
        "with store.lease('s', ttl_s=1.0):\n"
        "    print('held', flush=True)\n"
        f"    while os.path.exists({str(hold)!r}): time.sleep(0.05)\n"
        "    os._exit(0)  # dies holding it: nothing released\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", holder_code],
        env=_skewed_env(skew_shim, holder_skew),
        stdout=subprocess.PIPE,
        text=True,
    )
    thief_code = (
        "from autotune.errors import StudyBusyError\n"
        "from autotune.store import Store\n"
        "try:\n"
        f"    lease = Store({store.url!r}).acquire_lease('s', ttl_s=1.0)\n"
        "    print('took', lease.token)\n"
        "except StudyBusyError as exc:\n"
        "    print('busy', exc)\n"
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        for skew in (90, 0, -90):
            thief = _skewed(skew_shim, skew, thief_code)
            assert thief.stdout.startswith("busy"), (skew, thief.stdout, thief.stderr)
            assert "Traceback" not in thief.stderr
    finally:
        hold.unlink()
        holder.wait(timeout=30)
    # The holder died holding it: a challenger with a true clock takes it over within
    # the holder's TTL of watching (and a -90 s holder's lease reads lapsed already).
    if holder_skew == -90:
        thief = _skewed(skew_shim, 0, thief_code)
        assert thief.stdout.startswith("took"), thief.stdout + thief.stderr


def test_a_lease_row_read_is_all_database_time():
    """The lease code reads no client clock: every time it writes or compares is db_now."""
    leases = (REPO / "autotune/store/leases.py").read_text()
    assert "class LeaseRepository" in leases and "def acquire_lease" in leases
    for clock in ("time.time(", "datetime.now(", "utcnow()  #", "time.time_ns("):
        assert clock not in leases, clock
    assert "time.monotonic()" in leases  # durations only: the watch of a lapsed SQLite lease


def test_a_driver_stopped_inside_a_write_is_one_line_not_database_is_locked(tmp_path: Path):
    """A driver stopped inside a write (here: a connection holding SQLite's write lock) and
    its lease lapsed: the next driver is refused within seconds, in one line that says so."""
    store = _store(tmp_path)
    store.acquire_lease("s", ttl_s=0.5)  # no heartbeat: it lapses
    time.sleep(0.6)
    locker = sqlite3.connect(str(tmp_path / "a.db"), isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    try:
        other = Store(store.url)
        started = time.monotonic()
        with pytest.raises(StudyBusyError) as busy:
            other.acquire_lease("s", ttl_s=1.0)
        took = time.monotonic() - started
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    message = str(busy.value)
    assert "\n" not in message and "is locked by a write that has not finished" in message
    assert "whose lease lapsed" in message and "database is locked" not in message
    assert took < 10, took  # the lease's TTL of watching and a few seconds for the lock
    assert Store(store.url).acquire_lease("s", ttl_s=1.0).token  # the lock gone: taken over


def test_a_locked_sqlite_file_is_retried_then_given_up_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A write lock held past SQLite's busy timeout (here 0.2 s) is retried with back-off: a
    lock that goes within the retry bound costs a wait; one that stays ends in one line."""
    import threading

    from autotune.errors import StoreError
    from autotune.store import connection as store_module

    monkeypatch.setattr(store_module, "SQLITE_BUSY_TIMEOUT_MS", 200)
    store = _store(tmp_path)
    locker = sqlite3.connect(str(tmp_path / "a.db"), isolation_level=None, check_same_thread=False)
    locker.execute("BEGIN IMMEDIATE")
    threading.Timer(1.0, lambda: locker.execute("ROLLBACK")).start()
    started = time.monotonic()
    store.set_study_status("s", "running")  # waits out the lock, then writes
    assert time.monotonic() - started >= 0.9
    assert store.get_study("s").status != "created"
    locker.execute("BEGIN IMMEDIATE")
    monkeypatch.setenv("AUTOTUNE_STORE_RETRY_S", "0.5")
    try:
        with pytest.raises(StoreError) as gave_up:
            store.set_study_status("s", "done")
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    message = str(gave_up.value)
    assert "\n" not in message and "stayed unreachable for 0.5 s (database is locked)" in message
    assert store.get_study("s").status != "done"
