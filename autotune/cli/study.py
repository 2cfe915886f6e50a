"""``autotune study ...``: create, list, show, run, resume and delete studies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from autotune.cli._common import Context, console, echo_json, json_option, pass_ctx


@click.group()
def study() -> None:
    """Create, inspect, run and delete studies.

    \b
    Example:
      autotune study create studies/tiny-cpu.yaml
      autotune study run tiny-cpu
      autotune study show tiny-cpu
    """


@study.command("create")
@click.argument("file", required=False, type=click.Path(path_type=Path))
@click.option("--model", "model", metavar="ALIAS", help="Quick study: catalog alias or HF id.")
@click.option(
    "--workload",
    "workloads",
    multiple=True,
    metavar="NAME",
    help="Quick study: workload (repeatable).",
)
@click.option("--name", metavar="NAME", help="Quick study: study name [default: MODEL-WORKLOADS].")
@click.option(
    "--concurrency",
    "concurrency",
    multiple=True,
    type=int,
    metavar="C",
    help="Quick study: concurrency level (repeatable) [default: 1, 8, 32].",
)
@click.option(
    "--method",
    "methods",
    multiple=True,
    metavar="METHOD",
    help="Quick study: method to search (repeatable) [default: the catalog's for the model].",
)
@click.option("--repeats", type=int, default=None, help="Quick study: repeats per measurement.")
@click.option("--replace", is_flag=True, help="Replace an existing study of the same name.")
@json_option
@pass_ctx
def create(
    ctx: Context,
    file: Path | None,
    model: str | None,
    workloads: tuple[str, ...],
    name: str | None,
    concurrency: tuple[int, ...],
    methods: tuple[str, ...],
    repeats: int | None,
    replace: bool,
    as_json: bool,
) -> None:
    """Validate a study file (or quick-study flags) and store the study.

    Nothing is written when the file, an alias, a workload or a method rule is wrong: the
    error names the file and field and the exit code is 2.

    \b
    Example:
      autotune study create studies/tiny-cpu.yaml
      autotune study create --model tiny --workload code --concurrency 1 --concurrency 4
    """
    from autotune import api
    from autotune.errors import SpecError

    store = ctx.store()
    if file is not None:
        if model or workloads or name or concurrency or methods or repeats:
            raise SpecError(
                "give either FILE or the quick-study flags, not both", source="study create"
            )
        created = api.create_study(store, file, replace=replace)
    else:
        if not model or not workloads:
            raise SpecError("give a study FILE, or --model and --workload", source="study create")
        data: dict[str, Any] = {
            "name": name or f"{model}-{'-'.join(workloads)}".lower().replace("/", "-"),
            "model": {"name": model},
            "workloads": list(workloads),
        }
        if concurrency:
            data["concurrency"] = list(concurrency)
        if methods:
            data["methods"] = [{"method": m} for m in methods]
        if repeats is not None:
            data["repeats"] = repeats
        created = api.create_study(
            store, data=data, source="--model/--workload flags", replace=replace
        )
    if as_json:
        echo_json(
            {"name": created.study.name, "warnings": created.resolved.warnings, "db": store.url}
        )
        return
    for warning in created.resolved.warnings:
        click.echo(f"warning: {warning}", err=True)
    from autotune.search.space import SearchSpace

    n = len(SearchSpace(created.resolved))
    click.echo(
        f"created study {created.study.name!r} ({created.resolved.model}, "
        f"{n} engine configs, workloads {', '.join(created.resolved.spec.workloads)}) in {store.url}"
    )


@study.command("list")
@json_option
@pass_ctx
def list_(ctx: Context, as_json: bool) -> None:
    """List the studies in the store.

    \b
    Example:
      autotune study list
      autotune --db sqlite:///other.db study list --json
    """
    records = ctx.store().list_studies()
    if as_json:
        echo_json([_study_summary(r) for r in records])
        return
    if not records:
        click.echo("no studies yet: autotune study create FILE")
        return
    from rich.table import Table

    table = Table("name", "model", "status", "trials", "failed", "measurements", "created")
    for r in records:
        table.add_row(
            r.name,
            r.model_alias or r.model,
            r.status,
            str(r.num_trials),
            str(r.num_failed),
            str(r.num_measurements),
            r.created_at.strftime("%Y-%m-%d %H:%M"),
        )
    console().print(table)


def _study_summary(r: Any) -> dict[str, Any]:
    return {
        "name": r.name,
        "model": r.model,
        "model_alias": r.model_alias,
        "status": r.status,
        "trials": r.num_trials,
        "failed": r.num_failed,
        "measurements": r.num_measurements,
        "created_at": r.created_at.isoformat(),
        "source": r.source,
    }


@study.command("show")
@click.argument("name")
@json_option
@pass_ctx
def show(ctx: Context, name: str, as_json: bool) -> None:
    """Show a study: its resolved spec, search space and trials.

    \b
    Example:
      autotune study show tiny-cpu
    """
    from autotune import api
    from autotune.search.space import SearchSpace

    record, resolved, trials = api.get_study(ctx.store(), name)
    if as_json:
        echo_json(
            {
                **_study_summary(record),
                "resolved": resolved.model_dump(mode="json"),
                "trials": [
                    {
                        "number": t.number,
                        "method": t.method,
                        "draft": t.draft,
                        "num_speculative_tokens": t.num_speculative_tokens,
                        "state": t.state,
                        "failure_reason": t.failure_reason,
                        "engine_start_s": t.engine_start_s,
                        "engine_seconds": t.engine_seconds,
                    }
                    for t in trials
                ],
            }
        )
        return
    from rich.table import Table

    con = console()
    spec = resolved.spec
    con.print(f"[bold]{record.name}[/bold]  {record.status}  ({record.source})")
    if spec.description:
        con.print(spec.description)
    con.print(
        f"model        {resolved.model}  (tensor_parallel_size={resolved.tensor_parallel_size})"
    )
    con.print(f"workloads    {', '.join(spec.workloads)}")
    con.print(f"concurrency  {', '.join(map(str, spec.concurrency))}")
    con.print(f"repeats      {spec.repeats}   sampler {spec.sampler}   engine {spec.engine.kind}")
    con.print(f"space        {len(SearchSpace(resolved))} engine configs")
    methods = Table("method", "draft", "N", "params", title="methods")
    for m in resolved.methods:
        n = m.num_speculative_tokens
        methods.add_row(
            m.method,
            m.draft or "-",
            f"{n.min}..{n.max}",
            ", ".join(f"{k}={v}" for k, v in m.params.items()) or "-",
        )
    con.print(methods)
    for w in resolved.warnings:
        con.print(f"[yellow]warning[/yellow] {w}")
    if trials:
        t_table = Table("#", "config", "state", "start s", "engine s", "reason", title="trials")
        for t in trials:
            label = "baseline" if t.method == "none" else f"{t.method} N={t.num_speculative_tokens}"
            t_table.add_row(
                str(t.number),
                label,
                t.state,
                f"{t.engine_start_s:.1f}" if t.engine_start_s is not None else "-",
                f"{t.engine_seconds:.1f}" if t.engine_seconds is not None else "-",
                t.failure_reason or "",
            )
        con.print(t_table)


@study.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_ctx
def delete(ctx: Context, name: str, yes: bool) -> None:
    """Delete a study with its trials, measurements and Optuna study.

    \b
    Example:
      autotune study delete tiny-cpu --yes
    """
    from autotune import api

    store = ctx.store()
    store.get_study(name)  # fail before asking
    if not yes:
        click.confirm(f"delete study {name!r} and all its measurements?", abort=True)
    api.delete_study(store, name)
    click.echo(f"deleted study {name!r}")


def _run_options(f: Any) -> Any:
    f = click.option(
        "--ray-address",
        metavar="ADDR",
        default=None,
        envvar="RAY_ADDRESS",
        help="Connect to this Ray cluster instead of starting a local one.",
    )(f)
    f = click.option(
        "--max-engines",
        type=int,
        default=None,
        metavar="N",
        help="At most N engines at once [default: one per GPU group; 1 on CPU].",
    )(f)
    f = click.option(
        "--max-configs",
        type=int,
        default=None,
        metavar="N",
        help="Stop after N engine configs in this run (resume continues).",
    )(f)
    f = click.option(
        "--wait",
        is_flag=True,
        help="If another driver is running the study, wait for it to finish instead of "
        "exiting with code 2.",
    )(f)
    f = click.option(
        "--verbose",
        "-v",
        is_flag=True,
        help="Stream the engines' logs (vLLM, Ray) to the terminal.",
    )(f)
    return f


def _run(
    ctx: Context,
    name: str,
    ray_address: str | None,
    max_engines: int | None,
    max_configs: int | None,
    verbose: bool,
    wait: bool = False,
) -> None:
    from autotune import api
    from autotune.cli.progress import RichReporter

    store = ctx.store()
    store.get_study(name)
    summary = api.run_study(
        store,
        name,
        ray_address=ray_address,
        max_engines=max_engines,
        max_configs=max_configs,
        reporter=RichReporter(console()),
        log_to_driver=verbose,
        wait=wait,
        on_wait=lambda why: click.echo(f"autotune: waiting: {why}", err=True),
    )
    click.echo(
        f"{summary.trials_run} engine configs measured, {summary.trials_failed} failed, "
        f"{summary.measurements} measurements, {summary.engine_seconds:,.0f} engine-seconds"
        + (f"; stopped: {summary.stop_reason}" if summary.stop_reason else "")
    )
    for label, reason in summary.failures:
        click.echo(f"  failed: {label}: {reason}")


@study.command("run")
@click.argument("name")
@_run_options
@pass_ctx
def run(
    ctx: Context,
    name: str,
    ray_address: str | None,
    max_engines: int | None,
    max_configs: int | None,
    verbose: bool,
    wait: bool,
) -> None:
    """Measure a study's engine configs until its space or budget is exhausted.

    Each engine config starts one vLLM engine in a Ray actor, which measures every
    workload × concurrency × repeat warm before it is torn down. Measurements are stored as
    they arrive; an engine that fails becomes a failed trial with its reason.

    \b
    Example:
      autotune study run tiny-cpu
      autotune study run kimi-k2.5 --ray-address auto
    """
    _run(ctx, name, ray_address, max_engines, max_configs, verbose, wait)


@study.command("resume")
@click.argument("name")
@_run_options
@pass_ctx
def resume(
    ctx: Context,
    name: str,
    ray_address: str | None,
    max_engines: int | None,
    max_configs: int | None,
    verbose: bool,
    wait: bool,
) -> None:
    """Continue an interrupted study without re-measuring completed configs.

    Trials a killed driver left running are marked interrupted and measured again.

    \b
    Example:
      autotune study resume tiny-cpu
    """
    _run(ctx, name, ray_address, max_engines, max_configs, verbose, wait)
