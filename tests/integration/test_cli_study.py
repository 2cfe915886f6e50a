"""`autotune study run` stops cleanly (autotune.cli.study): SIGTERM and Ctrl-C sent to a real
driver process running a replay study through the Ray pool leave the study and its running
trial ``interrupted``, print the resume command, and show no Ray stack dump."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.store import Store

# Each case is a driver process that starts a local Ray cluster: not for the unit selection.
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
KNOBS = REPO / "bench" / "landscapes" / "cpu-tiny-knobs.csv"


def _cli(db: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "autotune.cli", "--db", str(db), *args]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "AUTOTUNE_DB": ""}


def _one_done_and_one_measuring(store: Store, name: str, said: str) -> bool:
    if "[1/" not in said:
        return False
    states = [t.state for t in store.trials(store.get_study(name))]
    return "complete" in states and "running" in states


@pytest.mark.parametrize(
    ("name", "send", "code", "why"),
    [
        # what timeout, Slurm and Kubernetes send: to the driver alone
        ("term", lambda p: p.send_signal(signal.SIGTERM), 143, "SIGTERM"),
        # Ctrl-C on a terminal: SIGINT to the whole foreground process group. The driver
        # starts with SIGINT ignored, as a shell without job control starts a background
        # command (a CI script's `make test &`): Python keeps SIG_IGN, and before `study run`
        # set its own handler such a driver ignored Ctrl-C and finished the study (exit 0).
        ("ctrlc", lambda p: os.killpg(p.pid, signal.SIGINT), 130, "Ctrl-C"),
    ],
)
def test_a_signal_stops_the_run_cleanly(tmp_path: Path, name, send, code, why) -> None:
    db = tmp_path / "stop.db"
    made = subprocess.run(
        _cli(db, "study", "create", "--landscape", str(KNOBS), "--name", name),
        env=_env(),
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stderr
    err = tmp_path / "stderr"
    with err.open("w") as stderr:
        # Through the Ray pool (logical GPUs), engines sleeping 0.2 x the recorded times: the
        # whole study would take about a minute.
        proc = subprocess.Popen(
            _cli(db, "study", "run", name, "--num-gpus", "1", "--replay-time-scale", "0.2"),
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            cwd=tmp_path,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
        # One trial done and the next one measuring: the progress line alone is not enough,
        # the loop prints it before it asks for and records the next trial (a signal sent in
        # between leaves nothing running to interrupt).
        deadline = time.monotonic() + 240
        watch = Store(str(db))
        while not _one_done_and_one_measuring(watch, name, err.read_text()):
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.2)
        watch.dispose()
        send(proc)
        proc.communicate(timeout=120)
    said = err.read_text()
    assert proc.returncode == code, said
    assert f"autotune: interrupted ({why})" in said
    # the store as the run opened it (a URL, its password masked)
    assert f"go on with: autotune --db sqlite:///{db} study resume {name}" in said
    for noise in ("SIGTERM received", "logging.cc", "Traceback", "PC: @"):
        assert noise not in said, said
    store = Store(str(db))
    record = store.get_study(name)
    assert record.status == "interrupted"
    states = [t.state for t in store.trials(record)]
    assert "running" not in states and states.count("interrupted") >= 1, states
