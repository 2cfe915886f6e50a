"""The store's creation of Optuna's tables (``autotune.store.optuna_schema``): a store created
after the first one in a process (Alembic scripts loaded once) holds exactly what Optuna's own
``RDBStorage`` creates alone, and Optuna's compatibility check accepts it.

The fast path reads Optuna's private modules. The first test pins every private name it uses:
an Optuna upgrade that moves or renames one fails here, naming it (at run time the store would
quietly fall back to Optuna's own, slower path)."""

from __future__ import annotations

import importlib
import inspect as pyinspect
from pathlib import Path

import optuna
from sqlalchemy import create_engine, inspect, text

from autotune.store import Store
from autotune.store import optuna_schema as store_module

PRIVATE_MODELS = "optuna.storages._rdb.models"
"""Optuna's private table models: the fast path creates the tables from them."""


def _fail(name: str, why: str) -> str:
    return (
        f"Optuna {optuna.__version__}: the private {name} that autotune.store.optuna_schema "
        f"uses {why}; adapt the store's Optuna schema code (or drop its fast path)"
    )


def test_the_private_optuna_names_the_store_uses_are_there(tmp_path: Path) -> None:
    try:
        models = importlib.import_module(PRIVATE_MODELS)
    except ImportError:
        raise AssertionError(_fail(PRIVATE_MODELS, "cannot be imported")) from None
    assert set(store_module.OPTUNA_MODELS_NEEDED) == {
        "BaseModel",
        "VersionInfoModel",
        "SCHEMA_VERSION",
    }
    for name in store_module.OPTUNA_MODELS_NEEDED:
        assert hasattr(models, name), _fail(f"{PRIVATE_MODELS}.{name}", "is gone")
    assert store_module._optuna_models() is models
    assert hasattr(models.BaseModel, "metadata"), _fail(
        f"{PRIVATE_MODELS}.BaseModel.metadata", "is gone"
    )
    columns = set(models.VersionInfoModel.__table__.c.keys())
    assert {"schema_version", "library_version"} <= columns, _fail(
        f"{PRIVATE_MODELS}.VersionInfoModel", f"has other columns: {sorted(columns)}"
    )
    assert isinstance(models.SCHEMA_VERSION, int), _fail(
        f"{PRIVATE_MODELS}.SCHEMA_VERSION", "is no int"
    )

    params = pyinspect.signature(optuna.storages.RDBStorage).parameters
    for flag in ("skip_compatibility_check", "skip_table_creation", "engine_kwargs"):
        assert flag in params, _fail(f"RDBStorage({flag}=...)", "is no parameter any more")
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'o.db'}")
    try:
        manager = getattr(storage, "_version_manager", None)
        assert manager is not None, _fail("RDBStorage._version_manager", "is gone")
        make = getattr(manager, "_create_alembic_script", None)
        assert callable(make), _fail(
            "RDBStorage._version_manager._create_alembic_script", "is gone"
        )
        script = make()
        assert script.get_current_head() == storage.get_head_version(), _fail(
            "_create_alembic_script()", "no longer returns Optuna's Alembic ScriptDirectory"
        )
        assert storage.get_current_version() == storage.get_head_version()
    finally:
        storage.engine.dispose()
    # The storage calls the store retries: one that vanished would silently go unretried.
    missing = [n for n in store_module._OPTUNA_CALLS if not callable(getattr(storage, n, None))]
    assert missing == [], _fail(f"RDBStorage methods {missing}", "are gone")


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

    first, later = _schema(tmp_path / "first.db"), _schema(tmp_path / "later.db")
    alone = _schema(tmp_path / "alone.db")
    assert later == alone and first == alone
    assert sorted(later[0]) == sorted(alone[0]) and "studies" in later[0]  # the same tables
    assert later[1] == alone[1] == [store_module._OPTUNA_HEAD[0]] and len(later[2]) == 1
    # Optuna's own check (head revision, version row) passes on the store made the fast way.
    optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'later.db'}").engine.dispose()
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'later.db'}", study_name="s")
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=1.0))
    assert len(study.trials) == 1
