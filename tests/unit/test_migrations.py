"""The store's schema migrations (autotune.store.migrations) run by Alembic: their own version
table beside Optuna's, the head equal to SCHEMA_VERSION, a pre-Alembic store stamped from its
``autotune_meta`` version and upgraded, and the revisions shipped as package data."""

from __future__ import annotations

import configparser
import fnmatch
from pathlib import Path

from sqlalchemy import create_engine, inspect, text

from autotune.store import Store, migrations

REPO = Path(__file__).resolve().parents[2]


def _store(path: Path) -> Store:
    store = Store(str(path))
    store.create_study(
        name="s", description="", model_alias=None, model="m", source="", resolved_json="{}"
    )
    return store


def test_the_head_revision_is_the_schema_version() -> None:
    assert migrations.head() == migrations.revision(migrations.SCHEMA_VERSION) == "0008"


def test_autotune_and_optuna_keep_their_own_version_tables(tmp_path: Path) -> None:
    store = _store(tmp_path / "a.db")
    store.ensure_optuna_schema()
    store.dispose()
    with create_engine(f"sqlite:///{tmp_path / 'a.db'}").connect() as conn:
        tables = set(inspect(conn).get_table_names())
        ours = conn.execute(text("SELECT version_num FROM autotune_alembic_version")).all()
        optunas = conn.execute(text("SELECT version_num FROM alembic_version")).all()
    assert {"autotune_alembic_version", "alembic_version"} <= tables
    assert ours == [("0008",)]
    assert optunas and optunas != ours  # Optuna's own history, untouched by ours


def test_a_store_from_before_alembic_is_stamped_and_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    _store(path).dispose()
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:  # what the autotune of schema 4 (hand-written steps) left
        conn.execute(text("DROP TABLE autotune_alembic_version"))
        for column in ("loop_share", "distinct_4gram_ratio", "loop_at_max_tokens_share"):
            conn.execute(text(f"ALTER TABLE autotune_measurements DROP COLUMN {column}"))
        conn.execute(text("UPDATE autotune_meta SET value='4' WHERE key='schema_version'"))
    engine.dispose()
    store = Store(str(path))
    assert [s.name for s in store.list_studies()] == ["s"]
    store.dispose()
    with engine.connect() as conn:
        cols = {c["name"] for c in inspect(conn).get_columns("autotune_measurements")}
        assert {"loop_share", "distinct_4gram_ratio", "loop_at_max_tokens_share"} <= cols
        assert migrations.current_version(conn) == migrations.SCHEMA_VERSION
        assert migrations.alembic_revision(conn) == "0008"


def test_the_revisions_ship_as_package_data() -> None:
    """setup.cfg's package_data covers every file of the script directory, so a non-editable
    install can migrate."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    patterns = cfg["options.package_data"]["autotune.store"].replace(",", " ").split()
    store_dir = REPO / "autotune" / "store"
    files = [
        p.relative_to(store_dir).as_posix()
        for p in migrations.SCRIPT_LOCATION.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]
    assert len(files) >= 7  # env.py, script.py.mako, five revisions
    for name in files:
        assert any(fnmatch.fnmatch(name, pat) for pat in patterns), name
    assert any(
        line.strip().startswith("alembic")
        for line in cfg["options"]["install_requires"].splitlines()
    )
