"""The options ``autotune study run`` and ``study resume`` share, declared once.

:func:`run_options` puts them on a command; :mod:`autotune.cli.study` gives both commands the
same stack and the same body.
"""

from __future__ import annotations

from typing import Any

import click

from autotune.cli._common import POSITIVE_INT, FiniteFloatRange


def run_options(f: Any) -> Any:
    """The options of `study run` and `study resume` (one stack: the two commands take the
    same), on the command function ``f``."""
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
