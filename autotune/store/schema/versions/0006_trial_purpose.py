"""6: why a trial ran a config again (``drift``, ``confirm``); trials stored before stay NULL (a
search run; a drift check's second baseline is still told by its order)."""

from alembic import op

from autotune.store.migrations import add_column

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_column(op.get_bind(), "autotune_trials", "purpose VARCHAR(16)")
