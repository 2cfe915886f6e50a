"""``autotune export``: a study's measurements as a landscape CSV, to replay a real sweep; or the
prompts it measured (and the target's responses) as vLLM Speculators training data."""

from __future__ import annotations

from pathlib import Path

import click

from autotune.cli._common import Context, note, output_path, pass_ctx


@click.command("export")
@click.option(
    "--landscape",
    "study",
    default=None,
    metavar="STUDY",
    help="Export this study's measurements in the landscape format (--output is a CSV file).",
)
@click.option(
    "--speculators-data",
    "speculators_study",
    default=None,
    metavar="STUDY",
    help="Export the prompts this study measured for --workload as vLLM Speculators training "
    "data, with the commands that train an EAGLE-3 and a DFlash draft (--output is a "
    "directory).",
)
@click.option(
    "--workload",
    default=None,
    metavar="NAME",
    help="With --speculators-data: the workload whose prompts to export.",
)
@click.option(
    "--with-responses",
    is_flag=True,
    help="With --speculators-data: run the study's target on the vLLM engine and write its "
    "greedy responses (up to the study's max_tokens) as the assistant turns.",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --landscape: overwrite an existing --output file without asking.",
)
@click.option(
    "-o",
    "--output",
    required=True,
    type=output_path(),
    help="CSV file (--landscape) or directory (--speculators-data) to write; its folder must "
    "exist.",
)
@pass_ctx
def export(
    ctx: Context,
    study: str | None,
    speculators_study: str | None,
    workload: str | None,
    with_responses: bool,
    force: bool,
    output: Path,
) -> None:
    """Write a study's measurements as a landscape CSV, or its prompts as training data.

    --landscape: the CSV (format: docs/landscapes.md) replays through the `replay` engine:
    `autotune study create --landscape FILE` and `autotune bench search --landscape FILE`.
    Measured p99 latencies are written as its p99_tpot_ms, p99_ttft_ms and p99_itl_ms columns,
    so the replay is chosen under an SLO as the study was. An existing file is overwritten only after a yes on a terminal, or with --force (off a
    terminal it is refused, exit 2).

    --speculators-data: for a model with no draft, or a draft that accepts little, train one
    with vLLM Speculators on the target's own outputs. The directory gets prompts.jsonl (the
    exact prompt set the study measured for --workload, checked by its digest), with
    --with-responses responses.jsonl (the target's greedy responses generated on the vLLM
    engine, as Speculators' speculator-format rows), README.md with the Speculators commands
    that train an EAGLE-3 and a DFlash draft, and measure-draft.yaml, the study that measures
    them. A directory that already holds an export is refused (exit 2, nothing written).

    \b
    Example:
      autotune export --landscape tiny-cpu -o tiny-cpu.csv
      autotune export --landscape tiny-cpu -o tiny-cpu.csv --force
      autotune export --speculators-data tiny-cpu --workload code -o data --with-responses
    """
    from autotune import api
    from autotune.errors import SpecError

    if (study is None) == (speculators_study is None):
        raise SpecError("give exactly one of --landscape STUDY and --speculators-data STUDY")
    if speculators_study is None:
        if workload is not None or with_responses:
            raise SpecError("--workload and --with-responses go with --speculators-data only")
        assert study is not None
        if output.exists() and not force:
            import sys

            if not sys.stdin.isatty():
                raise SpecError(
                    "exists; pass --force to overwrite it (nothing written)", source=str(output)
                )
            click.confirm(f"{output} exists; overwrite it?", abort=True, err=True)
        n = api.export_landscape(ctx.store(), study, output)
        note(f"wrote {n} rows to {output}")
        return
    if workload is None:
        raise SpecError("--speculators-data needs --workload NAME", source="--workload")
    result = api.export_speculators_data(
        ctx.store(), speculators_study, workload, output, with_responses=with_responses
    )
    what = f"{result.prompts} prompts"
    if result.responses:
        what += f", {result.responses} responses ({result.response_tokens} response tokens)"
    note(f"wrote {what} of {workload} (digest {result.workload_digest[:12]}) to {output}")
    note(f"next: the training commands in {output / 'README.md'}")
