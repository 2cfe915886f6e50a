"""``autotune verify``: the recommendation through ``vllm serve`` and ``vllm bench serve``,
compared with the study (exit 0 within tolerance, 1 not).

``verify`` is a client of :mod:`autotune.api` (it asks the facade for the recommendation it
serves), so this command calls the :mod:`autotune.verify` entry point directly; the facade never
imports ``autotune.verify``.
"""

from __future__ import annotations

from pathlib import Path

import click

from autotune.cli._common import (
    POSITIVE_FLOAT,
    Context,
    echo_json,
    json_option,
    output_dir,
    pass_ctx,
)


@click.command("verify")
@click.option("--model", required=True, metavar="ALIAS", help="Catalog alias or HF id.")
@click.option("--workload", required=True, metavar="NAME", help="Workload name.")
@click.option(
    "--study",
    "study_name",
    default=None,
    metavar="NAME",
    help="Verify this study's recommendation [default: the one `recommend` answers from].",
)
@click.option(
    "--dsd",
    is_flag=True,
    help="Verify the Dynamic SD table (recommend --format dsd) against the best fixed N and "
    "against true off (three servers) instead of the recommended config against the "
    "baseline; per level the table is judged against off, and the answer is the table, "
    "routing by load (plain above the crossing concurrency), or undecided (rerun with more "
    "--repeats).",
)
@click.option(
    "--table",
    "table",
    default=None,
    metavar="CONFIG",
    help="Verify this Dynamic SD config instead of the recommended table (implies --dsd): a "
    "--speculative-config with num_speculative_tokens_per_batch_size, inline JSON, a JSON or "
    "YAML file, or '-' for stdin; its method must be one the study measured.",
)
@click.option(
    "--tolerance",
    "tolerance_pct",
    type=POSITIVE_FLOAT,
    default=10.0,
    show_default=True,
    metavar="PCT",
    help="Exit 1 when a level's server-path speedup differs from the study's by more than "
    "PCT percent.",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="vllm bench serve runs per level and server (the median counts).",
)
@click.option(
    "--workdir",
    type=output_dir(),
    default=None,
    metavar="DIR",
    help="Keep the server logs and request files here [default: a temporary directory].",
)
@json_option
@pass_ctx
def verify(
    ctx: Context,
    model: str,
    workload: str,
    study_name: str | None,
    dsd: bool,
    table: str | None,
    tolerance_pct: float,
    repeats: int,
    workdir: Path | None,
    as_json: bool,
) -> None:
    """Check a recommendation through vLLM's own server and benchmark client.

    Starts `vllm serve` (loopback only) with the recommended command line, drives it with
    `vllm bench serve` at each of the study's concurrency levels on the study's prompts and
    output lengths, does the same for the baseline, and prints per level the throughput and
    acceptance length through the server beside the study's in-process numbers, and both
    speedups. With --dsd it serves the Dynamic SD table, the best fixed N and true off (no
    --speculative-config): per level the table against off by the shared rule
    (docs/answers.md), and the answer: the table where its N=0 bands tie with off or beat
    it, the speculative deployment below the crossing concurrency and a plain one above it
    where a 0-band decidedly loses (route by load), else undecided (rerun with more
    --repeats); the fixed N against off is stored as its own verification too.
    --table serves the Dynamic SD config you deploy instead of the recommended table. The
    result is stored with the study (`report`, `check` and `recommend --format dsd` show
    it). Exit 1 when a level's server-path speedup differs from the study's by more than
    --tolerance.

    \b
    Example:
      autotune verify --model tiny --workload code
      autotune verify --model tiny --workload code --dsd --repeats 2 --tolerance 15
      autotune verify --model tiny --workload code --repeats 2 --table deployed-dsd.json
    """
    from autotune.verify import verify as verify_recommendation
    from autotune.verify.compare import render

    result = verify_recommendation(
        ctx.store(),
        model,
        workload,
        study=study_name,
        dsd=dsd or table is not None,
        table=table,
        tolerance_pct=tolerance_pct,
        repeats=repeats,
        workdir=workdir,
        progress=lambda line: click.echo(line, err=True),
    )
    if as_json:
        echo_json(result.to_json())
    else:
        click.echo(render(result))
    if not result.passed:
        raise click.exceptions.Exit(1)
