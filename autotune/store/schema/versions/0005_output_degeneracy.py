"""5: how degenerate each measurement's outputs were (loop share, distinct 4-gram ratio, loops
that ran to max_tokens); rows stored before stay NULL: not checked, never guessed."""

from alembic import op

from autotune.store.migrations import add_column

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    conn = op.get_bind()
    for ddl in ("loop_share FLOAT", "distinct_4gram_ratio FLOAT", "loop_at_max_tokens_share FLOAT"):
        add_column(conn, "autotune_measurements", ddl)
