"""`bench/resume_faults.py`: does a study interrupted any way end where one uninterrupted run
ends? (issue #33 item 1)

On a replay study (the model strategy on ``--landscape``, by default the recorded CPU sweep),
on SQLite and on a throwaway PostgreSQL server, every driver a real ``autotune`` process:

- ``run+resume``: ``study run --max-configs K`` then ``study resume``, for every K from 1 to
  the number of engine configs the uninterrupted run starts;
- ``kill -9``: ``--kills`` studies, each killed 1-3 times at random points (after a random
  number of measurements, a random fraction of a cell later), then resumed to the end;
- ``takeover``: ``--takeovers`` studies whose driver is suspended (SIGSTOP) mid-trial past a
  2 s lease TTL, a second driver takes the study over and finishes it, then the first is
  continued (SIGCONT) and must stop with a lost lease, writing nothing.

Prints, per backend and scenario: runs, the measurement counts (min/max against the
reference's), runs whose measurements (config, cell, tok/s) equal the reference's, runs whose
stored answers (the recommendation per level) equal it, and the drivers' exit codes where
they were not the expected ones. CPU-light (the replay engine), a few minutes.

Usage: .venv/bin/python bench/resume_faults.py [--kills 10] [--takeovers 5]
       [--backend sqlite] [--backend postgresql] [--landscape PATH] [--seed 33]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune import api
from autotune.search.landscape_study import study_from_landscape
from autotune.store import Store
from autotune.testing.resume import Outcome, outcome

REPO = Path(__file__).resolve().parents[1]
LLAMA = REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv"
NAME = "faults"

DRIVER = """
import os, sys, time
from autotune.engine.replay import ReplayEngine
_measure = ReplayEngine.measure
delay = float(os.environ.get("MEASURE_S", "0"))


def measure(self, *args, **kwargs):
    print("measure", flush=True)  # the bench stops the driver here, out of any transaction
    time.sleep(delay)
    return _measure(self, *args, **kwargs)


ReplayEngine.measure = measure
from autotune.cli import main
main(sys.argv[1:])
"""


def driver(url: str, *args: str, measure_s: float = 0.0) -> subprocess.Popen[str]:
    """``autotune --db URL ARGS`` in its own process, printing ``measure`` before each cell."""
    path = str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")
    env = {**os.environ, "PYTHONPATH": path, "MEASURE_S": str(measure_s)}
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, "--db", url, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout_s: float = 600) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout_s)
    return proc.returncode, err.strip()


def wait_measures(proc: subprocess.Popen[str], count: int) -> bool:
    """Read the driver's output until its ``count``-th ``measure`` line (False: it ended)."""
    assert proc.stdout is not None
    seen = 0
    while seen < count:
        line = proc.stdout.readline()
        if not line:
            return False
        seen += line.strip() == "measure"
    return True


def quiet(url: str) -> bool:
    """No transaction is open on the database (a suspended driver holds no lock)."""
    if url.startswith("sqlite"):
        import sqlite3

        lite = sqlite3.connect(url[len("sqlite:///") :], timeout=0.5)
        try:
            lite.execute("BEGIN IMMEDIATE")
            lite.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            lite.close()
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as conn:
        busy = conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()"
            )
        ).scalar_one()
    engine.dispose()
    return int(busy) == 0


def wait_for(check: Callable[[], bool], timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# --- a throwaway PostgreSQL server ---------------------------------------------------------


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


@contextlib.contextmanager
def postgres() -> Iterator[Callable[[], str]]:
    """A PostgreSQL server on 127.0.0.1 (a free port, trust auth, fsync off), removed at the
    end; yields a function that creates an empty database and returns its URL."""
    import psycopg

    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        raise SystemExit("PostgreSQL server binaries not found (apt-get install postgresql)")
    user = "nobody" if os.geteuid() == 0 else None  # PostgreSQL refuses to run as root
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    os.chmod(root, 0o755)
    if user:
        pw = pwd.getpwnam(user)
        os.chown(root, pw.pw_uid, pw.pw_gid)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    data = str(root / "data")

    def run(*cmd: str) -> None:
        subprocess.run(cmd, check=True, user=user, env=env, cwd=root, capture_output=True)

    run(initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
    options = (
        f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
        "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
    )
    run(pg_ctl, "-D", data, "-o", options, "-l", str(root / "log"), "-w", "-t", "60", "start")

    def fresh() -> str:
        name = f"b_{uuid.uuid4().hex[:12]}"
        dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{port}/{name}"

    try:
        yield fresh
    finally:
        subprocess.run(
            [pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"],
            user=user,
            env=env,
            cwd=root,
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


def sqlite(tmp: Path) -> Callable[[], str]:
    """A function that returns the URL of a new SQLite file under ``tmp``."""
    count = iter(range(1_000_000))
    return lambda: f"sqlite:///{tmp / f's{next(count)}.db'}"


# --- the scenarios -------------------------------------------------------------------------


@dataclass
class Tally:
    """One scenario on one backend."""

    runs: int = 0
    counts: list[int] = field(default_factory=list)
    same_measurements: int = 0
    same_answers: int = 0
    faults: int = 0
    """Kills, or takeovers, done."""
    odd_exits: list[str] = field(default_factory=list)

    def add(self, got: Outcome, ref: Outcome) -> None:
        self.runs += 1
        self.counts.append(got.count)
        self.same_measurements += got.measurements == ref.measurements
        self.same_answers += got.answers == ref.answers


def create(url: str, data: dict[str, Any], source: str) -> None:
    store = Store(url)
    try:
        api.create_study(store, data=data, source=source)
    finally:
        store.dispose()


def read(url: str) -> tuple[Outcome, int]:
    """What the study ended with, and how many trials it started."""
    store = Store(url)
    try:
        return outcome(store, NAME), len(store.trials(store.get_study(NAME)))
    finally:
        store.dispose()


def resume_to_end(url: str, tally: Tally) -> None:
    code, err = finish(driver(url, "study", "resume", NAME, "-q"))
    if code != 0:
        tally.odd_exits.append(f"resume exit {code}: {err.splitlines()[-1] if err else ''}")


def steps(fresh: Callable[[], str], data: dict[str, Any], src: str, ref: Outcome, k: int) -> Tally:
    tally = Tally()
    for one in range(1, k + 1):
        url = fresh()
        create(url, data, src)
        code, err = finish(driver(url, "study", "run", NAME, "-q", "--max-configs", str(one)))
        if code != 0:
            tally.odd_exits.append(f"K={one} run exit {code}: {err[-200:]}")
        resume_to_end(url, tally)
        tally.add(read(url)[0], ref)
    return tally


def kills(
    fresh: Callable[[], str],
    data: dict[str, Any],
    src: str,
    ref: Outcome,
    n: int,
    rng: random.Random,
) -> Tally:
    tally = Tally()
    for _ in range(n):
        url = fresh()
        create(url, data, src)
        for _ in range(rng.randint(1, 3)):
            proc = driver(url, "study", "resume", NAME, "-q", "--lease-ttl", "30", measure_s=0.02)
            if wait_measures(proc, rng.randint(1, max(1, ref.count // 2))):
                time.sleep(rng.uniform(0, 0.03))
                proc.send_signal(signal.SIGKILL)
                tally.faults += 1
            code, _ = finish(proc)
            if code not in (0, -signal.SIGKILL):
                tally.odd_exits.append(f"killed driver exit {code}")
        resume_to_end(url, tally)
        tally.add(read(url)[0], ref)
    return tally


def takeovers(
    fresh: Callable[[], str],
    data: dict[str, Any],
    src: str,
    ref: Outcome,
    n: int,
    rng: random.Random,
) -> Tally:
    tally = Tally()
    for _ in range(n):
        url = fresh()
        create(url, data, src)
        a = driver(url, "study", "run", NAME, "-q", "--lease-ttl", "2", measure_s=0.1)
        at = rng.randint(2, max(2, ref.count - 2))
        stopped = False
        while wait_measures(a, at):
            os.kill(a.pid, signal.SIGSTOP)
            if quiet(url):
                stopped = True
                break
            os.kill(a.pid, signal.SIGCONT)
            at = 1
        if not stopped:
            tally.odd_exits.append(f"the first driver ended before its stop: {finish(a)}")
            tally.add(read(url)[0], ref)
            continue
        store = Store(url)
        wait_for(lambda: store.lease_holder(NAME) is None, 30)  # noqa: B023
        b = driver(url, "study", "resume", NAME, "-q", "--lease-ttl", "2", measure_s=0.02)
        took = wait_for(lambda: getattr(store.lease_holder(NAME), "pid", 0) == b.pid, 60)  # noqa: B023
        store.dispose()
        os.kill(a.pid, signal.SIGCONT)
        tally.faults += took
        code_a, err_a = finish(a)
        if code_a != 1 or "lost the lease" not in err_a:
            tally.odd_exits.append(f"suspended driver exit {code_a}: {err_a[-200:]}")
        code_b, err_b = finish(b)
        if code_b != 0:
            tally.odd_exits.append(f"second driver exit {code_b}: {err_b[-200:]}")
            resume_to_end(url, tally)
        tally.add(read(url)[0], ref)
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--takeovers", type=int, default=5)
    parser.add_argument("--backend", action="append", choices=("sqlite", "postgresql"))
    parser.add_argument("--landscape", type=Path, default=LLAMA)
    parser.add_argument("--seed", type=int, default=33)
    args = parser.parse_args()
    backends = args.backend or ["sqlite", "postgresql"]
    data = study_from_landscape(args.landscape, NAME, "model", 0)
    src = str(args.landscape.resolve())
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="autotune-faults-"))
    print(f"{args.landscape.name}, model strategy; kills {args.kills}, takeovers {args.takeovers}")
    header = f"{'backend':<11} {'scenario':<12} {'runs':>4} {'faults':>6} {'meas. min-max':>13}"
    print(f"{header} {'ref':>4} {'same meas.':>10} {'same answers':>12}")
    try:
        for backend in backends:
            with contextlib.ExitStack() as stack:
                fresh = sqlite(tmp) if backend == "sqlite" else stack.enter_context(postgres())
                url = fresh()
                create(url, data, src)
                started = time.monotonic()
                finish(driver(url, "study", "run", NAME, "-q"))
                ref, configs = read(url)
                ref_s = time.monotonic() - started
                print(f"{backend:<11} reference: {ref.count} measurements, {configs} configs, "
                      f"{len(ref.answers)} answers, {ref_s:.1f} s")  # fmt: skip
                for scenario in ("run+resume", "kill -9", "takeover"):
                    if scenario == "run+resume":
                        t = steps(fresh, data, src, ref, configs)
                    elif scenario == "kill -9":
                        t = kills(fresh, data, src, ref, args.kills, rng)
                    else:
                        t = takeovers(fresh, data, src, ref, args.takeovers, rng)
                    span = f"{min(t.counts)}-{max(t.counts)}" if t.counts else "-"
                    print(
                        f"{backend:<11} {scenario:<12} {t.runs:>4} {t.faults:>6} {span:>13} "
                        f"{ref.count:>4} {t.same_measurements:>10} {t.same_answers:>12}",
                        flush=True,
                    )
                    for line in t.odd_exits:
                        print(f"    {line}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
