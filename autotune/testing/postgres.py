"""A throwaway PostgreSQL server and the fault-driver probes the store fault tests and
``bench/resume_faults.py`` share.

:func:`postgres_server` starts a real server from Debian's ``postgresql`` package binaries
(``initdb``/``pg_ctl`` on ``PATH`` or under ``/usr/lib/postgresql/*/bin``). PostgreSQL refuses to
run as root, so as root (CI) the cluster is initialised and run as ``nobody`` in a folder that
user owns; it listens on 127.0.0.1 only, on a free port, with fsync off, and is removed at the
end. The ``postgres`` superuser connects without a password (trust); the role ``autotune`` must
give its password (SCRAM), for the tests that check no command prints it
(:meth:`PostgresServer.password_url`).

:func:`fault_driver` starts ``autotune --db URL ...`` in its own process on the replay engine,
printing ``measure`` before each cell (where a test suspends or kills it, out of any
transaction), with an optional skewed client clock, a per-cell delay, a hold file, and several
slots on a virtual clock; :func:`quiet` tells whether any transaction is open on the store.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

PASSWORD_ROLE = "autotune"
"""The role whose password the server checks (SCRAM)."""

_ENV = {"LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries are not installed."""


def pg_bin(name: str) -> str | None:
    """The path of the PostgreSQL program ``name``, or None."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """A running server (:func:`postgres_server`): its folder, port and the OS user it runs as."""

    def __init__(self, root: Path, port: int, user: str | None) -> None:
        self.root = root
        self.port = port
        self.user = user
        self.password = f"pw-{uuid.uuid4().hex}"
        """The password of the role ``autotune`` (checked by the server: SCRAM)."""

    def _admin_dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def password_url(self) -> str:
        """A fresh database owned by the role ``autotune``, reached with its password."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self._admin_dsn(), autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_roles WHERE rolname = %s", (PASSWORD_ROLE,)
            ).fetchone()
            if not exists:
                conn.execute(f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{self.password}'")
            conn.execute(f'CREATE DATABASE "{name}" OWNER {PASSWORD_ROLE}')
        return f"postgresql+psycopg://{PASSWORD_ROLE}:{self.password}@127.0.0.1:{self.port}/{name}"

    def url(self, database: str) -> str:
        """The superuser's URL of ``database`` (no password: trust)."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new, empty database; its name."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self._admin_dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def fresh_url(self) -> str:
        """The URL of a new, empty database."""
        return self.url(self.create_database())

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every session cut, the server down for a moment."""
        pg_ctl = pg_bin("pg_ctl")
        assert pg_ctl is not None
        data, log = str(self.root / "data"), str(self.root / "log")
        subprocess.run(
            # the server's output to its log, not to pipes it would hold open
            [pg_ctl, "-D", data, "-l", log, "-m", "fast", "-w", "-t", "60", "restart"],
            check=True,
            user=self.user,
            env={**os.environ, **_ENV},
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server on 127.0.0.1 for the block (see the module docstring); raises
    :class:`PostgresUnavailable` when the binaries are missing."""
    initdb, pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        raise PostgresUnavailable(
            "PostgreSQL server binaries not found (apt-get install postgresql)"
        )
    user = "nobody" if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    os.chmod(root, 0o755)
    if user:
        pw = pwd.getpwnam(user)
        os.chown(root, pw.pw_uid, pw.pw_gid)
    data = root / "data"
    port = free_port()
    env = {**os.environ, **_ENV}

    def run(*cmd: str) -> None:
        subprocess.run(
            cmd, check=True, user=user, env=env, cwd=root, capture_output=True, timeout=120
        )

    try:
        run(initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        # The password role must authenticate (first matching line wins); everyone else trusted.
        hba = data / "pg_hba.conf"
        rule = f"host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256\n"
        if user:
            run("sh", "-c", f"printf '%s' '{rule}' | cat - {hba} > {hba}.new && mv {hba}.new {hba}")
        else:
            hba.write_text(rule + hba.read_text())
        options = (
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        log = str(root / "log")
        run(pg_ctl, "-D", str(data), "-o", options, "-l", log, "-w", "-t", "60", "start")
        yield PostgresServer(root, port, user)
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(
                [pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"],
                user=user,
                env=env,
                cwd=root,
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(root, ignore_errors=True)


def _conninfo(url: str) -> str:
    """A ``postgresql+psycopg://`` URL as a libpq connection string."""
    from urllib.parse import unquote, urlsplit

    from psycopg.conninfo import make_conninfo

    u = urlsplit(url)
    parts = {"host": u.hostname, "port": u.port, "dbname": u.path.lstrip("/")}
    parts |= {"user": unquote(u.username or ""), "password": unquote(u.password or "")}
    return make_conninfo("", **{k: v for k, v in parts.items() if v})


# --- fault drivers ---------------------------------------------------------------------------

DRIVER = """
import datetime, os, sys, time
# A skewed client clock: every time autotune reads from this process's clock is off by
# CLOCK_SKEW_S (the lease times must come from the database's clock instead).
skew = datetime.timedelta(seconds=float(os.environ.get("CLOCK_SKEW_S", "0")))
if skew:
    from autotune.store import leases as _leases, repositories as _repos, tables as _tables
    _real = _tables.utcnow
    _tables.utcnow = _repos.utcnow = _leases.utcnow = lambda: _real() + skew
from autotune.engine.replay import ReplayEngine
_measure = ReplayEngine.measure
delay = float(os.environ.get("MEASURE_S", "0"))
hold = os.environ.get("HOLD_FILE")


def measure(self, *args, **kwargs):
    print("measure", flush=True)  # the test suspends the driver here, out of any transaction
    time.sleep(delay)
    while hold and os.path.exists(hold):  # the test holds the driver mid-trial
        time.sleep(0.05)
    return _measure(self, *args, **kwargs)


ReplayEngine.measure = measure
slots = int(os.environ.get("SLOTS", "1"))
if slots > 1:  # several engines at once on a virtual clock (autotune.cluster.virtual)
    from autotune.cluster import pools
    from autotune.cluster.virtual import VirtualPool

    def pool_factory(resolved, *args, **kwargs):
        def virtual(_):
            return VirtualPool(
                slots, lambda: ReplayEngine(str(resolved.landscape), resolved.spec.seed)
            )

        return virtual

    pools.pool_factory = pool_factory
from autotune.cli import main
main(sys.argv[1:])
"""
"""The fault driver's program (``python -c``); see :func:`fault_driver`."""


def fault_driver(
    repo: Path, url: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """``autotune --db URL ARGS`` from the tree ``repo`` in its own process, on the replay
    engine, printing ``measure`` before each cell. ``env`` may set ``MEASURE_S`` (seconds each
    cell waits first), ``HOLD_FILE`` (a cell waits while that file exists), ``CLOCK_SKEW_S``
    (the client clock's offset) and ``SLOTS`` (engines at once, on a virtual clock)."""
    path = str(repo) + os.pathsep + os.environ.get("PYTHONPATH", "")
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, "--db", url, *args],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": path, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def wait_measures(proc: subprocess.Popen[str], count: int) -> bool:
    """Read a fault driver's output until its ``count``-th ``measure`` line (False: it ended)."""
    assert proc.stdout is not None
    seen = 0
    while seen < count:
        line = proc.stdout.readline()
        if not line:
            return False
        seen += line.strip() == "measure"
    return True


def quiet(url: str) -> bool:
    """No transaction is open on the store at ``url`` (a suspended driver holds no lock)."""
    if url.startswith("sqlite"):
        import sqlite3

        lite = sqlite3.connect(url[len("sqlite:///") :], timeout=0.5)
        try:
            lite.execute("BEGIN IMMEDIATE")
            lite.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            lite.close()
    import psycopg

    with psycopg.connect(_conninfo(url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()"
        ).fetchone()
    busy = row[0] if row else 0
    return int(busy) == 0


# --- a lost acknowledgement ------------------------------------------------------------------


class LostCommitAck:
    """A TCP proxy on 127.0.0.1 in front of a PostgreSQL server that loses the acknowledgement
    of a committed measurement: after :meth:`arm` (``after`` = k), the k-th ``COMMIT`` of a
    transaction that inserted into ``autotune_measurements`` (or ``table``, or sent
    ``statement``) reaches the server, which commits it, but the connection is cut where the server's ``CommandComplete COMMIT`` would go back,
    so the client sees a lost connection for a write that landed.

    The proxy reads the wire protocol (v3, no TLS: connect with ``sslmode=disable`` and
    ``gssencmode=disable``, see :meth:`url`): the client's first message is untyped, every
    other message is a type byte and a length. An insert is seen in a simple ``Query``, in the
    ``Parse`` of an unnamed statement, or in the ``Bind`` of a statement prepared from one.
    """

    def __init__(
        self, server_port: int, table: str = "autotune_measurements", statement: str | None = None
    ) -> None:
        import threading

        self.server_port = server_port
        self.insert = (statement or f"INSERT INTO {table}").encode()
        """What a transaction whose ack is lost sends (``table``: another table's inserts;
        ``statement``: any other statement's start, as sent, e.g. Optuna's
        ``UPDATE trials SET state=$1, datetime_complete``)."""
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._left: int | None = None
        self.dropped = 0
        """Acknowledgements lost so far."""
        self._threads: list[threading.Thread] = []
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()

    def url(self, server_url: str) -> str:
        """``server_url`` (a database on the proxied server) reached through the proxy."""
        from urllib.parse import urlsplit, urlunsplit

        u = urlsplit(server_url)
        who = u.netloc.rpartition("@")[0]
        netloc = f"{who}@127.0.0.1:{self.port}" if who else f"127.0.0.1:{self.port}"
        query = "&".join(q for q in (u.query, "sslmode=disable&gssencmode=disable") if q)
        return urlunsplit((u.scheme, netloc, u.path, query, ""))

    def arm(self, after: int = 1) -> None:
        with self._lock:
            self._left = after

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.server_port))
            for s in (client, server):  # one message a send: no Nagle wait on each
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Proxied(client, server)
            for target in (self._up, self._down):
                t = threading.Thread(target=target, args=(conn,), daemon=True)
                t.start()
                self._threads.append(t)

    def _up(self, conn: _Proxied) -> None:
        """Client to server: forward, noting inserts and commits."""
        first = True
        with contextlib.suppress(OSError):
            while True:
                if first:
                    head = _read(conn.client, 4)
                    body = _read(conn.client, int.from_bytes(head, "big") - 4)
                    conn.server.sendall(head + body)
                    first = False
                    continue
                head = _read(conn.client, 5)
                body = _read(conn.client, int.from_bytes(head[1:], "big") - 4)
                self._note(conn, head[:1], body)
                conn.server.sendall(head + body)
        conn.shut()

    def _note(self, conn: _Proxied, kind: bytes, body: bytes) -> None:
        if kind == b"Q":
            query = body.rstrip(b"\0")
            if self.insert in query:
                conn.inserted = True
            elif query.strip().upper() == b"COMMIT" and conn.inserted:
                conn.inserted = False
                with self._lock:
                    if self._left is not None:
                        self._left -= 1
                        if self._left == 0:
                            self._left = None
                            conn.drop = True
            elif query.strip().upper() == b"ROLLBACK":
                conn.inserted = False
        elif kind == b"P":
            name, _, rest = body.partition(b"\0")
            if self.insert in rest.partition(b"\0")[0]:
                if name:
                    conn.prepared.add(name)
                else:
                    conn.inserted = True
        elif kind == b"B":
            _, _, rest = body.partition(b"\0")
            if rest.partition(b"\0")[0] in conn.prepared:
                conn.inserted = True

    def _down(self, conn: _Proxied) -> None:
        """Server to client: forward, but cut the connection instead of a dropped ack."""
        with contextlib.suppress(OSError):
            while True:
                head = _read(conn.server, 5)
                body = _read(conn.server, int.from_bytes(head[1:], "big") - 4)
                if conn.drop and head[:1] == b"C" and body.startswith(b"COMMIT"):
                    with self._lock:
                        self.dropped += 1
                    break
                conn.client.sendall(head + body)
        conn.shut()


class _Proxied:
    """One proxied connection and what the proxy saw on it."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server = client, server
        self.inserted = False
        """The open transaction inserted a measurement."""
        self.prepared: set[bytes] = set()
        """Names of statements prepared from a measurement insert."""
        self.drop = False
        """The acknowledgement of the next COMMIT is lost."""

    def shut(self) -> None:
        for s in (self.client, self.server):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise OSError("closed")
        out += chunk
    return out
