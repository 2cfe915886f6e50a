"""``autotune export``: a study's measurements as a landscape CSV, to replay a real sweep."""

from __future__ import annotations

from pathlib import Path

import click

from autotune.cli._common import Context, note, pass_ctx


@click.command("export")
@click.option(
    "--landscape",
    "study",
    required=True,
    metavar="STUDY",
    help="Export this study's measurements in the landscape format.",
)
@click.option(
    "-o", "--output", required=True, type=click.Path(path_type=Path), help="CSV file to write."
)
@pass_ctx
def export(ctx: Context, study: str, output: Path) -> None:
    """Write a study's measurements as a landscape CSV (format: docs/landscapes.md).

    The file replays through the `replay` engine: `autotune study create --landscape FILE`
    and `autotune bench search --landscape FILE`.

    \b
    Example:
      autotune export --landscape tiny-cpu -o bench/landscapes/tiny-cpu.csv
    """
    from autotune import api

    n = api.export_landscape(ctx.store(), study, output)
    note(f"wrote {n} rows to {output}")
