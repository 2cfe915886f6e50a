"""``autotune check``: a CI gate on a deployed --speculative-config (exit 0 ok, 1 not)."""

from __future__ import annotations

import click

from autotune.cli._common import NON_NEGATIVE_FLOAT, POSITIVE_INT, Context, pass_ctx


@click.command("check")
@click.option(
    "--model", required=True, metavar="ALIAS", help="Catalog alias or HF id of the model."
)
@click.option("--workload", required=True, metavar="NAME", help="Workload name.")
@click.option(
    "--config",
    "config_arg",
    required=True,
    metavar="CONFIG",
    help="The deployed --speculative-config: inline JSON as `vllm serve` takes it, a JSON or "
    "YAML file (what `recommend --format yaml` writes), or '-' for stdin; null or {} means "
    "speculation off. Normalized with vLLM's defaults before it is compared.",
)
@click.option(
    "--concurrency",
    type=POSITIVE_INT,
    default=None,
    metavar="C",
    help="Judge at this concurrency level [default: one config for all measured levels, "
    "as `autotune recommend` answers].",
)
@click.option(
    "--context",
    type=click.IntRange(min=1),
    default=None,
    metavar="L",
    help="Judge against the context-length bucket for requests of L prompt tokens, as "
    "`autotune recommend --context` picks it.",
)
@click.option(
    "--tolerance",
    "tolerance_pct",
    type=NON_NEGATIVE_FLOAT,
    default=1.0,
    show_default=True,
    metavar="PCT",
    help="Pass when the deployed config's measured score is at most PCT percent below the "
    "recommended config's.",
)
@click.option(
    "--study",
    "study_name",
    default=None,
    metavar="NAME",
    help="Use this study [default: the newest that measured the pair].",
)
@pass_ctx
def check(
    ctx: Context,
    model: str,
    workload: str,
    config_arg: str,
    concurrency: int | None,
    context: int | None,
    tolerance_pct: float,
    study_name: str | None,
) -> None:
    """Check that a deployed --speculative-config is as fast as the recommended one.

    Exit 0 when the deployed config's measured throughput (robust score: median − 1.4826·MAD
    over repeats) is within --tolerance of the recommended config's. Exit 1, with a one-line
    reason, when it is not, when the deployed config was never measured, or when the study was
    measured on another vLLM version than the one installed (replayed studies excepted).
    A level whose recommendation is low-confidence (the winner's margin inside the measured
    noise, or a noisy winner or baseline) gets a "note: low confidence at concurrency C" line on
    stderr; the exit code does not change.

    \b
    Example:
      autotune recommend --model tiny --workload code > deployed.json
      autotune check --model tiny --workload code --config deployed.json
      autotune check --model tiny --workload code --config '{"method": "ngram", "num_speculative_tokens": 2}'
      autotune check --model kimi --workload code --config spec.json --concurrency 8 --tolerance 2
      autotune check --model tiny --workload code --context 512 --config deployed.json
    """
    from autotune import api
    from autotune.recommend import check as gate
    from autotune.recommend.normalize import parse_config_text, read_config_arg

    deployed = parse_config_text(*read_config_arg(config_arg))

    if context is not None:  # the context-length axis: judge at the bucket for L
        pick = api.context_bucket(ctx.store(), model, workload, context, study_name)
        click.echo(f"note: {pick.line()}", err=True)
        workload = pick.workload
    rec = api.recommend(ctx.store(), model, workload, concurrency, study=study_name)
    # a partial study, or one whose space was not exhausted (#11.2); low-confidence levels (#11.8)
    for note in (*rec.notes, *(lc.line() for lc in rec.low_confidence)):
        click.echo(f"note: {note}", err=True)
    result = gate.check(
        rec.choice,
        deployed,
        study=rec.study.name,
        tolerance_pct=tolerance_pct,
        measured_vllm_versions=[r.vllm_version for r in rec.rows],
        installed_vllm=gate.installed_vllm_version(),
        levels=[lv.concurrency for lv in rec.per_level],
    )
    for line in api.verification_lines(ctx.store(), rec.study, workload):  # autotune verify
        click.echo(f"note: {line}", err=True)
    if not result.ok:
        raise gate.CheckFailed(result.reason)
    click.echo(result.reason)
