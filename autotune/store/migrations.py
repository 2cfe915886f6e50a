"""Schema versions and the migrations between them, run by Alembic with a version table of its own.

The revisions live in ``autotune/store/schema/versions/`` (package data, so a non-editable
install has them): revision ``000n`` turns schema ``n - 1`` into ``n``. Alembic records where a
store is in ``autotune_alembic_version`` (``context.configure(version_table=...)`` in
``schema/env.py``), never in ``alembic_version``, which is Optuna's own Alembic table in the same
database: the two migration histories never meet.

The version of record stays ``autotune_meta.schema_version``: every autotune before Alembic reads
it (and refuses a store newer than itself), and stores they wrote have no Alembic table. So an
upgrade stamps Alembic's table from it, then lets Alembic run the revisions up to this
autotune's, then writes the number back. A new database gets the current schema from the table
definitions and is stamped at the newest revision. Everything runs on the caller's connection,
inside its one transaction, so stored studies survive upgrades or nothing changes.

To change the schema: edit ``tables.py``, add the revision that alters existing databases the
same way (``schema/versions/000n_*.py``, ``down_revision`` the previous one; ``alembic
revision`` with ``script_location`` ``autotune/store/schema`` writes the skeleton from
``script.py.mako``), and bump ``SCHEMA_VERSION``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, insert, inspect, select, text, update

from autotune.errors import StoreError
from autotune.store.tables import Base, MetaRow

SCHEMA_VERSION = 8
"""The newest revision's number (a unit test keeps it equal to Alembic's head)."""

VERSION_TABLE = "autotune_alembic_version"
"""Alembic's version table for autotune's schema (Optuna's is ``alembic_version``)."""

SCRIPT_LOCATION = Path(__file__).with_name("schema")
"""Alembic's script directory: ``env.py`` and ``versions/``."""


def revision(version: int) -> str:
    """The Alembic revision id of schema ``version`` (``"0005"``)."""
    return f"{version:04d}"


RENAMED_LATENCY_COLUMNS = {
    "ttft_ms_p50": "median_ttft_ms",
    "ttft_ms_p99": "p99_ttft_ms",
    "tpot_ms_p50": "median_tpot_ms",
    "tpot_ms_p99": "p99_tpot_ms",
    "itl_ms_p50": "median_itl_ms",
    "itl_ms_p99": "p99_itl_ms",
}
"""Schema 7's renames: the latency columns spelled as vLLM's benchmark JSON spells them."""


def add_column(conn: Connection, table: str, column_ddl: str) -> None:
    """Helper for revisions: ``ALTER TABLE ... ADD COLUMN`` unless it exists already."""
    name = column_ddl.split()[0]
    if name not in {c["name"] for c in inspect(conn).get_columns(table)}:
        conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column_ddl}"))


def current_version(conn: Connection) -> int | None:
    """The stored schema version, or None when the database has no autotune tables."""
    if not inspect(conn).has_table(MetaRow.__tablename__):
        return None
    value = conn.execute(
        select(MetaRow.value).where(MetaRow.key == "schema_version")
    ).scalar_one_or_none()
    return int(value) if value is not None else None


def is_current(conn: Connection) -> bool:
    """Whether the stored schema is this autotune's (:data:`SCHEMA_VERSION`, read at call time:
    tests change the target version)."""
    return current_version(conn) == SCHEMA_VERSION


def alembic_revision(conn: Connection) -> str | None:
    """The revision Alembic's version table holds (None: not stamped, e.g. a pre-Alembic store)."""
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def head(script_location: Path | None = None) -> str:
    """The newest revision in the script directory."""
    from alembic.script import ScriptDirectory

    found = ScriptDirectory(str(script_location or SCRIPT_LOCATION)).get_current_head()
    if found is None:
        raise StoreError(f"no schema revisions in {script_location or SCRIPT_LOCATION}")
    return found


def upgrade(
    conn: Connection, target: int | None = None, script_location: Path | None = None
) -> int:
    """Create or migrate the autotune schema in ``conn``; returns the version it ends at."""
    target = SCHEMA_VERSION if target is None else target
    version = current_version(conn)
    if version is None:
        Base.metadata.create_all(conn)
        conn.execute(insert(MetaRow).values(key="schema_version", value=str(target)))
        _stamp_new(conn, script_location, revision(target))
        return target
    if version > target:
        raise StoreError(
            f"the database has schema version {version}, newer than this autotune's "
            f"({target}); upgrade autotune"
        )
    if alembic_revision(conn) != revision(version):  # stamp from the version of record
        _alembic(conn, script_location, "stamp", revision(version), purge=True)
    if version < target:
        _alembic(conn, script_location, "upgrade", revision(target))
        conn.execute(
            update(MetaRow).where(MetaRow.key == "schema_version").values(value=str(target))
        )
    # Tables added in later versions (create_all skips existing ones).
    Base.metadata.create_all(conn)
    return target


@functools.cache
def _scripts() -> Any:
    """Alembic's view of the installed revisions (package data: they do not change while a
    process runs), loaded once per process."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(SCRIPT_LOCATION))


def _stamp_new(conn: Connection, script_location: Path | None, to: str) -> None:
    """Stamp a new database at ``to`` in autotune's version table: what ``alembic stamp`` does
    through ``schema/env.py``, without loading the environment and the scripts for every store
    created (a new database runs no migration)."""
    if script_location is not None:
        _alembic(conn, script_location, "stamp", to)
        return
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    context.stamp(_scripts(), to)


def _alembic(
    conn: Connection, script_location: Path | None, command: str, to: str, purge: bool = False
) -> None:
    """Run Alembic's ``stamp`` or ``upgrade`` to revision ``to`` on ``conn`` (``schema/env.py``
    configures it with this connection and the version table)."""
    from alembic import command as commands
    from alembic.config import Config
    from alembic.util.exc import CommandError

    config = Config()
    location = str(script_location or SCRIPT_LOCATION)
    config.set_main_option("script_location", location.replace("%", "%%"))
    config.attributes["connection"] = conn
    try:
        if command == "stamp":
            commands.stamp(config, to, purge=purge)
        else:
            commands.upgrade(config, to)
    except CommandError as exc:  # a revision missing from this install's script directory
        raise StoreError(f"schema migration to version {int(to)} failed: {exc}") from None
