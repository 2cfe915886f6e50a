"""``autotune report``: a study's measurements as a table, plots (PNG/HTML) and CSV/Parquet.

The stored ``verify`` lines come from :func:`autotune.verify.verification_lines`, called
directly: ``verify`` is a client of :mod:`autotune.api`, which never imports it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click

from autotune.cli._common import (
    Context,
    echo_json,
    emit_table,
    note,
    output_dir,
    output_file,
    pass_ctx,
    table_format_options,
)


@click.command("report")
@click.argument("study_name", metavar="STUDY")
@click.option(
    "--html",
    "html_path",
    type=output_file(),
    metavar="FILE",
    help="Write a self-contained HTML page that opens on what to deploy (figures as inline SVG; "
    "no network needed).",
)
@click.option(
    "--png",
    "png_dir",
    type=output_dir(),
    metavar="DIR",
    help="Write throughput.png, acceptance.png and speedup.png into DIR.",
)
@click.option(
    "--csv",
    "csv_path",
    type=output_file(),
    metavar="FILE",
    help="Export one row per measurement as CSV.",
)
@click.option(
    "--parquet",
    "parquet_path",
    type=output_file(),
    metavar="FILE",
    help="Export one row per measurement as Parquet (needs pyarrow).",
)
@table_format_options
@pass_ctx
def report(
    ctx: Context,
    study_name: str,
    html_path: Path | None,
    png_dir: Path | None,
    csv_path: Path | None,
    parquet_path: Path | None,
    as_json: bool,
    fmt: str,
) -> None:
    """Show a study's results: per config and cell, median tok/s, spread, speedup, acceptance.

    Prints a table (★ marks the recommended config of each workload × concurrency; repeats
    that disagree by more than the study's max_spread_pct are flagged noisy), the baseline's
    drift per level when the study ran it twice (measurement.drift_check), a "note:
    degenerate outputs" line per cell where most replies ended in a repeating loop (the
    guard: drafts are accepted on loops), then, where the
    engine recorded latencies, each level's Pareto front of throughput vs p99 TPOT (with
    goodput and whether each config meets the study's slo:), one section per context-length
    bucket (context_lengths: its target, real prompt tokens and best config per level), the
    catalog's published acceptance length by N beside the measured one where the catalog
    cites a curve for the model, and writes the plots and exports asked for. Exits 1 when the study has no measurements yet.

    Files are written only into folders that exist (a missing one: exit 2, nothing written).

    \b
    Example:
      autotune report tiny-cpu
      autotune report tiny-cpu --png plots/ --html report.html --csv tiny-cpu.csv
    """
    from autotune import api
    from autotune.report import provenance, summary_table
    from autotune.report.frames import degenerate_cells
    from autotune.report.published import acceptance_comparison
    from autotune.report.table import front_table

    rep = api.report_study(
        ctx.store(),
        study_name,
        html=html_path,
        png_dir=png_dir,
        csv=csv_path,
        parquet=parquet_path,
    )
    df, summary, written = rep.frame, rep.summary, rep.written
    degenerate = degenerate_cells(df)
    published = acceptance_comparison(df)  # the catalog's cited curves beside the measured ALs
    for line in rep.notes:
        note(f"note: {line}")
    for line in api.degenerate_lines(ctx.store(), study_name):  # outputs that fake acceptance
        note(f"note: {line}")
    if as_json or fmt == "json":
        echo_json(
            {
                "study": study_name,
                "model": df.attrs.get("model"),
                "max_spread_pct": summary.attrs.get("max_spread_pct"),
                "provenance": provenance(df),
                "summary": [_clean(r) for r in summary.to_dict("records")],
                "slo": {w: t for w, t in rep.slo_text.items() if t},
                "trade_off": [_clean(r) for r in rep.trade_off.to_dict("records")],
                "baseline_drift": [
                    {"workload": d.workload, "concurrency": d.concurrency, "drift_pct": d.drift_pct}
                    for d in rep.drift
                ],
                "degenerate_cells": degenerate,
                "context_buckets": [b.as_json() for b in rep.buckets],
                "published_acceptance": published.as_json() if published else None,
                "answers": [a.as_json() for a in rep.answers],
                "files": [str(p) for p in written],
            }
        )
        return
    for path in written:
        note(f"wrote {path}")
    if fmt != "tsv":
        click.echo(f"{study_name} · {df.attrs.get('model')}  ({provenance(df)})")
    emit_table(summary_table(summary), fmt)
    if rep.answers and fmt != "tsv":
        from autotune.report.table import answer_lines, answer_table

        click.echo("")
        emit_table(answer_table(rep.answers), fmt)
        for line in answer_lines(rep.answers):
            click.echo(line)
    if not rep.trade_off.empty and fmt != "tsv":
        click.echo("")
        emit_table(front_table(rep.trade_off, rep.slo_text), fmt)
    if fmt != "tsv":
        from autotune.verify import verification_lines

        for line in verification_lines(ctx.store(), study_name):  # autotune verify
            click.echo(line)
        for d in rep.drift:  # the drift check's two baseline runs
            click.echo(d.line(rep.precision_pct))
        if rep.buckets:  # the context-length axis: one section per bucket
            click.echo("\ncontext-length buckets")
            for b in rep.buckets:
                click.echo(b.line())
    if published is not None and fmt != "tsv":
        click.echo("\npublished vs measured acceptance length")
        emit_table(published.table(), fmt)
        for line in published.legend():
            click.echo(line)


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
