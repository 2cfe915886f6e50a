"""``python -m autotune`` (autotune/__main__.py) is the same command line as ``autotune``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from autotune import __version__

REPO = Path(__file__).resolve().parents[2]


def test_python_dash_m_autotune_runs_the_cli() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", "--version"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"autotune, version {__version__}"
