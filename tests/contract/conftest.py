"""A real PostgreSQL server for the store contract suite, started without root.

The server binaries come from Debian's ``postgresql`` package (``.ci/run`` installs it where it
is missing). PostgreSQL refuses to run as root, so as root (CI) the cluster is initialised and
run as ``nobody`` in a folder that user owns; the server listens on 127.0.0.1 only, on a free
port, with fsync off (a test cluster, thrown away at the end of the session). The ``postgres``
superuser connects without a password (trust); the role ``autotune`` must give its password
(SCRAM), for the tests that check no command prints it (:meth:`PostgresServer.password_url`).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PASSWORD_ROLE = "autotune"


class PostgresServer:
    def __init__(self, root: Path, port: int, user: str | None):
        self.root = root
        self.port = port
        self.user = user
        self.password = f"pw-{uuid.uuid4().hex}"
        """The password of the role ``autotune`` (checked by the server: SCRAM)."""

    def password_url(self) -> str:
        """A fresh database owned by the role ``autotune``, reached with its password."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_roles WHERE rolname = %s", (PASSWORD_ROLE,)
            ).fetchone()
            if not exists:
                conn.execute(f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{self.password}'")
            conn.execute(f'CREATE DATABASE "{name}" OWNER {PASSWORD_ROLE}')
        return f"postgresql+psycopg://{PASSWORD_ROLE}:{self.password}@127.0.0.1:{self.port}/{name}"

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every session cut, the server down for a moment."""
        pg_ctl = _pg_bin("pg_ctl")
        assert pg_ctl is not None
        data, log = str(self.root / "data"), str(self.root / "log")
        subprocess.run(
            # the server's output to its log, not to pipes it would hold open
            [pg_ctl, "-D", data, "-l", log, "-m", "fast", "-w", "-t", "60", "restart"],
            check=True,
            user=self.user,
            env={**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"},
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        message = "PostgreSQL server binaries not found (apt-get install postgresql)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    user = "nobody" if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    os.chmod(root, 0o755)
    if user:
        pw = pwd.getpwnam(user)
        os.chown(root, pw.pw_uid, pw.pw_gid)
    data = root / "data"
    port = _free_port()
    env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}

    def run(*cmd: str) -> None:
        subprocess.run(
            cmd, check=True, user=user, env=env, cwd=root, capture_output=True, timeout=120
        )

    run(initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
    # The password role must authenticate (first matching line wins); everyone else is trusted.
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
    run(pg_ctl, "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "-t", "60", "start")
    try:
        yield PostgresServer(root, port, user)
    finally:
        subprocess.run(
            [pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"],
            user=user,
            env=env,
            cwd=root,
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.url(server.create_database())
