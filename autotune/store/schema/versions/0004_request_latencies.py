"""4: per-request (TTFT, TPOT) of each measurement, for goodput under any SLO (rows stored
before stay NULL: their goodput is unknown, never guessed)."""

from alembic import op

from autotune.store.migrations import add_column

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_column(op.get_bind(), "autotune_measurements", "request_latencies_ms JSON")
