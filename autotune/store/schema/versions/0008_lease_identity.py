"""8: a lease names its driver beyond host and PID (a random driver id, the PID namespace, the
kernel's boot id) and counts its heartbeats (``beat``); leases stored before keep NULL there."""

from alembic import op

from autotune.store.migrations import add_column

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    conn = op.get_bind()
    for ddl in ("driver_id VARCHAR(64)", "pid_ns VARCHAR(64)", "boot_id VARCHAR(64)"):
        add_column(conn, "autotune_leases", ddl)
    add_column(conn, "autotune_leases", "beat INTEGER NOT NULL DEFAULT 0")
