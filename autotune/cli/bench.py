"""``autotune bench ...``: benchmark the search strategies on recorded landscapes.

The benchmark is a client of :mod:`autotune.api` (it creates and runs real studies through the
facade), so this command calls :func:`autotune.bench.search.bench_search` directly; the facade
never imports the benchmark.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from autotune.cli._common import NON_NEGATIVE_FLOAT, emit_table


@click.group()
def bench() -> None:
    """Benchmark autotune itself (no engine is started).

    \b
    Example:
      # from the root of the autotune checkout, which ships the landscapes:
      autotune bench search --landscape bench/landscapes/synthetic-qwen27b-dense.csv
    """


@bench.command("search")
@click.option(
    "--landscape",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Landscape CSV to replay (a recorded sweep; format: docs/landscapes.md).",
)
@click.option(
    "--strategy",
    "strategies",
    multiple=True,
    type=click.Choice(["model", "grid", "random", "tpe", "gp"]),
    help="Strategy to run (repeatable) [default: all; gp only when scipy is installed].",
)
@click.option(
    "--seeds",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Runs per strategy, with seeds 0..N-1.",
)
@click.option(
    "--tolerance",
    type=NON_NEGATIVE_FLOAT,
    default=1.0,
    show_default=True,
    metavar="PCT",
    help="Target: the recommendation at every level within PCT percent of that level's true "
    "best (the mean over the landscape's repeats, leaving out a repeat a transient slowed).",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Runs in parallel processes [default: the number of CPUs, at most 4].",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON document instead of tables: {landscape, tolerance_pct, runs}, one run "
    "per strategy and seed.",
)
def search(
    landscape: Path,
    strategies: tuple[str, ...],
    seeds: int,
    tolerance: float,
    jobs: int | None,
    as_json: bool,
) -> None:
    """Run search strategies on a landscape through the replay engine and the real tuner loop.

    Each run uses a fresh SQLite store and reports the engine-seconds it spent, its engine
    starts, the engine-seconds until the recommendation was within --tolerance of the truth at
    every (workload, concurrency) level and stayed there (null if never), its final worst regret
    in percent, and the cost of measuring the whole landscape once (grid_engine_seconds).

    \b
    Example:
      # from the root of the autotune checkout, which ships the landscapes:
      autotune bench search --landscape bench/landscapes/synthetic-qwen27b-dense.csv \\
          --strategy model --strategy grid --strategy tpe --seeds 3
      autotune bench search --landscape L.csv --tolerance 3 --json
    """
    from autotune.bench.search import bench_search

    result = bench_search(landscape, strategies, seeds, tolerance, jobs=jobs)
    if as_json:  # one JSON document, as every --json (was: one object per line)
        doc = {"landscape": str(landscape), "tolerance_pct": tolerance, "runs": list(result.runs)}
        click.echo(json.dumps(doc, indent=2))
        return
    _print_tables(
        landscape,
        result.runs,
        result.summaries,
        tolerance,
        result.grid_engine_seconds,
        result.oracle_engine_seconds,
    )


def _print_tables(
    landscape: Path,
    results: list[dict[str, Any]],
    summaries: list[Any],
    tolerance: float,
    grid_s: float,
    oracle_s: float,
) -> None:
    from autotune.tables import Column, TextTable

    def columns(names: tuple[str, ...]) -> list[Column]:
        return [Column(n, "id" if n == "strategy" else "number") for n in names]

    runs = TextTable(
        columns(
            (
                "strategy",
                "seed",
                "engine starts",
                "engine-s",
                "engine-s to target",
                "to target / grid",
                "final regret %",
            )
        ),
        title=f"{landscape.name}: runs (target: within {tolerance:g}% at every level)",
    )
    for r in results:
        to_target = r["engine_seconds_to_target"]
        runs.add_row(
            r["strategy"],
            str(r["seed"]),
            str(r["engine_starts"]),
            f"{r['engine_seconds']:,.0f}",
            "never" if to_target is None else f"{to_target:,.0f}",
            "-" if to_target is None else f"{to_target / r['grid_engine_seconds']:.3f}",
            f"{r['final_regret_pct']:.2f}",
        )
    emit_table(runs)
    click.echo()
    table = TextTable(
        columns(
            (
                "strategy",
                "reached",
                "median to target / grid",
                "median spent / grid",
                "median starts",
                "worst final regret %",
            )
        ),
        title=f"per strategy: grid = {grid_s:,.0f} engine-s; an oracle (baseline, each method "
        f"at its largest N, every level's true best) = {oracle_s / grid_s:.3f} of the grid",
    )
    for s in summaries:
        ratio = s.median_to_target_ratio
        table.add_row(
            s.strategy,
            f"{s.reached}/{s.runs}",
            "never" if ratio is None else f"{ratio:.3f}",
            f"{s.median_spent_ratio:.3f}",
            f"{s.median_engine_starts:g}",
            f"{s.worst_final_regret_pct:.2f}",
        )
    emit_table(table)
