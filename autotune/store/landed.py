"""What the first attempt of a retried store write stored, when it landed.

A write whose ``COMMIT`` reached the server but whose acknowledgement was lost fails in the
client as a lost connection, and the store runs it again
(:func:`autotune.store.connection._with_retry`). Before writing, the retry looks for the row
its first attempt would have written: the same values, stamped (``created_at``, this process's
clock) no earlier than the first attempt began. Only a retry looks: two equal writes one after
the other are both stored. (A trial start, a measurement and the lease look for theirs in
``autotune.store.repositories`` and ``autotune.store.leases``.)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection, select

from autotune.store.connection import retry_since
from autotune.store.tables import StudyRow, VerificationRow

_STUDY = StudyRow.__table__
_VERIFICATION = VerificationRow.__table__


def landed_study(conn: Connection, study_id: int, values: Mapping[str, Any]) -> Any:
    """The row of study ``study_id`` if a retried creation's first attempt wrote it (the
    inserted ``values``, nothing run yet), else None."""
    row = conn.execute(select(_STUDY).where(_STUDY.c.id == study_id)).mappings().first()
    if row is None or row["status"] != "created" or not _since(row["created_at"]):
        return None
    return row if all(row[k] == v for k, v in values.items()) else None


def landed_verification(conn: Connection, values: Mapping[str, Any]) -> bool:
    """Whether a retried verification's first attempt stored ``values`` (its newest row)."""
    table = _VERIFICATION
    row = (
        conn.execute(
            select(table)
            .where(table.c.study_id == values["study_id"])
            .order_by(table.c.id.desc())
            .limit(1)
        )
        .mappings()
        .first()
    )
    if row is None or not _since(row["created_at"]):
        return False
    return all(_json(row[k]) == _json(v) for k, v in values.items())


def _since(created_at: datetime | None) -> bool:
    if created_at is None:
        return False
    if created_at.tzinfo is None:  # SQLite keeps the UTC time without its zone
        created_at = created_at.replace(tzinfo=timezone.utc)
    return created_at >= retry_since()


def _json(value: Any) -> str:
    """``value`` as the store's JSON column reads it back (tuples as lists, keys sorted)."""
    return json.dumps(value, sort_keys=True, default=str)
