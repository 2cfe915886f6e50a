"""7: the latency columns renamed to vLLM's spelling (``p99_tpot_ms``, ``median_ttft_ms``, ...);
the values are untouched (``RENAME COLUMN``: SQLite 3.25+ and PostgreSQL)."""

from alembic import op
from sqlalchemy import inspect, text

from autotune.store.migrations import RENAMED_LATENCY_COLUMNS

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    conn = op.get_bind()
    have = {c["name"] for c in inspect(conn).get_columns("autotune_measurements")}
    for old, new in RENAMED_LATENCY_COLUMNS.items():
        if old in have and new not in have:
            conn.execute(text(f"ALTER TABLE autotune_measurements RENAME COLUMN {old} TO {new}"))
