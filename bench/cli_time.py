"""`make bench-cli`: wall time of autotune's read-only commands on a populated store.

Builds a store in a temporary directory from the recorded real sweep
``bench/landscapes/cpu-tiny-llama.csv`` (replayed, so no engine runs), then times each
read-only command as a fresh process, beside ``python -c "import autotune"`` measured in the
same run and beside the floor every command pays (the interpreter with click, pydantic and yaml;
SQLAlchemy too for a command that opens a store), and checks that none of them imported vLLM or
torch or wrote to stderr beyond autotune's own notes. Prints one table; exits 1 when a command imports vLLM/torch, or when
``recommend`` takes more than 3x the bare import.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LANDSCAPE = REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv"
TARGET_RATIO = 3.0

# Printed by the child after the command ran: which heavy modules it imported.
PROBE = (
    "import sys, runpy; sys.argv = ['autotune'] + sys.argv[1:];\n"
    "try:\n"
    "    runpy.run_module('autotune.cli', run_name='__main__')\n"
    "except SystemExit:\n"
    "    pass\n"
    "finally:\n"
    "    print('HEAVY=' + ','.join(m for m in ('vllm', 'torch') if m in sys.modules),"
    " file=sys.stderr)\n"
)


def populate(db: str) -> None:
    from autotune import api
    from autotune.search.landscape_study import study_from_landscape
    from autotune.store import Store

    store = Store(db)
    data = study_from_landscape(LANDSCAPE, "tiny-cpu-grid", sampler="grid")
    api.create_study(store, data=data, source=str(LANDSCAPE))
    api.run_study(store, "tiny-cpu-grid")


def timed(argv: list[str], env: dict[str, str], repeats: int) -> tuple[float, str, int]:
    times, err, rc = [], "", 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=REPO)
        times.append(time.perf_counter() - t0)
        err, rc = proc.stderr, proc.returncode
    return statistics.median(times), err, rc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per command (median)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{tmp}/bench.db"
        populate(db)
        deployed = Path(tmp, "deployed.json")
        deployed.write_text("null\n")
        commands = {
            "recommend": ["recommend", "--model", "tiny", "--workload", "code"],
            "recommend --explain": [
                "recommend", "--model", "tiny", "--workload", "code", "--explain",
            ],
            "recommend (published)": ["recommend", "--model", "kimi", "--workload", "code"],
            "recommend (no store yet)": [
                "--db", f"sqlite:///{tmp}/absent.db",
                "recommend", "--model", "kimi", "--workload", "code",
            ],
            "check": [
                "check", "--model", "tiny", "--workload", "code", "--config", str(deployed),
            ],
            "study list": ["study", "list"],
            "study show": ["study", "show", "tiny-cpu-grid"],
            "report": ["report", "tiny-cpu-grid"],
        }  # fmt: skip
        base, _, _ = timed([sys.executable, "-c", "import autotune"], env, args.repeats)
        # The floor of any command: the interpreter plus the libraries every command needs
        # (click parses, pydantic checks the specs, yaml reads them); SQLAlchemy for any
        # command that opens a store.
        floors = ["import click, pydantic, yaml", "import click, pydantic, yaml, sqlalchemy.orm"]
        floor_s = {
            code: timed([sys.executable, "-c", code], env, args.repeats)[0] for code in floors
        }
        rows = []
        failed = False
        for label, cmd in commands.items():
            argv = [sys.executable, "-c", PROBE, "--db", db, *cmd]
            wall, err, rc = timed(argv, env, args.repeats)
            heavy = next((ln[6:] for ln in err.splitlines() if ln.startswith("HEAVY=")), "")
            # --explain prints its explanation on stderr by design: not noise.
            noise = (
                [
                    ln
                    for ln in err.splitlines()
                    if ln.strip() and not ln.startswith(("HEAVY=", "note:", "autotune:"))
                ]
                if "--explain" not in cmd
                else []
            )
            rows.append((label, wall, wall / base, rc, heavy or "-", len(noise)))
            failed |= bool(heavy) or bool(noise)
            if label == "recommend" and wall / base > TARGET_RATIO:
                failed = True
    print(f"python -c 'import autotune': {base:.2f} s (median of {args.repeats})")
    for code, wall in floor_s.items():
        print(f"floor: python -c '{code}': {wall:.2f} s ({wall / base:.1f}x)")
    print(
        f"{'command':24} {'wall s':>7} {'x import':>9} {'exit':>5} {'vllm/torch':>11} {'stderr noise':>13}"
    )
    for label, wall, ratio, rc, heavy, noise in rows:
        print(f"{label:24} {wall:7.2f} {ratio:9.1f} {rc:5d} {heavy:>11} {noise:13d}")
    print(f"target: recommend within {TARGET_RATIO:g}x of the bare import; no vllm/torch import")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
