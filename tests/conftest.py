"""Shared fixtures: an isolated store per test, and a CLI runner that reports like `autotune`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "autotune.db"


@pytest.fixture
def autotune(db_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Run the CLI in-process exactly as the console script does (errors → one line + code)."""
    from autotune.cli import cli
    from autotune.cli._common import report_errors

    monkeypatch.chdir(REPO)
    monkeypatch.delenv("AUTOTUNE_DB", raising=False)

    def run(*args: str, db: bool = True) -> CliResult:
        argv = (["--db", str(db_path)] if db else []) + list(args)
        runner = CliRunner()
        with runner.isolation() as streams:
            code = report_errors(cli, argv)
            out, err = streams[0].getvalue().decode(), streams[1].getvalue().decode()
        return CliResult(code, out, err)

    return run


def file_digest(path: Path) -> str | None:
    """Digest of a SQLite store with its WAL, or None when it does not exist."""
    if not path.exists():
        return None
    from sqlalchemy import create_engine, text

    engine = create_engine(f"sqlite:///{path}")
    h = hashlib.sha256()
    with engine.connect() as conn:
        for (name,) in conn.execute(
            text("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")
        ):
            for row in conn.execute(text(f'SELECT * FROM "{name}" ORDER BY 1')):
                h.update(repr(tuple(row)).encode())
    engine.dispose()
    return h.hexdigest()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that need the trained tiny models (the ``tiny_dir`` fixture builds them, minutes on
    2 cores the first time) are marked ``models``: ``make test-unit`` leaves them out."""
    for item in items:
        if "tiny_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.models)
