"""1: the first schema (studies, trials, measurements, recommendations, meta).

A new store is created from the table definitions at the newest revision and stamped there; a
store of schema 1 was created by an autotune before Alembic, from those tables as they were
then, and is stamped here from its ``autotune_meta`` version. Nothing to run.
"""

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass
