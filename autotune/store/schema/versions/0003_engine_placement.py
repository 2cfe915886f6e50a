"""3: where each engine ran (Ray node id, device ids, engine start time)."""

from alembic import op

from autotune.store.migrations import add_column

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    conn = op.get_bind()
    for ddl in ("ray_node_id VARCHAR(64)", "device_ids VARCHAR(256)", "engine_started_at FLOAT"):
        add_column(conn, "autotune_trials", ddl)
    for ddl in ("ray_node_id VARCHAR(64)", "device_ids VARCHAR(256)"):
        add_column(conn, "autotune_measurements", ddl)
