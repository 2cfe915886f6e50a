"""Optuna's tables in the store: created once, under the schema lock, faster than Optuna would.

The same database is the Optuna storage of every study (``RDBStorage``). Optuna creates its
tables on first use, and N drivers doing that at once collide, so the store creates them first
under :func:`autotune.store.connection.schema_lock` (:func:`ensure_schema`). Doing that and
opening storages the way Optuna does costs tens of milliseconds each time (it loads every
migration script), so this module keeps Optuna's head revision and script directory once per
process and builds later schemas from Optuna's own models. That goes through Optuna's private
modules (``optuna.storages._rdb.models``, ``RDBStorage._version_manager._create_alembic_script``):
``tests/unit/test_store_optuna_schema.py`` pins every private name used and fails, naming it,
should an Optuna upgrade move one; at run time a missing one falls back to Optuna's own path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, func, insert, inspect, select, text
from sqlalchemy.exc import SQLAlchemyError

from autotune.errors import StoreError
from autotune.store.connection import _sqlite_path, schema_lock
from autotune.store.optuna_retry import OPTUNA_CALLS as _OPTUNA_CALLS  # noqa: F401 (tests read it here)
from autotune.store.optuna_retry import _retrying_rdb

OPTUNA_MODELS_NEEDED = ("BaseModel", "VersionInfoModel", "SCHEMA_VERSION")
"""The names of Optuna's private ``optuna.storages._rdb.models`` that the fast path reads."""


def open_storage(url: str, **kwargs: Any) -> Any:
    """Optuna's ``RDBStorage`` on the store at ``url`` whose tables exist (:func:`ensure_schema`
    first), its calls retried while the store is transiently lost, each write stored once
    (:mod:`autotune.store.optuna_retry`)."""
    import optuna

    if url.startswith("sqlite"):
        kwargs.setdefault("engine_kwargs", {"connect_args": {"timeout": 30}})
    else:
        kwargs.setdefault("engine_kwargs", {"pool_pre_ping": True})
    kwargs.setdefault("skip_table_creation", True)  # they exist: just ensured
    return _optuna_rdb(optuna, url, **kwargs)


def ensure_schema(engine: Engine, url: str, one_line: Callable[[BaseException], str]) -> None:
    """Create Optuna's tables unless they exist, serialized with every other creator
    (``one_line``: a database error as the store's messages print it)."""
    if _optuna_schema_current(engine):
        return
    import optuna

    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 30}}
    with schema_lock(engine, _sqlite_path(url)):
        try:
            _create_optuna_schema(optuna, engine, url, **kwargs)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot create Optuna's tables: {one_line(exc)}") from None


_OPTUNA_HEAD: list[str] = []
"""The head revision of the installed Optuna's table schema, read once per process."""


def _optuna_rdb(optuna: Any, url: str, **kwargs: Any) -> Any:
    """``optuna.storages.RDBStorage(url, **kwargs)`` with Optuna's schema compatibility check
    done against the head revision read once per process: Optuna's own check loads every one
    of its migration scripts on each storage it opens (tens of milliseconds, several times per
    study run). A store whose tables are not at the head gets Optuna's own check and message."""
    rdb = _retrying_rdb(optuna)
    storage = rdb(url, skip_compatibility_check=True, **kwargs)
    if not _OPTUNA_HEAD:
        _OPTUNA_HEAD.append(storage.get_head_version())
    if storage.get_current_version() != _OPTUNA_HEAD[0]:
        storage.engine.dispose()
        storage = rdb(url, **kwargs)
    return storage


_OPTUNA_SCRIPT: list[Any] = []
"""Optuna's own migration scripts (an Alembic ``ScriptDirectory``), loaded once per process."""


def _create_optuna_schema(optuna: Any, engine: Engine, url: str, **kwargs: Any) -> None:
    """Create Optuna's tables in a new store, as ``RDBStorage`` does, with its Alembic scripts
    loaded once per process.

    On a new database ``RDBStorage`` creates its tables from its models, writes its version row
    and stamps ``alembic_version`` at its head revision, loading its 20-odd migration scripts
    twice to do so (their module bodies declare SQLAlchemy models: about 0.2 s of CPU each time
    on 2 cores, per store created), on two engines of its own. The first store a process creates
    goes through Optuna's own path, and its script directory is kept; later ones get the same
    three steps from Optuna's own models and scripts in one transaction on the store's engine
    (Alembic's ``MigrationContext.stamp``). The result is the same tables and rows
    (``tests/unit/test_store_optuna_schema.py`` checks it against a store Optuna made alone).
    Should Optuna's internals move, or the database hold part of a schema, its own path is used.
    """
    models = _optuna_models()
    if _OPTUNA_SCRIPT and _OPTUNA_HEAD and models is not None:
        from alembic.runtime.migration import MigrationContext

        with engine.begin() as conn:
            context = MigrationContext.configure(conn)
            if context.get_current_revision() is None:
                models.BaseModel.metadata.create_all(conn)
                version = models.VersionInfoModel.__table__
                if conn.execute(select(func.count()).select_from(version)).scalar_one() == 0:
                    conn.execute(
                        insert(version).values(
                            schema_version=models.SCHEMA_VERSION,
                            library_version=optuna.__version__,
                        )
                    )
                context.stamp(_OPTUNA_SCRIPT[0], _OPTUNA_HEAD[0])
                return
    storage = _optuna_rdb(optuna, url, **kwargs)
    try:
        manager = getattr(storage, "_version_manager", None)
        make = getattr(manager, "_create_alembic_script", None)
        if make is not None and not _OPTUNA_SCRIPT:
            _OPTUNA_SCRIPT.append(make())
    finally:
        storage.engine.dispose()


def _optuna_models() -> Any:
    """Optuna's table models (``optuna.storages._rdb.models``), or None should they move."""
    try:
        from optuna.storages._rdb import models
    except ImportError:
        return None
    return models if all(hasattr(models, n) for n in OPTUNA_MODELS_NEEDED) else None


def _optuna_schema_current(engine: Engine) -> bool:
    with engine.connect() as conn:
        names = set(inspect(conn).get_table_names())
        if not {"studies", "trials", "version_info", "alembic_version"} <= names:
            return False
        return int(conn.execute(text("SELECT count(*) FROM alembic_version")).scalar_one()) > 0
