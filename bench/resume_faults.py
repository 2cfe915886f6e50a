"""`bench/resume_faults.py`: does a study interrupted any way end where one uninterrupted run
ends? (issue #33 item 1)

On a replay study (the model strategy on ``--landscape``, by default the recorded CPU sweep),
on SQLite and on a throwaway PostgreSQL server (:mod:`autotune.testing.postgres`), every
driver a real ``autotune`` process (:func:`autotune.testing.postgres.fault_driver`):

- ``run+resume``: ``study run --max-configs K`` then ``study resume``, for every K from 1 to
  the number of engine configs the uninterrupted run starts;
- ``kill -9``: studies killed 1-3 times each at random points (after a random number of
  measurements, a random fraction of a cell later), then resumed to the end, until ``--kills``
  kills are done;
- ``takeover``: ``--takeovers`` studies whose driver is suspended (SIGSTOP) mid-trial past a
  2 s lease TTL, a second driver takes the study over and finishes it, then the first is
  continued (SIGCONT) and must stop with a lost lease, writing nothing.

All three on one slot, then run+resume and ``--slot-kills`` kills with ``--slots`` engines at
once (the tuner on :class:`autotune.cluster.virtual.VirtualPool`, a virtual clock: the same
uninterrupted run every time), against that run as reference.

Prints, per backend and scenario: runs, the faults done, the measurement counts (min-max against
the reference's), runs whose measurements (config, cell, tok/s) equal the reference's, runs
whose stored answers (the recommendation per level) equal it, and the drivers' exit codes where
they were not the expected ones. CPU-light (the replay engine), tens of minutes.

Usage: .venv/bin/python bench/resume_faults.py [--kills 30] [--takeovers 5] [--slots 4]
       [--slot-kills 10] [--backend sqlite] [--backend postgresql] [--landscape PATH]
       [--seed 33]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune import api
from autotune.search.landscape_study import study_from_landscape
from autotune.store import Store
from autotune.testing.postgres import fault_driver, postgres_server, quiet, wait_measures
from autotune.testing.resume import Outcome, outcome

REPO = Path(__file__).resolve().parents[1]
LLAMA = REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv"
NAME = "faults"


def driver(url: str, *args: str, measure_s: float = 0.0, slots: int = 1) -> subprocess.Popen[str]:
    """``autotune --db URL ARGS`` in its own process, printing ``measure`` before each cell;
    on ``slots`` engines at once (a virtual clock) when more than one."""
    env = {"MEASURE_S": str(measure_s), "SLOTS": str(slots)}
    return fault_driver(REPO, url, *args, env=env)


def finish(proc: subprocess.Popen[str], timeout_s: float = 600) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout_s)
    return proc.returncode, err.strip()


def wait_for(check: Callable[[], bool], timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


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


@dataclass(frozen=True)
class Setting:
    """One backend and slot count: new stores, the study, and its uninterrupted run."""

    fresh: Callable[[], str]
    data: dict[str, Any]
    source: str
    slots: int
    ref: Outcome | None = None
    configs: int = 0

    def driver(self, url: str, *args: str, measure_s: float = 0.0) -> subprocess.Popen[str]:
        return driver(url, *args, measure_s=measure_s, slots=self.slots)

    def new(self) -> str:
        url = self.fresh()
        store = Store(url)
        try:
            api.create_study(store, data=self.data, source=self.source)
        finally:
            store.dispose()
        return url

    def reference(self) -> Setting:
        url = self.new()
        code, err = finish(self.driver(url, "study", "run", NAME, "-q"))
        if code != 0:
            raise SystemExit(f"the reference run exited {code}: {err[-300:]}")
        ref, configs = read(url)
        return Setting(self.fresh, self.data, self.source, self.slots, ref, configs)

    def end(self, url: str, tally: Tally) -> None:
        """Resume the study at ``url`` to its end and count what it ended with."""
        code, err = finish(self.driver(url, "study", "resume", NAME, "-q"))
        if code != 0:
            tally.odd_exits.append(f"resume exit {code}: {err.splitlines()[-1] if err else ''}")
        assert self.ref is not None
        tally.add(read(url)[0], self.ref)


def read(url: str) -> tuple[Outcome, int]:
    """What the study ended with, and how many trials it started."""
    store = Store(url)
    try:
        return outcome(store, NAME), len(store.trials(store.get_study(NAME)))
    finally:
        store.dispose()


def steps(s: Setting) -> Tally:
    tally = Tally()
    for one in range(1, s.configs + 1):
        url = s.new()
        code, err = finish(s.driver(url, "study", "run", NAME, "-q", "--max-configs", str(one)))
        if code != 0:
            tally.odd_exits.append(f"K={one} run exit {code}: {err[-200:]}")
        s.end(url, tally)
    return tally


def kills(s: Setting, n: int, rng: random.Random) -> Tally:
    """Studies killed 1-3 times each, then resumed to the end, until ``n`` kills are done."""
    assert s.ref is not None
    tally = Tally()
    while tally.faults < n:
        url = s.new()
        for _ in range(rng.randint(1, 3)):
            proc = s.driver(url, "study", "resume", NAME, "-q", "--lease-ttl", "30", measure_s=0.02)
            if wait_measures(proc, rng.randint(1, max(1, s.ref.count // 2))):
                time.sleep(rng.uniform(0, 0.03))
                proc.send_signal(signal.SIGKILL)
                tally.faults += 1
            code, _ = finish(proc)
            if code not in (0, -signal.SIGKILL):
                tally.odd_exits.append(f"killed driver exit {code}")
        s.end(url, tally)
    return tally


def takeovers(s: Setting, n: int, rng: random.Random) -> Tally:
    assert s.ref is not None
    tally = Tally()
    for _ in range(n):
        url = s.new()
        a = s.driver(url, "study", "run", NAME, "-q", "--lease-ttl", "2", measure_s=0.1)
        at = rng.randint(2, max(2, s.ref.count - 2))
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
            tally.add(read(url)[0], s.ref)
            continue
        store = Store(url)
        wait_for(lambda: store.lease_holder(NAME) is None, 30)  # noqa: B023
        b = s.driver(url, "study", "resume", NAME, "-q", "--lease-ttl", "2", measure_s=0.02)
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
            s.end(url, tally)
            continue
        tally.add(read(url)[0], s.ref)
    return tally


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=30, help="kills per backend, one slot")
    parser.add_argument("--takeovers", type=int, default=5)
    parser.add_argument("--slots", type=int, default=4, help="engines at once (1: skip)")
    parser.add_argument("--slot-kills", type=int, default=10, help="kills on --slots slots")
    parser.add_argument("--backend", action="append", choices=("sqlite", "postgresql"))
    parser.add_argument("--landscape", type=Path, default=LLAMA)
    parser.add_argument("--seed", type=int, default=33)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _stop)  # the server is stopped and removed on SIGTERM too
    backends = args.backend or ["sqlite", "postgresql"]
    data = study_from_landscape(args.landscape, NAME, "model", 0)
    src = str(args.landscape.resolve())
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="autotune-faults-"))
    print(
        f"{args.landscape.name}, model strategy; kills {args.kills}, takeovers "
        f"{args.takeovers}; on {args.slots} slots: kills {args.slot_kills}"
    )
    header = f"{'backend':<11} {'slots':>5} {'scenario':<12} {'runs':>4} {'faults':>6}"
    print(f"{header} {'meas. min-max':>13} {'ref':>4} {'same meas.':>10} {'same answers':>12}")
    try:
        for backend in backends:
            with contextlib.ExitStack() as stack:
                if backend == "sqlite":
                    fresh = sqlite(tmp)
                else:
                    fresh = stack.enter_context(postgres_server()).fresh_url
                plans: list[tuple[int, list[tuple[str, Callable[[Setting], Tally]]]]] = [
                    (1, [("run+resume", steps),
                         ("kill -9", lambda s: kills(s, args.kills, rng)),
                         ("takeover", lambda s: takeovers(s, args.takeovers, rng))]),
                ]  # fmt: skip
                if args.slots > 1:
                    plans.append(
                        (args.slots, [("run+resume", steps),
                                      ("kill -9", lambda s: kills(s, args.slot_kills, rng))])
                    )  # fmt: skip
                for slots, scenarios in plans:
                    started = time.monotonic()
                    s = Setting(fresh, data, src, slots).reference()
                    assert s.ref is not None
                    print(f"{backend:<11} {slots:>5} reference: {s.ref.count} measurements, "
                          f"{s.configs} configs, {len(s.ref.answers)} answers, "
                          f"{time.monotonic() - started:.1f} s", flush=True)  # fmt: skip
                    for scenario, run in scenarios:
                        started = time.monotonic()
                        t = run(s)
                        span = f"{min(t.counts)}-{max(t.counts)}" if t.counts else "-"
                        print(
                            f"{backend:<11} {slots:>5} {scenario:<12} {t.runs:>4} {t.faults:>6} "
                            f"{span:>13} {s.ref.count:>4} {t.same_measurements:>10} "
                            f"{t.same_answers:>12}  ({time.monotonic() - started:.0f} s)",
                            flush=True,
                        )
                        for line in t.odd_exits:
                            print(f"    {line}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
