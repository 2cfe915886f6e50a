"""The store contract on SQLite and on a real PostgreSQL server: leases (one live driver per
study), drivers started together on a fresh store, resume after ``kill -9``, four drivers on
distinct studies. Every driver is a real process (the CLI or the API in a subprocess) on the
replay backend, so the races are the ones two terminals would run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from autotune import api
from autotune.errors import StudyBusyError
from autotune.store import Store
from autotune.testing.landscapes import write_rows

REPO = Path(__file__).resolve().parents[2]
N_MAX = 6
LEVELS = (1, 4, 8)
REPEATS = 2
CONFIGS = N_MAX + 1  # baseline + ngram N=1..6
MEASUREMENTS = CONFIGS * len(LEVELS) * REPEATS

pytestmark = [pytest.mark.contract, pytest.mark.timeout(300)]


def _landscape(path: Path) -> Path:
    """A hand-written landscape (values chosen for these tests, not measured)."""
    rows = [
        (
            "none" if n == 0 else "ngram",
            n,
            c,
            [100.0 * c * (1 + 0.1 * n - 0.02 * n * n) + r for r in range(REPEATS)],
            [0.7 * 0.9**i for i in range(n)],
        )
        for n in range(N_MAX + 1)
        for c in LEVELS
    ]
    return write_rows(path, rows, engine_start_s=5, measure_s=1)


def _study_file(tmp: Path, name: str) -> Path:
    land = tmp / "land.csv"
    if not land.exists():
        _landscape(land)
    data = {
        "name": name,
        "model": {"name": "org/tiny"},
        "workloads": ["code"],
        "concurrency": list(LEVELS),
        "methods": [{"method": "ngram", "num_speculative_tokens": {"min": 1, "max": N_MAX}}],
        "repeats": REPEATS,
        "sampler": "grid",
        "engine": {"kind": "replay", "landscape": str(land)},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _cli(url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "autotune.cli", "--db", url, *args]


def _popen(cmd: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
    )


def _check_study(url: str, name: str, *, complete: int = CONFIGS) -> None:
    """Every config measured once, every cell exactly REPEATS times, nothing lost."""
    store = Store(url)
    record = store.get_study(name)
    trials = store.trials(record)
    done = [t for t in trials if t.state == "complete"]
    assert len(done) == complete
    assert Counter(t.config_key for t in done).most_common(1)[0][1] == 1, "config measured twice"
    rows = store.measurements(study=name)
    cells = Counter((r.trial_id, r.workload, r.concurrency, r.repeat) for r in rows)
    assert not [k for k, v in cells.items() if v > 1], "duplicate measurements"
    assert len(rows) == MEASUREMENTS, "lost or extra measurements"
    assert record.status == "done"
    assert not [t for t in trials if t.state == "running"]
    store.dispose()


def test_four_drivers_on_a_fresh_store(store_url: str, tmp_path: Path):
    """create + run of four distinct studies, all started at once on an empty store: the
    schemas (autotune's and Optuna's) are created once, every driver succeeds."""
    names = [f"s{i}" for i in range(4)]
    files = [_study_file(tmp_path, n) for n in names]
    procs = [
        _popen(
            [
                "bash",
                "-c",
                " ".join(map(_q, _cli(store_url, "study", "create", str(f))))
                + " && "
                + " ".join(map(_q, _cli(store_url, "study", "run", n))),
            ]
        )
        for f, n in zip(files, names, strict=True)
    ]
    results = [p.communicate(timeout=240) for p in procs]
    for p, (_, err) in zip(procs, results, strict=True):
        assert "Traceback" not in err, err
        assert p.returncode == 0, err
    for n in names:
        _check_study(store_url, n)


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)


HOLDER = """
import sys
from autotune.store import Store
store = Store(sys.argv[1])
with store.lease(sys.argv[2], ttl_s=float(sys.argv[3])):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_second_driver_is_refused_then_waits(store_url: str, tmp_path: Path):
    store = Store(store_url)
    api.create_study(store, _study_file(tmp_path, "one"))
    holder = _popen([sys.executable, "-c", HOLDER, store_url, "one", "5"])
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    try:
        second = subprocess.run(
            _cli(store_url, "study", "run", "one"),
            cwd=REPO,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 2, second.stderr
        assert f"is being run by PID {holder.pid} on" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1 and "Traceback" not in second.stderr
        assert store.trials(store.get_study("one")) == []  # the refused driver wrote nothing
        # API callers get the same refusal, and so do replacing or deleting the study.
        with pytest.raises(StudyBusyError):
            api.run_study(store, "one")
        with pytest.raises(StudyBusyError):
            api.create_study(store, tmp_path / "one.yaml", replace=True)
        with pytest.raises(StudyBusyError):
            api.delete_study(store, "one")
        assert store.get_study("one").name == "one"
        waiter = _popen(_cli(store_url, "study", "resume", "one", "--wait"))
        assert waiter.stderr is not None
        first = waiter.stderr.readline()  # blocks until the waiter reports that it waits
        assert "waiting: study 'one' is being run by PID" in first, first
        time.sleep(1)
        assert waiter.poll() is None  # still waiting for the holder
    finally:
        holder.communicate(input="", timeout=30)
    _, err = waiter.communicate(timeout=240)
    assert waiter.returncode == 0, first + err
    _check_study(store_url, "one")


SLOW_CLI = """
import sys, time
from autotune.engine.replay import ReplayEngine
_measure = ReplayEngine.measure


def slow(self, *args, **kwargs):
    time.sleep(0.1)  # a replayed measurement that takes real time, so two drivers overlap
    return _measure(self, *args, **kwargs)


ReplayEngine.measure = slow
from autotune.cli import main
main(sys.argv[1:])
"""


def test_two_drivers_started_together(store_url: str, tmp_path: Path):
    """Two `study run` of one study at once, each measurement taking 0.1 s so the drivers
    overlap for the whole run: the one holding the lease measures, the other exits 2. No
    duplicate, nothing lost. (Without the lease both measure: duplicates, and this fails.)"""
    store = Store(store_url)
    api.create_study(store, _study_file(tmp_path, "race"))
    store.dispose()
    cmd = [sys.executable, "-c", SLOW_CLI, "--db", store_url, "study", "run", "race"]
    procs = [_popen(cmd) for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    codes = sorted(p.returncode for p in procs)
    print(f"\ntwo drivers on one study ({store_url.split(':')[0]}): exit codes {codes}")
    for _, err in outs:
        assert "Traceback" not in err, err
    assert codes == [0, 2], outs
    assert any("is being run by PID" in err for _, err in outs)
    _check_study(store_url, "race")


DRIVER = """
import sys
from autotune import api
from autotune.store import Store
# Replay engines sleep 1/20 of the landscape's times (0.05 s a cell, 0.25 s a start), so the
# test can catch the driver in the middle of a trial even on a loaded machine.
api.run_study(Store(sys.argv[1]), sys.argv[2], lease_ttl_s=30, replay_time_scale=0.05)
"""


def test_resume_after_kill(store_url: str, tmp_path: Path):
    """kill -9 in the middle of a trial, then resume at once (the dead driver's PID is gone on
    this host, so its lease is not waited out): same results as an uninterrupted run."""
    store = Store(store_url)
    api.create_study(store, _study_file(tmp_path, "killed"))
    driver = _popen([sys.executable, "-c", DRIVER, store_url, "killed"])
    deadline = time.monotonic() + 180
    while True:
        assert time.monotonic() < deadline, "never caught the driver in the middle of a trial"
        if driver.poll() is not None:
            pytest.fail(f"driver ended before it could be killed: {driver.communicate()}")
        # Freeze it, look: kill only when a trial is running with some of its cells stored.
        os.kill(driver.pid, signal.SIGSTOP)
        if _running_rows(store, "killed") >= 2:
            break
        os.kill(driver.pid, signal.SIGCONT)
        time.sleep(0.02)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait(timeout=30)
    record = store.get_study("killed")
    assert record.status == "running"  # its lease has not lapsed yet (30 s)
    running = [t for t in store.trials(record) if t.state == "running"]
    kept = _rows_of(store, running[0].id)
    summary = api.run_study(store, "killed")
    assert summary.trials_failed == 0
    trials = store.trials(store.get_study("killed"))
    reopened = [t for t in trials if t.id == running[0].id]
    assert len(running) == 1 and reopened[0].state == "complete"  # reopened, not redone
    # its cells measured before the kill were kept; the resume measured only the rest
    assert kept >= 2
    assert summary.measurements == summary.trials_run * len(LEVELS) * REPEATS - kept
    print(f"\nkilled with {len(running)} trial(s) running, {kept} cells kept; resumed")
    assert store.lease_holder("killed") is None  # released at the end of the run
    _check_study(store_url, "killed")


def _running_rows(store: Store, name: str) -> int:
    """Measurements stored for trials still running (store.measurements() lists completed
    trials only)."""
    from sqlalchemy import func, select

    from autotune.store.tables import MeasurementRow, StudyRow, TrialRow

    with store.session() as s:
        return int(
            s.scalar(
                select(func.count(MeasurementRow.id))
                .join(TrialRow)
                .join(StudyRow)
                .where(StudyRow.name == name, TrialRow.state == "running")
            )
            or 0
        )


def _rows_of(store: Store, trial_id: int) -> int:
    from sqlalchemy import func, select

    from autotune.store.tables import MeasurementRow

    with store.session() as s:
        return int(
            s.scalar(
                select(func.count(MeasurementRow.id)).where(MeasurementRow.trial_id == trial_id)
            )
            or 0
        )


def test_expired_lease_is_taken_over(store_url: str, tmp_path: Path):
    """A lease whose heartbeat stopped (a driver on another host that died) lapses after its
    TTL; until then a second driver is refused."""
    store = Store(store_url)
    api.create_study(store, _study_file(tmp_path, "lapse"))
    lease = store.acquire_lease("lapse", ttl_s=1.5)
    from sqlalchemy import update

    from autotune.store.tables import LeaseRow

    with store.session() as s:  # pretend it is held on another host, so the PID check is moot
        s.execute(update(LeaseRow).values(host="elsewhere"))
    with pytest.raises(StudyBusyError, match="on elsewhere since"):
        store.acquire_lease("lapse")
    store.set_study_status("lapse", "running")
    assert store.get_study("lapse").status == "running"
    time.sleep(2)
    assert store.get_study("lapse").status == "interrupted"  # the driver's lease lapsed
    second = store.acquire_lease("lapse")
    assert second.token != lease.token
    assert not store.renew_lease(lease)  # the dead driver's heartbeat would learn it lost
    assert store.renew_lease(second)


def test_heartbeat_keeps_a_lease_past_its_ttl(store_url: str, tmp_path: Path):
    """The heartbeat thread renews the lease, so a long trial never loses it."""
    store = Store(store_url)
    api.create_study(store, _study_file(tmp_path, "beat"))
    other = Store(store_url)
    with store.lease("beat", ttl_s=1.2) as lease:
        time.sleep(3)  # 2.5 TTLs
        with pytest.raises(StudyBusyError):
            other.acquire_lease("beat")
        holder = other.lease_holder("beat")
        assert holder is not None and holder.token == lease.token
    assert other.lease_holder("beat") is None  # released on exit
    other.acquire_lease("beat")


def test_a_driver_learns_it_lost_its_lease(store_url: str, tmp_path: Path):
    from sqlalchemy import update

    from autotune.store.tables import LeaseRow

    store = Store(store_url)
    api.create_study(store, _study_file(tmp_path, "lost"))
    with store.lease("lost", ttl_s=1.2) as lease:
        assert not store.lease_lost(lease)
        with store.session() as s:  # what a takeover after a missed TTL leaves behind
            s.execute(update(LeaseRow).values(token="someone-else"))
        time.sleep(1)
        assert store.lease_lost(lease)
