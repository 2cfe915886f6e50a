"""``autotune recommend``: the measured best --speculative-config for (model, workload)."""

from __future__ import annotations

from typing import Any

import click

from autotune.cli._common import Context, console, pass_ctx

FORMATS = ("json", "args", "yaml", "dsd")


@click.command("recommend")
@click.option(
    "--model", required=True, metavar="ALIAS", help="Catalog alias or HF id of the model."
)
@click.option("--workload", required=True, metavar="NAME", help="Workload name.")
@click.option(
    "--concurrency",
    type=int,
    default=None,
    metavar="C",
    help="Answer for this concurrency level [default: one config for all levels].",
)
@click.option(
    "--study",
    "study_name",
    default=None,
    metavar="NAME",
    help="Use this study [default: the newest that measured the pair].",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="json",
    show_default=True,
    help="json: the --speculative-config JSON; args: a full `vllm serve` line; "
    "yaml; dsd: a Dynamic SD config whose N follows the batch size.",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Also print throughput, speedup, acceptance, runner-up and provenance.",
)
@pass_ctx
def recommend(
    ctx: Context,
    model: str,
    workload: str,
    concurrency: int | None,
    study_name: str | None,
    fmt: str,
    explain: bool,
) -> None:
    """Print the recommended --speculative-config for a model and workload.

    Reads the study store; with nothing measured for the pair it says so and exits 1.
    "null" means no speculative config beat running without one.

    \b
    Example:
      autotune recommend --model tiny --workload code
      autotune recommend --model tiny --workload code --concurrency 4 --format args
    """
    from autotune import api
    from autotune.errors import NoResultError
    from autotune.recommend import render

    try:
        rec = api.recommend(ctx.store(), model, workload, concurrency, study=study_name)
    except NoResultError as exc:
        prior = None if study_name else api.published_prior(model, workload, concurrency)
        if prior is None:
            if study_name:
                raise
            raise NoResultError(f"{exc}; no published result is known for it either") from None
        _print_prior(prior, fmt, explain)
        return
    config = rec.choice.best.speculative_config
    from autotune.errors import AutotuneError
    from autotune.recommend.validate import check_speculative_config

    shown = render.dsd_config(rec.per_level) if fmt == "dsd" else config
    problems = check_speculative_config(shown)
    if problems:  # a bug in autotune, not in the user's input: say so loudly
        raise AutotuneError(f"vLLM's SpeculativeConfig refuses the recommendation: {problems[0]}")
    if fmt == "json":
        click.echo(render.speculative_json(config))
    elif fmt == "yaml":
        click.echo(render.as_yaml(config), nl=False)
    elif fmt == "args":
        click.echo(
            render.serve_args(
                rec.model,
                config,
                tensor_parallel_size=rec.resolved.tensor_parallel_size,
                engine_args=rec.resolved.engine_args,
            )
        )
    else:
        click.echo(render.speculative_json(shown))
    if explain:
        _explain(rec)


def _print_prior(prior: Any, fmt: str, explain: bool) -> None:
    """A published result, labelled as such on stderr; stdout stays pasteable."""
    import json

    from autotune.recommend import render

    r = prior.result
    config = prior.speculative_config
    if fmt == "yaml":
        click.echo(render.as_yaml(config), nl=False)
    elif fmt == "args":
        click.echo(render.serve_args(r.model, config))
    else:
        click.echo(render.speculative_json(config))
    label = {
        "source": "published",
        "speedup": r.speedup,
        "dataset": r.dataset,
        "concurrency": r.concurrency,
        "hardware": r.hardware,
        "url": r.source,
        "date": str(r.date) if r.date else None,
    }
    click.echo(
        "note: nothing measured for this pair; answering from a published result, not a "
        "measurement on your hardware: " + json.dumps(label),
        err=True,
    )
    if explain and r.notes:
        click.echo(f"notes: {r.notes}", err=True)


def _explain(rec: Any) -> None:
    from rich.table import Table

    con = console()
    c = rec.choice
    best = c.best
    where = (
        f"concurrency {rec.concurrency}" if rec.concurrency else "all measured concurrency levels"
    )
    con.print(
        f"\n[bold]{rec.model_alias or rec.model}[/bold] / {rec.workload} at {where} "
        f"(study {rec.study.name})"
    )
    con.print(f"recommended  {best.label()}")
    table = Table(
        "concurrency",
        "best",
        "tok/s (median)",
        "speedup",
        "AL",
        "repeats",
        "spread %",
        "runner-up",
        "margin %",
    )
    for lv in rec.per_level:
        b = lv.best
        table.add_row(
            str(lv.concurrency),
            b.label(),
            f"{b.median_tok_s:,.1f}",
            f"{lv.speedup:.2f}x" if lv.speedup else "-",
            f"{b.mean_acceptance_length:.2f}" if b.mean_acceptance_length else "-",
            str(b.repeats),
            f"{b.spread_pct:.1f}",
            lv.runner_up.label() if lv.runner_up else "-",
            f"{lv.margin_pct:.1f}" if lv.margin_pct is not None else "-",
        )
    con.print(table)
    if best.acceptance_per_pos:
        con.print(
            "acceptance per position  " + " ".join(f"{a:.2f}" for a in best.acceptance_per_pos)
        )
    rows = [r for r in rec.rows if r.trial_id in best.trial_ids] or list(rec.rows)
    r0 = rows[0]
    con.print(
        f"provenance   vLLM {r0.vllm_version} on {r0.device_name} ({r0.device_arch}); "
        f"workload digest {r0.workload_digest[:12]}"
    )
    if r0.env:
        con.print("engine env   " + " ".join(f"{k}={v}" for k, v in sorted(r0.env.items())))
