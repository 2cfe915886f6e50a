"""`make test` and `make demo` install first on a fresh clone, and only when needed after that."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")


def _dry_run(target: str, venv: Path) -> str:
    out = subprocess.run(
        ["make", "-n", target, f"VENV={venv}"], cwd=REPO, capture_output=True, text=True, check=True
    )
    return out.stdout


@pytest.mark.parametrize("target", ["test", "demo"])
def test_fresh_clone_installs_first(target: str, tmp_path: Path):
    plan = _dry_run(target, tmp_path / "venv").splitlines()
    install = next(i for i, line in enumerate(plan) if "-m venv" in line)
    run = next(i for i, line in enumerate(plan) if " -m pytest" in line or "study create" in line)
    assert install < run
    assert any(line.startswith("touch") and ".stamp" in line for line in plan[install:run])


def test_installed_venv_is_not_reinstalled_until_setup_cfg_changes(tmp_path: Path):
    venv = tmp_path / "venv"
    venv.mkdir()
    stamp = venv / ".stamp"
    stamp.touch()
    newer = max((REPO / "setup.cfg").stat().st_mtime, (REPO / "setup.py").stat().st_mtime) + 10
    os.utime(stamp, (newer, newer))
    assert "-m venv" not in _dry_run("test", venv)
    os.utime(stamp, (newer - 1000, newer - 1000))  # setup.cfg changed since the install
    assert "-m venv" in _dry_run("test", venv)
