"""The store's creation of Optuna's tables (``autotune.store.optuna_schema._create_optuna_schema``): a
store created after the first one in a process (Alembic scripts loaded once) holds exactly what
Optuna's own ``RDBStorage`` creates alone, and Optuna's compatibility check accepts it."""

from __future__ import annotations

from pathlib import Path

import optuna
from sqlalchemy import create_engine, inspect, text

from autotune.store import optuna_schema as store_module
from autotune.store import Store


def _schema(path: Path) -> tuple[dict[str, list[str]], list[str], list[tuple[object, ...]]]:
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            found = inspect(conn)
            tables = {
                t: sorted(c["name"] for c in found.get_columns(t))
                for t in sorted(found.get_table_names())
                if t in {"studies", "trials", "version_info", "alembic_version", "trial_values"}
                or t.startswith(("study_", "trial_"))
            }
            revision = [r[0] for r in conn.execute(text("SELECT version_num FROM alembic_version"))]
            info = [tuple(r) for r in conn.execute(text("SELECT * FROM version_info"))]
    finally:
        engine.dispose()
    return tables, revision, info


def test_a_later_store_holds_what_optuna_creates_alone(tmp_path: Path) -> None:
    Store(f"sqlite:///{tmp_path / 'first.db'}").ensure_optuna_schema()
    assert store_module._OPTUNA_SCRIPT and store_module._OPTUNA_HEAD  # the fast path is armed
    Store(f"sqlite:///{tmp_path / 'later.db'}").ensure_optuna_schema()
    optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'alone.db'}").engine.dispose()

    later, alone = _schema(tmp_path / "later.db"), _schema(tmp_path / "alone.db")
    assert later == alone
    assert later[1] == [store_module._OPTUNA_HEAD[0]] and len(later[2]) == 1
    # Optuna's own check (head revision, version row) passes on the store made the fast way.
    optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'later.db'}").engine.dispose()
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'later.db'}", study_name="s")
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=1.0))
    assert len(study.trials) == 1
