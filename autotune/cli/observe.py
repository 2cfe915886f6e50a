"""``autotune observe``: a running vLLM server's /metrics beside the study (read-only).

``observe`` is a client of :mod:`autotune.api` (it asks the facade for the study's
recommendation), so this command calls :func:`autotune.observe.run.observe` directly; the facade
never imports ``autotune.observe``.
"""

from __future__ import annotations

import click

from autotune.cli._common import (
    NON_NEGATIVE_FLOAT,
    POSITIVE_FLOAT,
    Context,
    echo_json,
    json_option,
    pass_ctx,
)


@click.command("observe")
@click.option(
    "--metrics-url",
    "url",
    required=True,
    metavar="URL",
    help="The server's Prometheus endpoint, e.g. http://127.0.0.1:8000/metrics.",
)
@click.option("--model", required=True, metavar="ALIAS", help="Catalog alias or HF id.")
@click.option(
    "--workload", required=True, metavar="NAME", help="The study's workload to compare with."
)
@click.option(
    "--config",
    "config_arg",
    default=None,
    metavar="CONFIG",
    help="The server's --speculative-config (inline JSON, a JSON/YAML file or '-') "
    "[default: the study's recommendation].",
)
@click.option(
    "--duration",
    "duration_s",
    type=NON_NEGATIVE_FLOAT,
    default=60.0,
    show_default=True,
    metavar="S",
    help="Length of the window: counters are the deltas between its first and last scrape.",
)
@click.option(
    "--interval",
    "interval_s",
    type=NON_NEGATIVE_FLOAT,
    default=1.0,
    show_default=True,
    metavar="S",
    help="Scrape (and sample vllm:num_requests_running) every S seconds.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=POSITIVE_FLOAT,
    default=5.0,
    show_default=True,
    metavar="S",
    help="Give up on a scrape that takes longer.",
)
@click.option(
    "--study", "study_name", default=None, metavar="NAME", help="Compare with this study."
)
@json_option
@pass_ctx
def observe(
    ctx: Context,
    url: str,
    model: str,
    workload: str,
    config_arg: str | None,
    duration_s: float,
    interval_s: float,
    timeout_s: float,
    study_name: str | None,
    as_json: bool,
) -> None:
    """Read a live vLLM server's /metrics and say whether the tuned config still fits.

    Scrapes vLLM's own counters (vllm:spec_decode_num_drafts, _num_draft_tokens,
    _num_accepted_tokens, _num_accepted_tokens_per_pos) at the start and end of the window and
    the vllm:num_requests_running gauge every --interval, then prints the live acceptance
    length and per-position acceptance beside the study's for the same model, config and
    workload, the concurrency distribution seen, and, from the study's measurements and its
    acceptance x cost model with the live acceptance substituted, the N (and Dynamic SD
    table) predicted best for that traffic with the predicted gain and its range. Read-only:
    it only GETs /metrics and never writes the store.

    Exit 0 after printing. Exit 2 (one line) for bad flags, an unreachable or non-vLLM URL, a
    server without speculative decoding, missing counters, or a server drafting another N
    than --config. Exit 1 when the store never measured the model/workload or the config, or
    when the window saw no speculative step (no traffic).

    \b
    Example:
      autotune observe --metrics-url http://127.0.0.1:8000/metrics --model tiny --workload code
      autotune observe --metrics-url http://10.0.0.5:8000/metrics --model kimi --workload code \\
          --config '{"method": "eagle3", "model": "...", "num_speculative_tokens": 4}' \\
          --duration 300 --interval 2 --json
    """
    from autotune.observe.run import observe as observe_server

    config = None
    if config_arg is not None:
        from autotune.recommend.normalize import parse_config_text, read_config_arg

        config = parse_config_text(*read_config_arg(config_arg)) or {}
    result = observe_server(
        ctx.store(),
        url,
        model=model,
        workload=workload,
        config=config,
        study=study_name,
        duration_s=duration_s,
        interval_s=interval_s,
        timeout_s=timeout_s,
    )
    if as_json:
        echo_json(result.to_json())
        return
    from autotune.observe.run import render

    click.echo(render(result))
