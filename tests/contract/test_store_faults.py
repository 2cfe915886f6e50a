"""The store under faults, on SQLite and a real PostgreSQL server (issue #23).

- A driver suspended (SIGSTOP) past a short ``--lease-ttl`` while a second driver takes the
  study over, then resumed (SIGCONT): its writes are fenced by its lease token, so it writes
  nothing more, says so in one line and exits 1; the rows it stored before stay.
- Client clocks skewed by ±90 s: lease times are the database's, so a driver whose clock runs
  ahead cannot take a live lease, and one whose clock runs behind keeps it.
- ``kill -9`` at random points, then resume: the interrupted trials are reopened and only
  their missing cells measured, so the study ends cell for cell (and recommendation for
  recommendation) equal to an uninterrupted run of the same replay study.
- A full disk (SQLite on a small tmpfs, where the machine lets the test mount one) and a lost
  PostgreSQL database: one line, no traceback; the resume restores Optuna's missing trial and
  reproduces the uninterrupted run.
- No command prints the PostgreSQL password.

Every driver is a real process (the CLI) on the replay backend; the landscape is written here
(values chosen for these tests, not measured) with a spread wide enough that the protocol
re-measures some cells, so a resume that redrew them would show.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune import api
from autotune.store import Store
from autotune.testing.landscapes import sweep, write
from autotune.testing.postgres import fault_driver, quiet

REPO = Path(__file__).resolve().parents[2]
N_MAX = 4
WORKLOADS = ("code", "chat")
LEVELS = (1, 4)
CONFIGS = N_MAX + 1  # baseline + ngram N=1..4

pytestmark = [pytest.mark.contract, pytest.mark.timeout(300)]


def _landscape(path: Path) -> Path:
    points = []
    for n in range(N_MAX + 1):
        method = "none" if n == 0 else "ngram"
        acceptance = [0.7 * 0.9**i for i in range(n)]
        for w, gain in zip(WORKLOADS, (0.1, 0.03), strict=True):
            for c in LEVELS:
                base = 100.0 * c * (1 + gain * n - 0.02 * n * n)
                spread = 0.09 if n % 2 else 0.01  # odd N: repeats 18% apart, re-measured
                tputs = [base * (1 + spread * (r - 1)) for r in range(3)]
                points += sweep([(method, n, c, tputs, acceptance)], workload=w,
                                engine_start_s=5, measure_s=1)  # fmt: skip
    return write(path, points)


def _study_file(tmp: Path, name: str, sampler: str = "grid") -> Path:
    land = tmp / "land.csv"
    if not land.exists():
        _landscape(land)
    data = {
        "name": name,
        "model": {"name": "org/tiny"},
        "workloads": list(WORKLOADS),
        "concurrency": list(LEVELS),
        "methods": [{"method": "ngram", "num_speculative_tokens": {"min": 1, "max": N_MAX}}],
        "repeats": 2,
        "sampler": sampler,
        "engine": {"kind": "replay", "landscape": str(land)},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _driver(url: str, *args: str, **env: str) -> subprocess.Popen[str]:
    return fault_driver(REPO, url, *args, env=env)


def _cells(url: str, name: str) -> dict[tuple[str, str, int, int], float]:
    """(config, workload, concurrency, repeat) -> throughput, over every stored row of the
    study whatever its trial's state; a duplicated cell fails here."""
    store = Store(url)
    record = store.get_study(name)
    keys = {t.id: t.config_key for t in store.trials(record)}
    rows = [m for tid in keys for m in store.trial_measurements(tid)]
    cells = Counter((keys[m.trial_id], m.workload, m.concurrency, m.repeat) for m in rows)
    dups = sum(n - 1 for n in cells.values() if n > 1)
    print(f"  {name}: {len(rows)} measurements, {dups} duplicated cells")
    assert dups == 0, [k for k, n in cells.items() if n > 1]
    store.dispose()
    return {
        (keys[m.trial_id], m.workload, m.concurrency, m.repeat): m.output_throughput_tok_s
        for m in rows
    }


def _recommended(url: str, name: str) -> list[tuple[str, int, Any]]:
    store = Store(url)
    recs = store.recommendations(store.get_study(name))
    store.dispose()
    return sorted((r.workload, r.concurrency, str(r.speculative_config)) for r in recs)


def _reference(url: str, tmp: Path, sampler: str = "grid") -> str:
    """The same study run once, uninterrupted, in this process."""
    name = f"ref-{sampler}"
    store = Store(url)
    api.create_study(store, _study_file(tmp, name, sampler))
    api.run_study(store, name)
    store.dispose()
    return name


def _same_as_reference(url: str, name: str, ref: str) -> None:
    """Every cell and every recommendation equal to the uninterrupted run's."""
    got, want = _cells(url, name), _cells(url, ref)
    differ = set(got) ^ set(want) | {k for k in set(got) & set(want) if got[k] != want[k]}
    print(f"  {name} vs {ref}: {len(differ)} cells differ")
    assert not differ, sorted(differ)[:10]
    assert _recommended(url, name) == _recommended(url, ref)
    store = Store(url)
    record = store.get_study(name)
    trials = store.trials(record)
    assert record.status == "done"
    assert sorted(t.state for t in trials) == ["complete"] * CONFIGS
    _check_mirror(store, record)
    store.dispose()


def _check_mirror(store: Store, record: Any) -> None:
    """Optuna's mirror holds every finished config once, with the store's value."""
    import optuna

    ostudy = optuna.load_study(study_name=record.optuna_study_name, storage=store.url)
    recorded = Counter(
        t.user_attrs["config"]
        for t in ostudy.get_trials(deepcopy=False)
        if "config" in t.user_attrs and "repeat_of_config" not in t.user_attrs
    )
    assert len(recorded) == CONFIGS and set(recorded.values()) == {1}, recorded


def _one_line(err: str, *expected: str) -> None:
    assert "Traceback" not in err, err
    lines = [line for line in err.strip().splitlines() if line.startswith("autotune: error")]
    assert len(lines) == 1, err
    for text in expected:
        assert text in lines[0], err


def _wait_for(what: str, check: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _rows_in_running_trials(url: str, name: str) -> int:
    store = Store(url)
    trials = [t for t in store.trials(store.get_study(name)) if t.state == "running"]
    n = sum(len(store.trial_measurements(t.id)) for t in trials)
    store.dispose()
    return n


def _suspend_mid_trial(proc: subprocess.Popen[str], url: str, name: str) -> None:
    """SIGSTOP ``proc`` while it measures a cell of a trial with stored cells, holding no
    lock."""
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        assert line, f"driver ended first: {proc.communicate()}"
        if line.strip() != "measure" or _rows_in_running_trials(url, name) < 2:
            continue
        os.kill(proc.pid, signal.SIGSTOP)
        if quiet(url):
            return
        os.kill(proc.pid, signal.SIGCONT)


def _rows(url: str, name: str) -> set[tuple[int, int, str, int, int, float]]:
    store = Store(url)
    out = {
        (m.id, m.trial_id, m.workload, m.concurrency, m.repeat, m.output_throughput_tok_s)
        for t in store.trials(store.get_study(name))
        for m in store.trial_measurements(t.id)
    }
    store.dispose()
    return out


def test_suspended_driver_loses_its_lease_and_writes_nothing(store_url: str, tmp_path: Path):
    """SIGSTOP past a 2 s TTL, a second driver takes over, SIGCONT: the first stops with
    one line and writes no row; the study ends equal to an uninterrupted run."""
    ref = _reference(store_url, tmp_path)
    Store(store_url).dispose()
    api.create_study(Store(store_url), _study_file(tmp_path, "paused"))
    a = _driver(store_url, "study", "run", "paused", "--lease-ttl", "2", MEASURE_S="0.3")
    _suspend_mid_trial(a, store_url, "paused")
    before = _rows(store_url, "paused")
    store = Store(store_url)
    _wait_for("the lease to lapse", lambda: store.lease_holder("paused") is None, 20)
    b = _driver(store_url, "study", "resume", "paused", "--lease-ttl", "2", MEASURE_S="0.1")
    _wait_for("the takeover", lambda: getattr(store.lease_holder("paused"), "pid", 0) == b.pid)
    os.kill(a.pid, signal.SIGCONT)
    resumed = time.monotonic()
    _, a_err = a.communicate(timeout=120)
    a_stop_s = time.monotonic() - resumed
    print(f"\n  the suspended driver stopped {a_stop_s:.2f} s after SIGCONT: {a_err.strip()}")
    assert a.returncode == 1, a_err
    _one_line(a_err, "lost the lease on study 'paused'")
    assert a_stop_s < 30
    _, b_err = b.communicate(timeout=240)
    assert b.returncode == 0, b_err
    assert "Traceback" not in b_err
    after = _rows(store_url, "paused")
    assert before <= after, "a row the suspended driver stored was lost"
    _same_as_reference(store_url, "paused", ref)
    store.dispose()


def test_skewed_client_clocks_do_not_steal_a_lease(store_url: str, tmp_path: Path):
    """A driver whose clock runs 90 s behind holds its 5 s lease; drivers whose clocks run
    90 s ahead are refused while it lives: the database's clock decides."""
    ref = _reference(store_url, tmp_path)
    api.create_study(Store(store_url), _study_file(tmp_path, "skew"))
    hold = tmp_path / "hold"
    hold.touch()  # the healthy driver waits in its first cell until the thieves are done
    healthy = _driver(
        store_url,
        "study",
        "run",
        "skew",
        "--lease-ttl",
        "5",
        CLOCK_SKEW_S="-90",
        HOLD_FILE=str(hold),
    )
    assert healthy.stdout is not None
    assert healthy.stdout.readline().strip() == "measure"
    time.sleep(6)  # past the TTL as the skewed-behind driver's own clock would compute it
    thieves = [_driver(store_url, "study", v, "skew", CLOCK_SKEW_S="90") for v in ("run", "resume")]
    for thief in thieves:
        _, err = thief.communicate(timeout=120)
        assert thief.returncode == 2, err
        _one_line(err, f"is being run by PID {healthy.pid}")
    hold.unlink()
    _, err = healthy.communicate(timeout=240)
    assert healthy.returncode == 0, err
    assert "lost the lease" not in err and "Traceback" not in err
    _same_as_reference(store_url, "skew", ref)


def test_killed_any_number_of_times_resumes_to_the_same_answer(store_url: str, tmp_path: Path):
    """kill -9 at random points (each after at least one new stored cell), then resume: the
    model-guided study ends cell for cell equal to an uninterrupted run."""
    ref = _reference(store_url, tmp_path, "model")
    store = Store(store_url)
    api.create_study(store, _study_file(tmp_path, "killed", "model"))
    rng = random.Random(23)
    kills = 0
    for _ in range(6):
        before = sum(1 for _ in _rows(store_url, "killed"))
        proc = _driver(
            store_url, "study", "resume", "killed", "--lease-ttl", "30", MEASURE_S="0.02"
        )
        assert proc.stdout is not None
        while proc.stdout.readline().strip() == "measure":  # measuring: wait for a new row
            if sum(1 for _ in _rows(store_url, "killed")) > before:
                break
        if proc.poll() is not None:
            break  # it finished the study before it could be killed
        time.sleep(rng.uniform(0, 0.3))
        proc.kill()
        proc.communicate(timeout=30)
        kills += 1
    print(f"\n  {kills} kills")
    assert kills >= 3
    api.run_study(store, "killed")
    _same_as_reference(store_url, "killed", ref)
    store.dispose()


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 6 MB tmpfs (mounting needs root and a kernel that lets this process mount)."""
    root = Path(tempfile.mkdtemp(prefix="autotune-disk-"))
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(root)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        root.rmdir()
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip() or 'not root'}")
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], capture_output=True)
        root.rmdir()


def test_full_disk_ends_in_one_line_and_resumes(small_disk: Path, tmp_path: Path):
    """SQLite on a tmpfs that fills up mid-run: one line, no traceback; with space again the
    resume restores the Optuna mirror and ends equal to an uninterrupted run."""
    url = f"sqlite:///{small_disk / 'store.db'}"
    ref_url = f"sqlite:///{tmp_path / 'ref.db'}"
    ref = _reference(ref_url, tmp_path)
    store = Store(url)
    api.create_study(store, _study_file(tmp_path, "full"))
    store.dispose()
    filler = small_disk / "filler"
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    filler.write_bytes(b"\0" * max(0, free - 96 * 1024))  # leave ~96 KB for the run
    proc = _driver(url, "study", "run", "full", MEASURE_S="0")
    _, err = proc.communicate(timeout=240)
    print(f"\n  on a full disk: exit {proc.returncode}: {err.strip()}")
    assert proc.returncode == 1, err
    _one_line(err, "full")
    filler.unlink()
    again = _driver(url, "study", "resume", "full")
    _, err = again.communicate(timeout=240)
    assert again.returncode == 0, err
    got, want = _cells(url, "full"), _cells(ref_url, ref)
    assert got == want
    assert _recommended(url, "full") == _recommended(ref_url, ref)
    store = Store(url)
    _check_mirror(store, store.get_study("full"))
    store.dispose()


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> str:
    server = request.getfixturevalue("postgres_server")
    return str(server.password_url())


def test_lost_database_ends_in_one_line_and_resumes(pg_url: str, tmp_path: Path):
    """The driver's PostgreSQL database refuses connections mid-run (its sessions killed):
    one line, no traceback, the URL's password masked; the resume reproduces the answer."""
    from sqlalchemy.engine import make_url

    ref = _reference(pg_url, tmp_path)
    api.create_study(Store(pg_url), _study_file(tmp_path, "lost"))
    proc = _driver(pg_url, "study", "run", "lost", MEASURE_S="0.1")
    _suspend_mid_trial(proc, pg_url, "lost")
    database = make_url(pg_url).database
    admin = make_url(pg_url).set(username="postgres", password=None, database="postgres")
    _admin(admin, f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
    _admin(
        admin,
        f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'",
    )
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    print(f"\n  database lost: exit {proc.returncode}: {err.strip()}")
    assert proc.returncode == 1, err
    _one_line(err)
    assert make_url(pg_url).password not in err
    _admin(admin, f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
    again = _driver(pg_url, "study", "resume", "lost")
    _, err = again.communicate(timeout=240)
    assert again.returncode == 0, err
    _same_as_reference(pg_url, "lost", ref)


def _admin(url: Any, sql: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(sql))
    engine.dispose()


def _commands(tmp: Path) -> list[list[str]]:
    """Every CLI command, on a measured study, an unmeasured one and names that do not exist
    (the errors that name the store)."""
    study, empty = _study_file(tmp, "secret"), _study_file(tmp, "empty")
    config = '{"method": "ngram", "num_speculative_tokens": 2}'
    return [
        ["study", "create", str(study)],
        ["study", "create", str(empty)],
        ["study", "create", str(study)],  # already exists
        ["study", "create", "--json", "--replace", str(empty)],
        ["study", "list"],
        ["study", "list", "--json"],
        ["study", "run", "secret"],
        ["study", "resume", "secret", "--verbose"],
        ["study", "run", "secret", "--no-progress"],
        ["study", "show", "secret"],
        ["study", "show", "secret", "--json"],
        ["study", "show", "nope"],
        ["study", "run", "nope"],
        ["study", "delete", "nope", "--yes"],
        ["recommend", "--model", "org/tiny", "--workload", "code"],
        ["recommend", "--model", "org/tiny", "--workload", "code", "--study", "empty"],
        ["recommend", "--model", "nope", "--workload", "code"],
        ["check", "--model", "org/tiny", "--workload", "code", "--config", config],
        ["export", "--landscape", "secret", "-o", str(tmp / "out.csv")],
        ["export", "--landscape", "empty", "-o", str(tmp / "empty.csv")],
        ["report", "secret"],
        ["report", "empty"],
        ["report", "nope"],
        ["verify", "--model", "nope", "--workload", "code"],
        ["workload", "list"],
        ["models"],
        ["study", "delete", "empty", "--yes"],
        ["study", "delete", "secret", "--yes"],
        ["study", "list"],  # an empty store
    ]


def test_no_command_prints_the_password(
    pg_url: str, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """Every command, given the store as --db and as AUTOTUNE_DB, and the connection errors
    of a wrong password and a closed port: the password appears in no output. (In this
    process, through the CLI's own error reporting, for time: ~45 commands.)"""
    from sqlalchemy.engine import make_url

    from autotune.cli import cli
    from autotune.cli._common import _STORE_URL, report_errors

    password = str(make_url(pg_url).password)
    wrong = make_url(pg_url).set(password="not-" + password)
    closed = make_url(pg_url).set(port=1)
    runs: list[tuple[list[str], dict[str, str]]] = []
    for cmd in _commands(tmp_path):
        runs.append((["--db", pg_url, *cmd], {}))
    for cmd in _commands(tmp_path)[:10]:
        runs.append((cmd, {"AUTOTUNE_DB": pg_url}))
    for url in (wrong, closed):
        shown = url.render_as_string(hide_password=False)
        runs.append((["--db", shown, "study", "list"], {}))
        runs.append((["--db", shown, "study", "run", "secret"], {}))
        runs.append((["study", "show", "secret"], {"AUTOTUNE_DB": shown}))
    hits: dict[str, int] = {}
    codes: Counter[int] = Counter()
    for args, env in runs:
        _STORE_URL.clear()  # as in a fresh process: no store opened yet
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            codes[report_errors(cli, args)] += 1
        out = "".join(capfd.readouterr())
        assert "Traceback" not in out, (args, out)
        n = out.count(password)
        if n:
            hits[" ".join(a for a in args if a != pg_url)] = n
    with capfd.disabled():
        print(
            f"\n  {len(runs)} commands (exit codes {dict(codes)}), {sum(hits.values())} password hits"
        )
    assert not hits, hits
    assert codes[0] >= 20  # the commands ran, not only their errors


def test_sighup_stops_the_run_like_sigterm(store_url: str, tmp_path: Path):
    """SIGHUP (a closed terminal, a killed tmux) mid-trial: the driver stops cleanly (exit 129,
    one line saying so), leaves the study and its trial ``interrupted``, not ``running``, and
    releases its lease at once; the resume ends equal to an uninterrupted run."""
    ref = _reference(store_url, tmp_path)
    api.create_study(Store(store_url), _study_file(tmp_path, "hup"))
    hold = tmp_path / "hold"
    hold.touch()
    driver = _driver(store_url, "study", "run", "hup", HOLD_FILE=str(hold))
    assert driver.stdout is not None
    assert driver.stdout.readline().strip() == "measure"
    driver.send_signal(signal.SIGHUP)
    _, err = driver.communicate(timeout=120)
    assert driver.returncode == 129, err
    assert "Traceback" not in err and "autotune: interrupted (SIGHUP)" in err, err
    store = Store(store_url)
    record = store.get_study("hup")
    assert record.status == "interrupted"
    assert "running" not in [t.state for t in store.trials(record)]
    assert store.lease_holder("hup") is None  # released, not left to lapse
    store.dispose()
    hold.unlink()
    resumed = _driver(store_url, "study", "resume", "hup")
    _, err = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, err
    _same_as_reference(store_url, "hup", ref)


def test_a_postgresql_restart_under_a_running_driver_is_retried(postgres_server, tmp_path: Path):
    """The server restarts (``pg_ctl restart -m fast``: every session cut) while a driver
    measures: its store and Optuna calls are retried with back-off until the server is back,
    and the run ends (exit 0) equal to an uninterrupted one, no cell lost or duplicated."""
    url = postgres_server.url(postgres_server.create_database())
    ref = _reference(url, tmp_path)
    api.create_study(Store(url), _study_file(tmp_path, "restart"))
    proc = _driver(url, "study", "run", "restart", MEASURE_S="0.1")
    assert proc.stdout is not None
    while _rows_in_running_trials(url, "restart") < 2:
        assert proc.stdout.readline(), f"driver ended first: {proc.communicate()}"
    started = time.monotonic()
    postgres_server.restart()
    print(f"\n  restarted in {time.monotonic() - started:.1f} s")
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    _same_as_reference(url, "restart", ref)
