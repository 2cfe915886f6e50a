"""``autotune report``: a study's measurements as a table, plots (PNG/HTML) and CSV/Parquet."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click

from autotune.cli._common import Context, console, echo_json, json_option, pass_ctx


@click.command("report")
@click.argument("study_name", metavar="STUDY")
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Write a self-contained HTML report (interactive with plotly, else PNG images).",
)
@click.option(
    "--png",
    "png_dir",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Write throughput.png, acceptance.png and speedup.png into DIR.",
)
@click.option(
    "--csv",
    "csv_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Export one row per measurement as CSV.",
)
@click.option(
    "--parquet",
    "parquet_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Export one row per measurement as Parquet (needs pyarrow).",
)
@json_option
@pass_ctx
def report(
    ctx: Context,
    study_name: str,
    html_path: Path | None,
    png_dir: Path | None,
    csv_path: Path | None,
    parquet_path: Path | None,
    as_json: bool,
) -> None:
    """Show a study's results: per config and cell, median tok/s, spread, speedup, acceptance.

    Prints a table (★ marks the recommended config of each workload × concurrency; repeats
    that disagree by more than the study's max_spread_pct are flagged noisy) and writes the
    plots and exports asked for. Exits 1 when the study has no measurements yet.

    \b
    Example:
      autotune report tiny-cpu
      autotune report tiny-cpu --png plots/ --html report.html --csv tiny-cpu.csv
    """
    from autotune import api
    from autotune.errors import NoResultError
    from autotune.report import (
        measurements_frame,
        plot_png,
        provenance,
        require_parquet,
        summary_frame,
        summary_table,
        write_csv,
        write_html,
        write_parquet,
    )

    if parquet_path is not None:
        require_parquet()  # before anything is written
    df = measurements_frame(ctx.store(), study_name)
    if df.empty:
        raise NoResultError(
            f"study {study_name!r} has no measurements yet (autotune study run {study_name})"
        )
    summary = summary_frame(df)
    written: list[Path] = []
    if csv_path is not None:
        written.append(write_csv(df, csv_path))
    if parquet_path is not None:
        written.append(write_parquet(df, parquet_path))
    if png_dir is not None:
        written.extend(plot_png(df, png_dir))
    if html_path is not None:
        written.append(write_html(df, html_path))

    if as_json:
        echo_json(
            {
                "study": study_name,
                "model": df.attrs.get("model"),
                "max_spread_pct": summary.attrs.get("max_spread_pct"),
                "provenance": provenance(df),
                "summary": [_clean(r) for r in summary.to_dict("records")],
                "files": [str(p) for p in written],
            }
        )
        return
    con = console()
    con.print(f"[bold]{study_name}[/bold] · {df.attrs.get('model')}  ({provenance(df)})")
    con.print(summary_table(summary))
    for line in api.verification_lines(ctx.store(), study_name):  # autotune verify
        con.print(line)
    for path in written:
        click.echo(f"wrote {path}")


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    """JSON-ready: NaN becomes null, numpy scalars become Python numbers."""
    out = {}
    for key, value in row.items():
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, float) and math.isnan(value):
            value = None
        if key == "speculative_config" and isinstance(value, str):
            value = json.loads(value)
        out[str(key)] = value
    return out
