"""A real PostgreSQL server for the store contract suite, started without root: one per
session (:func:`autotune.testing.postgres.postgres_server`: 127.0.0.1 only, a free port, fsync
off, run as ``nobody`` under root; the ``postgres`` superuser trusted, the role ``autotune``
checked by SCRAM). The server binaries come from Debian's ``postgresql`` package (``.ci/run``
installs it where it is missing); without them the PostgreSQL tests skip, or fail under CI.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.testing.postgres import PostgresServer, PostgresUnavailable
from autotune.testing.postgres import postgres_server as start_postgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(start_postgres())
        except PostgresUnavailable as e:
            if os.environ.get("CI"):
                pytest.fail(str(e))
            pytest.skip(str(e))
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.fresh_url()
