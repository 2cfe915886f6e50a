"""``autotune study ...``: create, list, show, run, resume and delete studies."""

from __future__ import annotations

import contextlib
import shlex
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from autotune.cli._common import (
    NAME,
    POSITIVE_INT,
    Context,
    FiniteFloatRange,
    confirm_destructive,
    echo_json,
    emit_table,
    engine_logging_as_user_set,
    json_option,
    note,
    pass_ctx,
    table_format_options,
)


@click.group()
def study() -> None:
    """Create, inspect, run and delete studies.

    \b
    Example:
      # from the root of the autotune checkout, which ships the study files:
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
@click.option(
    "--name", type=NAME, metavar="NAME", help="Quick study: study name [default: MODEL-WORKLOADS]."
)
@click.option(
    "--concurrency",
    "concurrency",
    multiple=True,
    type=POSITIVE_INT,
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
@click.option(
    "--repeats", type=POSITIVE_INT, default=None, help="Quick study: repeats per measurement."
)
@click.option(
    "--landscape",
    type=click.Path(path_type=Path),
    metavar="CSV",
    help="Replay study of a recorded sweep (docs/landscapes.md); needs --name.",
)
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
    landscape: Path | None,
    replace: bool,
    as_json: bool,
) -> None:
    """Validate a study file (or quick-study flags) and store the study.

    Nothing is written when the file, an alias, a workload or a method rule is wrong: the
    error names the file and field and the exit code is 2.

    \b
    Example:
      autotune study create --model tiny --workload code --concurrency 1 --concurrency 4
      # the study files and landscapes shipped in the autotune checkout, run from its root:
      autotune study create studies/tiny-cpu.yaml
      autotune study create --landscape bench/landscapes/cpu-tiny-llama.csv --name replayed
    """
    from autotune import api
    from autotune.errors import SpecError

    store = ctx.store()
    if landscape is not None:
        if file is not None or model or workloads or concurrency or methods or not name:
            raise SpecError("--landscape takes --name (and --repeats) only", source="study create")
        created = api.create_replay_study(store, landscape, name, repeats=repeats, replace=replace)
    elif file is not None:
        if model or workloads or name or concurrency or methods or repeats:
            raise SpecError(
                "give either FILE or the quick-study flags, not both", source="study create"
            )
        created = api.create_study(store, file, replace=replace)
    else:
        if not model or not workloads:
            raise SpecError("give a study FILE, or --model and --workload", source="study create")
        created = api.create_quick_study(
            store,
            model,
            workloads,
            name=name,
            concurrency=concurrency,
            methods=methods,
            repeats=repeats,
            replace=replace,
        )
    if as_json:
        echo_json(
            {
                "name": created.study.name,
                "warnings": created.resolved.warnings,
                "db": store.shown_url,
            }
        )
        return
    for warning in created.resolved.warnings:
        click.echo(f"warning: {warning}", err=True)
    n = api.space_size(created.resolved)
    click.echo(
        f"created study {created.study.name!r} ({created.resolved.model}, "
        f"{n} engine configs, workloads {', '.join(created.resolved.spec.workloads)}) in {store.shown_url}"
    )


@study.command("list")
@table_format_options
@pass_ctx
def list_(ctx: Context, as_json: bool, fmt: str) -> None:
    """List the studies in the store.

    \b
    Example:
      autotune study list
      autotune --db sqlite:///other.db study list --json
    """
    from autotune.tables import Column, TextTable

    store = ctx.store()
    records = store.list_studies()
    if as_json or fmt == "json":
        echo_json([_study_summary(r) for r in records])
        return
    if not records:
        note(f"no studies yet in {store.shown_url}: autotune study create FILE")
        return
    table = TextTable(
        [
            Column("name", "id"),
            Column("model", "id"),
            Column("status"),
            Column("trials", "number"),
            Column("failed", "number"),
            Column("measurements", "number"),
            Column("created", "number"),
        ]
    )
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
    emit_table(table, fmt)


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
@table_format_options
@pass_ctx
def show(ctx: Context, name: str, as_json: bool, fmt: str) -> None:
    """Show a study: its resolved spec, search space and trials.

    \b
    Example:
      autotune study show tiny-cpu
    """
    from autotune import api

    record, resolved, trials = api.get_study(ctx.store(), name)
    if as_json or fmt == "json":
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
                        "purpose": t.purpose,
                        "failure_reason": t.failure_reason,
                        "engine_start_s": t.engine_start_s,
                        "engine_seconds": t.engine_seconds,
                        "ray_node_id": t.ray_node_id,
                        "device_ids": t.device_ids,
                    }
                    for t in trials
                ],
            }
        )
        return
    from autotune.tables import Column, TextTable

    spec = resolved.spec
    if fmt != "tsv":  # TSV: only the tables, for tools
        for line in (
            f"{record.name}  {record.status}  ({record.source})",
            spec.description or None,
            f"model        {resolved.model}  "
            f"(tensor_parallel_size={resolved.tensor_parallel_size})",
            f"workloads    {', '.join(spec.workloads)}",
            f"concurrency  {', '.join(map(str, spec.concurrency))}",
            _buckets_line(resolved) or None,
            f"repeats      {spec.repeats}   sampler {spec.sampler}   engine {spec.engine.kind}",
            f"trust_remote_code  yes (by {resolved.trust_remote_code_by})"
            if resolved.trust_remote_code
            else None,
            f"space        {api.space_size(resolved)} engine configs\n",
        ):
            if line is not None:
                click.echo(line)
    methods = TextTable(
        [Column("method", "id"), Column("draft", "id"), Column("N", "number"), Column("params")],
        title="methods",
    )
    for m in resolved.methods:
        n = m.num_speculative_tokens
        methods.add_row(
            m.method,
            m.draft or "-",
            f"{n.min}..{n.max}",
            ", ".join(f"{k}={v}" for k, v in m.params.items()) or "-",
        )
    emit_table(methods, fmt)
    for w in resolved.warnings:
        note(f"warning: {w}")
    if trials:
        click.echo()
        t_table = TextTable(
            [
                Column("#", "number"),
                Column("config", "id"),
                Column("state"),
                Column("start s", "number"),
                Column("engine s", "number"),
                Column("node", "id"),
                Column("devices", "id"),
                Column("reason"),
            ],
            title="trials",
        )
        from autotune.spec.labels import Labels

        names = Labels(t.speculative_config for t in trials)
        for t in trials:
            t_table.add_row(
                str(t.number),
                names(t.speculative_config),
                t.state + (f" ({t.purpose})" if t.purpose else ""),  # drift, confirm
                f"{t.engine_start_s:.1f}" if t.engine_start_s is not None else "-",
                f"{t.engine_seconds:.1f}" if t.engine_seconds is not None else "-",
                (t.ray_node_id or "-")[:8],
                t.device_ids or "-",
                t.failure_reason or "",
            )
        emit_table(t_table, fmt)


@study.command("delete")
@click.argument("name")
@click.option(
    "--yes",
    is_flag=True,
    help="Do not ask for confirmation (required without a terminal: exit 2 otherwise).",
)
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
    confirm_destructive(f"delete study {name!r} and all its measurements?", yes)
    api.delete_study(store, name)
    note(f"deleted study {name!r} from {store.shown_url}")


def _run_options(f: Any) -> Any:
    f = click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="With --dry-run: print the plan as JSON.",
    )(f)
    f = click.option(
        "--check-hub",
        is_flag=True,
        help="With --dry-run: ask the Hugging Face hub (a network request) whether the weights "
        "not cached here can be downloaded [default: not asked; HF_HUB_OFFLINE=1 means offline].",
    )(f)
    f = click.option(
        "--dry-run",
        is_flag=True,
        help="Print the plan and start nothing: the engine configs the strategy starts first, "
        "GPUs or cores per engine, which weights are local and which would be downloaded, the "
        "hub, and the estimated engine-hours against the budget. Exit 0: it can run; 1: it "
        "cannot (the reasons are printed).",
    )(f)
    f = click.option(
        "--ray-address",
        metavar="ADDR",
        default=None,
        envvar="RAY_ADDRESS",
        help="Connect to this Ray cluster (HOST:PORT, ray://HOST:PORT or auto) instead of "
        "starting a local one; HOST:PORT must accept a TCP connection within 3 s.",
    )(f)
    f = click.option(
        "--max-engines",
        type=POSITIVE_INT,
        default=None,
        metavar="N",
        help="At most N engines at once [default: one per GPU group; 1 on CPU].",
    )(f)
    f = click.option(
        "--num-gpus",
        type=click.IntRange(min=1),
        default=None,
        metavar="N",
        help="Start the local Ray cluster with N logical GPUs (as on a GPU node; "
        "replay studies then run N / TP engines at once).",
    )(f)
    f = click.option(
        "--replay-time-scale",
        type=FiniteFloatRange(min=0.0, max=1000.0),
        default=None,
        metavar="F",
        help="Replay engines sleep for their recorded start and measurement times x F (0 to 1000).",
    )(f)
    f = click.option(
        "--max-configs",
        type=POSITIVE_INT,
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
        "--lease-ttl",
        type=float,
        default=None,
        metavar="SECONDS",
        callback=_lease_ttl,
        help="Another driver may take the study over after this many seconds without a "
        "heartbeat from this one [default: 60]; raise it on a flaky link to the database.",
    )(f)
    f = click.option(
        "--verbose",
        "-v",
        is_flag=True,
        help="Stream the engines' logs (vLLM, Ray) and library warnings to stderr.",
    )(f)
    f = click.option(
        "--quiet",
        "-q",
        is_flag=True,
        help="Print only the final summary (no progress, no per-config lines).",
    )(f)
    f = click.option(
        "--no-progress",
        is_flag=True,
        help="No progress bar: one line per finished engine config on stderr, as off a terminal.",
    )(f)
    return f


def _lease_ttl(_ctx: Any, _param: Any, value: float | None) -> float | None:
    from autotune.store.leases import check_lease_ttl

    if value is not None:
        check_lease_ttl(value)  # finite and > 0: SpecError, one line, exit 2
    return value


def _run(
    ctx: Context,
    name: str,
    ray_address: str | None,
    max_engines: int | None,
    max_configs: int | None,
    verbose: bool,
    quiet: bool,
    no_progress: bool,
    num_gpus: int | None,
    replay_time_scale: float | None,
    wait: bool = False,
    lease_ttl: float | None = None,
    dry_run: bool = False,
    check_hub: bool = False,
    as_json: bool = False,
) -> None:
    from autotune import api
    from autotune.cli.progress import make_reporter

    if dry_run:
        _dry_run(ctx, name, ray_address, num_gpus, max_engines, check_hub, as_json)
        return
    if check_hub or as_json:
        from autotune.errors import SpecError

        raise SpecError("--check-hub and --json go with --dry-run", source=f"study run {name}")

    engine_logging_as_user_set()
    if not verbose:
        quiet_libraries()
    from autotune.cluster.address import check_ray_address

    check_ray_address(ray_address)  # one line within seconds, not Ray's endless retries
    store = ctx.store()
    record = store.get_study(name)
    try:
        with stop_on_signals() as terminated:
            summary = api.run_study(
                store,
                name,
                ray_address=ray_address,
                max_engines=max_engines,
                max_configs=max_configs,
                reporter=make_reporter(quiet=quiet, no_progress=no_progress),
                log_to_driver=verbose,
                num_gpus=num_gpus,
                replay_time_scale=replay_time_scale,
                wait=wait,
                on_wait=lambda why: click.echo(f"autotune: waiting: {why}", err=True),
                lease_ttl_s=lease_ttl,
            )
    except KeyboardInterrupt as exc:
        # The tuner's cleanup has run: engines stopped, the trial in flight and the study
        # marked interrupted. Say how to go on, and exit as a signalled process does.
        db = f"--db {shlex.quote(store.shown_url)} " if ctx.db else ""  # password masked
        # Ray may re-raise the interrupt as a plain KeyboardInterrupt: the handler's flag says.
        sigterm = isinstance(exc, Terminated) or bool(terminated)
        hangup = signal.SIGHUP in terminated  # a closed terminal, a killed tmux
        why = "SIGHUP" if hangup else "SIGTERM" if sigterm else "Ctrl-C"
        with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
            click.echo(
                f"autotune: interrupted ({why}): study {name!r} and its running trials are marked "
                f"interrupted; go on with: autotune {db}study resume {shlex.quote(name)}",
                err=True,
            )
        raise click.exceptions.Exit(129 if hangup else 143 if sigterm else 130) from None
    if summary.baseline_failure is not None:
        from autotune.errors import AutotuneError

        raise AutotuneError(
            f"study {name!r} stopped: the baseline could not start ({summary.baseline_failure}); "
            "no other config is started without it (autotune study show "
            f"{shlex.quote(name)} lists the trials)"
        )
    # "done:" when the search finished (the study reads done), "stopped:" when a budget or
    # --max-configs cut it short (the study reads "stopped: ..."): the word its status has
    ended = "done" if store.get_study(name).status == "done" else "stopped"
    click.echo(
        f"{summary.trials_run} engine configs measured, {summary.trials_failed} failed, "
        f"{summary.measurements} measurements, {summary.engine_seconds:,.0f} engine-seconds"
        + (f"; {ended}: {summary.stop_reason}" if summary.stop_reason else "")
    )
    if summary.confirm_note:  # what confirmation across engine starts found and cost
        click.echo(summary.confirm_note)
    if summary.replay_note:  # a replay never serves a recorded repeat twice
        click.echo(summary.replay_note)
    if summary.unmeasured is not None:  # the wall budget stopped it: say what is left
        db = f"--db {shlex.quote(store.shown_url)} " if ctx.db else ""
        left = f"{summary.unmeasured} engine config{'s' if summary.unmeasured != 1 else ''}"
        click.echo(
            f"wall budget spent ({summary.wall_spent} elapsed): {left} the search "
            f"still plans left unmeasured; the recommendation is from what was measured; "
            f"autotune {db}study resume {shlex.quote(name)} continues (with a new wall budget)"
        )
    for label, reason in summary.failures:
        click.echo(f"  failed: {label}: {reason}")
    for line in api.degenerate_lines(store, name):  # the guard: loops decided these cells
        note(f"note: {line}")
    if summary.failures and not summary.trials_run:
        # Nothing measured: a run that only failed is not a success (exit 1), whatever it was.
        from autotune.errors import AutotuneError

        reasons = {reason for _, reason in summary.failures}
        same = f": {next(iter(reasons))}" if len(reasons) == 1 else " (reasons above)"
        raise AutotuneError(f"every engine config of study {name!r} failed{same}")
    if not quiet:
        # the same store as this run's, or the next command reads another one (its password
        # masked: the user has it, the terminal's scrollback need not)
        shown = store.shown_url if ctx.db else None
        for line in api.next_steps(record, shown, shown is not None and shown != ctx.db):
            note(line)


def _dry_run(
    ctx: Context,
    name: str,
    ray_address: str | None,
    num_gpus: int | None,
    max_engines: int | None,
    check_hub: bool,
    as_json: bool,
) -> None:
    """`study run --dry-run`: the plan on stdout; exit 1 when it shows the run cannot work."""
    from autotune import api

    plan = api.preflight_study(
        ctx.store(),
        name,
        ray_address=ray_address,
        num_gpus=num_gpus,
        max_engines=max_engines,
        check_hub=check_hub,
    )
    if as_json:
        echo_json(plan.to_json())
    else:
        for line in plan.lines():
            click.echo(line)
    if not plan.ok:
        raise click.exceptions.Exit(1)


class Terminated(KeyboardInterrupt):
    """SIGTERM during `study run`: unwinds like Ctrl-C, so the same cleanup runs."""


@contextlib.contextmanager
def stop_on_signals() -> Iterator[list[int]]:
    """Make SIGTERM, SIGHUP and SIGINT stop the run while the block runs, whatever the process
    inherited: SIGTERM (what timeout, Slurm and Kubernetes send) and SIGHUP (a closed terminal,
    a killed tmux) raise :class:`Terminated`
    and is noted in the list it yields; SIGINT (Ctrl-C) raises KeyboardInterrupt. Both unwind
    through the tuner's cleanup. The Ray pool keeps the SIGTERM handler over Ray's own
    (autotune.cluster.ray_pool), which would print a C++ stack dump.

    SIGINT is set explicitly because Python keeps an inherited ``SIG_IGN``: a shell without job
    control (a CI script, ``cmd &`` in ``sh -c``) starts background commands with SIGINT
    ignored, and a driver started that way ignored Ctrl-C to its process group and ran its
    study to the end (exit 0). ``study run`` is stopped on request however it was started,
    as it already was for SIGTERM."""
    import threading

    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def raise_terminated(signum: int, frame: Any) -> None:
        # Once is enough: a second SIGTERM (or SIGHUP) during the cleanup must not cut it short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        received.append(signum)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    # SIGHUP (the terminal closed, tmux killed) stops the run as SIGTERM does: its default
    # killed the driver at once, leaving the study "running" until the lease lapsed.
    previous_hup = signal.signal(signal.SIGHUP, raise_terminated)
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGHUP, previous_hup)


def quiet_libraries() -> None:
    """Keep library chatter (Ray's start-up and token notices, transformers/Triton warnings)
    out of the output; --verbose lets it through."""
    import logging
    import os
    import warnings

    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for name in ("transformers", "vllm", "torch", "triton", "optuna", "urllib3"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # ray.init() resets the "ray" logger's level and handlers, so a level set here would not
    # hold; a filter on the loggers that print its start-up and token-authentication notices
    # does (a logger's own filters run before any handler).
    for name in (
        "ray",
        "ray._private.worker",
        "ray._private.services",
        "ray._private.authentication.authentication_token_setup",
    ):
        logger = logging.getLogger(name)
        if _errors_only not in logger.filters:
            logger.addFilter(_errors_only)


def _errors_only(record: Any) -> bool:
    """A logging filter: let errors through, drop notices."""
    import logging

    return bool(record.levelno >= logging.ERROR)


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
    quiet: bool,
    no_progress: bool,
    num_gpus: int | None,
    replay_time_scale: float | None,
    wait: bool,
    lease_ttl: float | None,
    dry_run: bool,
    check_hub: bool,
    as_json: bool,
) -> None:
    """Measure a study's engine configs until its space or budget is exhausted.

    Each engine config starts one vLLM engine in a Ray actor, which measures every
    workload × concurrency × repeat warm before it is torn down. Measurements are stored as
    they arrive; an engine that fails becomes a failed trial with its reason.

    Progress goes to stderr (a bar on a terminal, one line per finished engine config
    otherwise); the summary goes to stdout; Ray's and the libraries' notices only with
    --verbose.

    --dry-run prints the plan and starts nothing. A real run refuses up front (one line,
    exit 2, nothing written) what the dry run shows cannot work: a GPU study on a machine
    without GPUs and without --ray-address, weights neither local nor downloadable
    (HF_HUB_OFFLINE). A baseline that cannot start ends the run.

    \b
    Example:
      autotune study run tiny-cpu --dry-run
      autotune study run tiny-cpu
      autotune study run kimi-k2.5 --ray-address auto
    """
    _run(
        ctx,
        name,
        ray_address,
        max_engines,
        max_configs,
        verbose,
        quiet,
        no_progress,
        num_gpus=num_gpus,
        replay_time_scale=replay_time_scale,
        wait=wait,
        lease_ttl=lease_ttl,
        dry_run=dry_run,
        check_hub=check_hub,
        as_json=as_json,
    )


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
    quiet: bool,
    no_progress: bool,
    num_gpus: int | None,
    replay_time_scale: float | None,
    wait: bool,
    lease_ttl: float | None,
    dry_run: bool,
    check_hub: bool,
    as_json: bool,
) -> None:
    """Continue an interrupted study without re-measuring completed configs.

    Trials a killed driver left running are marked interrupted and reopened: only the cells
    they are missing are measured, so the study ends as an uninterrupted run would.

    \b
    Example:
      autotune study resume tiny-cpu
      autotune study resume tiny-cpu --dry-run --json
    """
    _run(
        ctx,
        name,
        ray_address,
        max_engines,
        max_configs,
        verbose,
        quiet,
        no_progress,
        num_gpus=num_gpus,
        replay_time_scale=replay_time_scale,
        wait=wait,
        lease_ttl=lease_ttl,
        dry_run=dry_run,
        check_hub=check_hub,
        as_json=as_json,
    )


def _buckets_line(resolved: Any) -> str:
    """`study show`'s line on the context-length buckets ("" without them)."""
    if not resolved.context_buckets:
        return ""
    shown = "; ".join(
        f"{name} {b.prompt_tokens_mean:,.0f} ({b.prompt_tokens_min:,}-{b.prompt_tokens_max:,})"
        for name, b in resolved.context_buckets.items()
    )
    return f"context      prompt tokens per bucket, mean (min-max): {shown}"
