"""Schema versions and the explicit migrations between them.

A new database gets the current schema from the table definitions and is stamped with
``SCHEMA_VERSION``. An older database is brought forward one step at a time by the functions in
``MIGRATIONS`` (step ``n`` turns version ``n - 1`` into ``n``), inside one transaction, so stored
studies survive upgrades. To change the schema: edit ``tables.py``, bump ``SCHEMA_VERSION`` and
add the step that alters existing databases the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, insert, inspect, select, text, update

from autotune.errors import StoreError
from autotune.store.tables import Base, MetaRow

SCHEMA_VERSION = 6

Migration = Callable[[Connection], None]


def _add_leases(conn: Connection) -> None:
    """2: the ``autotune_leases`` table (one live driver per study)."""
    from autotune.store.tables import LeaseRow

    LeaseRow.__table__.create(conn, checkfirst=True)  # type: ignore[attr-defined]


def _v3_engine_placement(conn: Connection) -> None:
    """3: where each engine ran (Ray node id, device ids, engine start time)."""
    for ddl in ("ray_node_id VARCHAR(64)", "device_ids VARCHAR(256)", "engine_started_at FLOAT"):
        add_column(conn, "autotune_trials", ddl)
    for ddl in ("ray_node_id VARCHAR(64)", "device_ids VARCHAR(256)"):
        add_column(conn, "autotune_measurements", ddl)


def _v4_request_latencies(conn: Connection) -> None:
    """4: per-request (TTFT, TPOT) of each measurement, for goodput under any SLO (rows stored
    before stay NULL: their goodput is unknown, never guessed)."""
    add_column(conn, "autotune_measurements", "request_latencies_ms JSON")


def _v5_output_degeneracy(conn: Connection) -> None:
    """5: how degenerate each measurement's outputs were (loop share, distinct 4-gram ratio,
    loops that ran to max_tokens); rows stored before stay NULL: not checked, never guessed."""
    for ddl in (
        "loop_share FLOAT",
        "distinct_4gram_ratio FLOAT",
        "loop_at_max_tokens_share FLOAT",
    ):
        add_column(conn, "autotune_measurements", ddl)


RENAMED_LATENCY_COLUMNS = {
    "ttft_ms_p50": "median_ttft_ms",
    "ttft_ms_p99": "p99_ttft_ms",
    "tpot_ms_p50": "median_tpot_ms",
    "tpot_ms_p99": "p99_tpot_ms",
    "itl_ms_p50": "median_itl_ms",
    "itl_ms_p99": "p99_itl_ms",
}
"""Schema 6's renames: the latency columns spelled as vLLM's benchmark JSON spells them."""


def _v6_vllm_spelling(conn: Connection) -> None:
    """6: the latency columns renamed to vLLM's spelling (``p99_tpot_ms``, ``median_ttft_ms``,
    ...); the values are untouched (``RENAME COLUMN``: SQLite 3.25+ and PostgreSQL)."""
    have = {c["name"] for c in inspect(conn).get_columns("autotune_measurements")}
    for old, new in RENAMED_LATENCY_COLUMNS.items():
        if old in have and new not in have:
            conn.execute(text(f"ALTER TABLE autotune_measurements RENAME COLUMN {old} TO {new}"))


MIGRATIONS: dict[int, Migration] = {
    2: _add_leases,
    3: _v3_engine_placement,
    4: _v4_request_latencies,
    5: _v5_output_degeneracy,
    6: _v6_vllm_spelling,
}
"""Step functions by the version they produce (2, 3, ...)."""


def add_column(conn: Connection, table: str, column_ddl: str) -> None:
    """Helper for migrations: ``ALTER TABLE ... ADD COLUMN`` unless it exists already."""
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


def upgrade(conn: Connection, target: int = SCHEMA_VERSION) -> int:
    """Create or migrate the autotune schema in ``conn``; returns the version it ends at."""
    version = current_version(conn)
    if version is None:
        Base.metadata.create_all(conn)
        conn.execute(insert(MetaRow).values(key="schema_version", value=str(target)))
        return target
    if version > target:
        raise StoreError(
            f"the database has schema version {version}, newer than this autotune's "
            f"({target}); upgrade autotune"
        )
    while version < target:
        step = MIGRATIONS.get(version + 1)
        if step is None:
            raise StoreError(f"no migration from schema version {version} to {version + 1}")
        step(conn)
        version += 1
        conn.execute(
            update(MetaRow).where(MetaRow.key == "schema_version").values(value=str(version))
        )
    # Tables added in later versions (create_all skips existing ones).
    Base.metadata.create_all(conn)
    return version
