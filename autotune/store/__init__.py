"""Everything SQLAlchemy: tables, the scoped write session, migrations and queries.

Queries return frozen records (``autotune.store.records``), never live ORM rows. One concept per
module: ``connection`` (the URL, SQLite checks, the database's clock, the retry), ``leases``
(one live driver per study, the write fence), ``repositories`` (studies, trials, measurements,
recommendations, verifications), ``optuna_schema`` (Optuna's tables), ``tables`` and
``migrations`` (the schema), and ``store`` (:class:`Store`, which puts them together).
"""

from autotune.store.connection import DEFAULT_DB, resolve_url
from autotune.store.leases import LEASE_TTL_S, Lease, LeaseHolder
from autotune.store.migrations import SCHEMA_VERSION
from autotune.store.records import (
    FINISHED_STATES,
    MEASURED_STATES,
    MeasurementRecord,
    NewRecommendation,
    RecommendationRecord,
    StudyRecord,
    TrialRecord,
)
from autotune.store.store import Store

__all__ = [
    "DEFAULT_DB",
    "FINISHED_STATES",
    "LEASE_TTL_S",
    "MEASURED_STATES",
    "SCHEMA_VERSION",
    "Lease",
    "LeaseHolder",
    "MeasurementRecord",
    "NewRecommendation",
    "RecommendationRecord",
    "Store",
    "StudyRecord",
    "TrialRecord",
    "resolve_url",
]
