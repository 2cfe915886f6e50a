"""Alembic's environment for the autotune store: run on the connection the store passes in.

Alembic loads this file by path (``autotune.store.migrations`` runs every command); it is not
imported as a module. The version table is autotune's own (``autotune_alembic_version``), so it
never meets Optuna's ``alembic_version`` in the same database.
"""

from alembic import context

from autotune.store.migrations import VERSION_TABLE
from autotune.store.tables import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
