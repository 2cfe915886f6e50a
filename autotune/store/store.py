"""The study store: :class:`Store`, one handle on the database that every layer reads and writes.

SQLite by default (``studies/autotune.db``, WAL mode, busy timeout); any SQLAlchemy URL works
(PostgreSQL for several drivers). The same database is the Optuna storage of every study.

The handle is put together from the store's concepts, each in its module: the connection and
its retry (``connection``), leases and the write fence (``leases``), the queries and writes of
studies, trials, measurements, recommendations and verifications (``repositories``) and
Optuna's tables (``optuna_schema``). Here: the Optuna storage on the store, fenced by the
driver's lease, and which of the store's calls are retried while the store is transiently lost.
"""

from __future__ import annotations

from typing import Any

from autotune.store.connection import _retried
from autotune.store.optuna_schema import ensure_schema, open_storage
from autotune.store.repositories import Repositories


class Store(Repositories):
    """A handle on the study store at ``url``.

    Read-only use of a SQLite file that does not exist yet creates nothing: queries answer
    empty. The schema is created (or migrated) on the first write.
    """

    def __init__(self, url: str | None = None):
        super().__init__(url)
        self._optuna_ready = False
        """Optuna's tables were found or created (:meth:`ensure_optuna_schema`)."""

    def optuna_storage(self, **kwargs: Any) -> Any:
        """Optuna's ``RDBStorage`` on this store, its tables created first under the schema lock
        (Optuna creates them on first use, and N drivers doing that at once collide: ``table
        studies already exists``, ``UNIQUE constraint failed: alembic_version``); its writes
        are fenced by the lease this store holds (:meth:`_fence_engine`)."""
        self.ensure_optuna_schema()
        storage = open_storage(self.url, **kwargs)
        self._fence_engine(storage.engine)
        return storage

    def ensure_optuna_schema(self) -> None:
        """Create Optuna's tables unless they exist, serialized with every other creator."""
        if self._optuna_ready:  # tables once there stay there: checked once per Store
            return
        self._connect()
        assert self._engine is not None
        ensure_schema(self._engine, self.url, self._one_line)
        self._optuna_ready = True


RETRIED = (
    "create_study",
    "get_study",
    "list_studies",
    "delete_study",
    "set_study_status",
    "start_trial",
    "record_engine",
    "add_measurement",
    "finish_trial",
    "abandon_running_trials",
    "reopen_trial",
    "trial_measurements",
    "acquire_lease",
    "lease_holder",
    "release_lease",
    "trials",
    "measurements",
    "replace_recommendations",
    "recommendations",
    "save_verification",
    "verifications",
)
"""The Store calls whose transaction runs again while the store is transiently lost (a
PostgreSQL restart, a SQLite file locked past its busy timeout)."""

for _name in RETRIED:
    setattr(Store, _name, _retried(getattr(Store, _name)))
