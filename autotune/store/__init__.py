"""Everything SQLAlchemy: tables, the scoped write session, migrations and queries.

Queries return frozen records (``autotune.store.records``), never live ORM rows.
"""

from autotune.store.migrations import SCHEMA_VERSION
from autotune.store.records import (
    FINISHED_STATES,
    MEASURED_STATES,
    MeasurementRecord,
    RecommendationRecord,
    StudyRecord,
    TrialRecord,
)
from autotune.store.store import DEFAULT_DB, LEASE_TTL_S, Lease, LeaseHolder, Store, resolve_url

__all__ = [
    "DEFAULT_DB",
    "FINISHED_STATES",
    "LEASE_TTL_S",
    "MEASURED_STATES",
    "SCHEMA_VERSION",
    "Lease",
    "LeaseHolder",
    "MeasurementRecord",
    "RecommendationRecord",
    "Store",
    "StudyRecord",
    "TrialRecord",
    "resolve_url",
]
