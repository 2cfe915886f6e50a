"""2: the ``autotune_leases`` table (one live driver per study)."""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from autotune.store.tables import LeaseRow

    LeaseRow.__table__.create(op.get_bind(), checkfirst=True)  # type: ignore[attr-defined]
