"""Shared fixtures: an isolated store per test, and a CLI runner that reports like `autotune`;
the unit selection's guard: in ``make test-unit``'s selection vLLM cannot be imported (the
code runs its "vLLM not installed" path), and the session fails if vLLM got imported anyway;
and the unit processes' garbage-collector settings (``pytest_collection_finish``)."""

from __future__ import annotations

import gc
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


HEAVY_MARKS = ("integration", "models", "contract", "vllm")
"""What ``make test-unit`` deselects: real engines, Ray, servers, the tiny models' training,
PostgreSQL, vLLM's own classes."""


GC_THRESHOLD = (50_000, 20, 100)
"""The test processes' garbage-collector thresholds (CPython's are 700, 10, 10)."""


def pytest_collection_finish(session: pytest.Session) -> None:
    """Collect fewer times, and never again through what collection imported.

    A test process holds every library the suite imports (SQLAlchemy, Optuna, pandas, torch, ...)
    and allocates many short-lived objects (ORM rows, Optuna trials): with CPython's thresholds
    it ran 17 full collections over that heap in six unit modules, 13 % of their CPU time
    (``gc.callbacks``). ``gc.freeze()`` moves the objects alive after collection out of every
    later collection; the higher thresholds make young collections rarer. Cycles are still
    collected, later. Only the unit selection's processes change (the real engines' tests keep
    CPython's defaults, as does the product)."""
    if not _unit_selection(session.config):
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that need the trained tiny models (the ``tiny_dir`` fixture builds them, minutes on
    2 cores the first time) are marked ``models``: ``make test-unit`` leaves them out."""
    for item in items:
        if "tiny_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.models)


class _NoVLLM:
    """A meta-path finder that makes vLLM look absent (``find_spec`` and ``import`` alike) and
    notes who asked: the unit selection then runs as on a machine that only replays
    landscapes, the configuration the code supports without vLLM."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "vllm" or name.startswith("vllm."):
            self.asked.append(os.environ.get("PYTEST_CURRENT_TEST", "collection").split(" ")[0])
            raise ModuleNotFoundError(f"No module named {name!r} (the unit selection)")
        return None


_NO_VLLM = _NoVLLM()


def _unit_selection(config: pytest.Config) -> bool:
    """What ``make test-unit`` selects: a mark expression that leaves out ``integration`` and
    ``vllm`` (and with them every test that starts an engine, a server or Ray)."""
    expr = str(config.getoption("markexpr", "") or "")
    return "not integration" in expr and "not vllm" in expr


def pytest_configure(config: pytest.Config) -> None:
    """In the unit selection vLLM cannot be imported (collection included); a vLLM imported
    before this point fails the session (see :func:`pytest_sessionfinish`)."""
    if _unit_selection(config):
        config.stash[_VLLM_BEFORE] = "vllm" in sys.modules
        sys.meta_path.insert(0, _NO_VLLM)
        real = importlib.util.find_spec

        def find_spec(name: str, package: str | None = None) -> Any:
            if name == "vllm" or name.startswith("vllm."):
                return None  # "not installed", as the guard makes it
            return real(name, package)

        importlib.util.find_spec = find_spec


_VLLM_BEFORE = pytest.StashKey[bool]()


_WORKERS = pytest.StashKey[list[dict[str, Any]]]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist (``-n``): each worker's guard report reaches the main process."""
    report = getattr(node, "workeroutput", {}).get("autotune_vllm_guard")
    if report is not None:
        node.config.stash.setdefault(_WORKERS, []).append(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The unit selection imported no vLLM: say which tests ran without it, and fail when vLLM
    got in anyway (imported before the guard, e.g. by a plugin or a conftest). Under
    pytest-xdist each worker hands its report to the main process, which judges them all."""
    config = session.config
    if not _unit_selection(config):
        return
    imported = "vllm" in sys.modules or config.stash.get(_VLLM_BEFORE, False)
    if hasattr(config, "workeroutput"):  # an xdist worker: the main process reports
        config.workeroutput["autotune_vllm_guard"] = {
            "asked": _NO_VLLM.asked,
            "imported": imported,
        }
        return
    workers = config.stash.get(_WORKERS, [])
    asked = sorted(set(_NO_VLLM.asked).union(*(w["asked"] for w in workers)))
    imported = imported or any(w["imported"] for w in workers)
    if asked:
        print(
            f"\nautotune: {len(asked)} tests ran as on a machine without vLLM "
            "(`make test` runs them with it): "
            + ", ".join(asked[:10])
            + (" ..." if asked[10:] else "")
        )
    if imported:
        print("\nautotune: vLLM was imported in the unit selection")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
