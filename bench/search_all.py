"""`make bench-search`: every landscape in bench/landscapes with every strategy over several seeds.

Prints one table: per landscape and strategy, the median engine-seconds to reach the target as a
fraction of the grid's (a full sweep), and how many seeds reached it. The target tolerance of a
landscape matches its own noise: the median relative spread of its repeats, rounded up to a whole
percent, never below 1% (a landscape whose repeats agree within 1% is judged at 1%).
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from autotune.bench.search import available_strategies, grid_and_oracle, run_bench, summarize
from autotune.engine.readers.landscape import read_landscape

HERE = Path(__file__).resolve().parent


def tolerance_pct(path: Path) -> float:
    """The median (max - min) / mean of a landscape's repeats, in percent, rounded up; >= 1."""
    cells: dict[tuple, list[float]] = defaultdict(list)
    for p in read_landscape(path):
        cells[(p.workload, p.config, p.concurrency)].append(p.output_throughput_tok_s)
    spreads = [100.0 * (max(v) - min(v)) / statistics.mean(v) for v in cells.values() if len(v) > 1]
    return float(max(1, math.ceil(statistics.median(spreads)))) if spreads else 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--strategy",
        action="append",
        default=None,
        help="only this strategy (repeatable; default: every one available)",
    )
    parser.add_argument("landscapes", nargs="*", type=Path)
    args = parser.parse_args()
    paths = args.landscapes or sorted((HERE / "landscapes").glob("*.csv"))
    strategies = args.strategy or available_strategies()
    table = Table(
        title=f"median engine-seconds to target / grid engine-seconds ({args.seeds} seeds; "
        "reached/runs in brackets)"
    )
    table.add_column("landscape")
    table.add_column("tolerance", justify="right")
    table.add_column("oracle", justify="right")
    for s in strategies:
        table.add_column(s, justify="right")
    table.add_column("model/oracle", justify="right")
    for path in paths:
        tol = tolerance_pct(path)
        results = run_bench(path, strategies, args.seeds, tol)
        grid_s, oracle_s = grid_and_oracle(path)
        by = {s.strategy: s for s in summarize(results)}
        cells = []
        for s in strategies:
            summary = by[s]
            ratio = summary.median_to_target_ratio
            text = "never" if ratio is None else f"{ratio:.3f}"
            cells.append(f"{text} ({summary.reached}/{summary.runs})")
        model = by["model"].median_to_target_ratio if "model" in by else None
        floor = "never" if model is None else f"{model / (oracle_s / grid_s):.2f}"
        table.add_row(path.stem, f"{tol:g}%", f"{oracle_s / grid_s:.3f}", *cells, floor)
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
