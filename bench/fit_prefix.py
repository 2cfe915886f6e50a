"""`make bench-prefix`: fit each method's prefix ratio from every recorded (real) sweep.

A recorded sweep is a landscape in bench/landscapes whose header says RECORDED (the synthetic
ones are built from prefix curves and say nothing about the trajectory effect). Prints, per
method, the range of a_i(N) / a_i(N') for N < N' and how many comparisons it rests on, beside
the range ``autotune/spec/methods.py`` states; exits 1 when the stated range does not cover the
fit (tests/unit/test_perf_prefix.py holds the same check).

Usage: .venv/bin/python bench/fit_prefix.py [LANDSCAPE ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from autotune.engine.readers.landscape import read_landscape
from autotune.perf.prefix import PrefixRatio, Run, fit_prefix_ratios
from autotune.spec.methods import METHODS

HERE = Path(__file__).resolve().parent


def recorded_landscapes(folder: Path = HERE / "landscapes") -> list[Path]:
    """The landscapes whose header marks them as recorded on a real engine."""
    out = []
    for path in sorted(folder.glob("*.csv")):
        head = "".join(
            line for line in path.read_text().splitlines(True)[:5] if line.startswith("#")
        )
        if "RECORDED" in head:
            out.append(path)
    return out


def runs_of(paths: list[Path]) -> list[Run]:
    runs: list[Run] = []
    for path in paths:
        for p in read_landscape(path):
            if p.num_speculative_tokens > 0 and p.acceptance_per_pos:
                cell = (path.stem, p.draft, p.params, p.workload, p.concurrency)
                runs.append((p.method, cell, p.num_speculative_tokens, p.acceptance_per_pos, 1))
    return runs


def fit(paths: list[Path] | None = None) -> dict[str, PrefixRatio]:
    return fit_prefix_ratios(runs_of(paths if paths is not None else recorded_landscapes()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("landscapes", nargs="*", type=Path)
    args = parser.parse_args()
    paths = args.landscapes or recorded_landscapes()
    fitted = fit(paths)
    table = Table(title=f"a_i(N) / a_i(N') for N < N', from {', '.join(p.stem for p in paths)}")
    for col in ("method", "fitted low", "fitted high", "comparisons", "stated", "covers"):
        table.add_column(col, justify="right")
    ok = True
    for method, r in fitted.items():
        rule = METHODS.get(method)
        stated = rule.prefix_ratio if rule else None
        covers = stated is not None and stated[0] <= r.low and r.high <= stated[1]
        if rule is not None and rule.prefix_consistent and not covers:
            ok = False
        table.add_row(
            method,
            f"{r.low:.3f}",
            f"{r.high:.3f}",
            str(r.pairs),
            "non-prefix" if rule and not rule.prefix_consistent else f"{stated}",
            "yes" if covers or (rule and not rule.prefix_consistent) else "NO",
        )
    Console(width=140).print(table)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
