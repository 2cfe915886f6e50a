"""``autotune workload ...``: list workloads and show their prompts with token statistics."""

from __future__ import annotations

from typing import Any

import click

from autotune.cli._common import echo_json, emit_table, json_option, table_format_options


@click.group()
def workload() -> None:
    """List workloads and look at their prompts.

    Workloads are found in $AUTOTUNE_WORKLOADS, ./workloads and the repository's workloads/.

    \b
    Example:
      autotune workload list
      autotune workload show code
    """


@workload.command("list")
@table_format_options
def list_(as_json: bool, fmt: str) -> None:
    """List the workloads autotune can find and where their prompts come from.

    The data column says whether a workload holds a real dataset (with the package that ships
    it and the data's licence), generated prompts, or a file's.

    \b
    Example:
      autotune workload list --json
    """
    from autotune import api

    rows = api.list_workloads()
    if as_json or fmt == "json":
        echo_json(rows)
        return
    from autotune.tables import Column, TextTable

    table = TextTable(
        [
            Column("name", "id"),
            Column("kind", "id"),
            Column("data"),
            Column("prompts", "number"),
            Column("max_tokens", "number"),
            Column("description"),
        ]
    )
    for r in rows:
        table.add_row(
            r["name"], r["kind"], r["data"], r["num_prompts"], r["max_tokens"], r["description"]
        )
    emit_table(table, fmt)


@workload.command("show")
@click.argument("name")
@click.option(
    "--count",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Sample prompts to print.",
)
@click.option(
    "--tokenizer",
    default=None,
    metavar="MODEL",
    help="Count tokens with this model's tokenizer (HF id, path or tiny:NAME) "
    "[default: the tokenizer of autotune's tiny CPU model].",
)
@json_option
def show(name: str, count: int, tokenizer: str | None, as_json: bool) -> None:
    """Show a workload: its settings, sample prompts and token statistics.

    Prints the prompt- and output-length distributions as histograms (the bins are in
    ``--json``), the requests' turn counts (a chat log's later turns carry their history), the
    temperature and the digest that keys every measurement of these prompts.

    \b
    Example:
      autotune workload show code
      autotune workload show chat --tokenizer /models/Qwen3-Next-80B-A3B-Instruct
      HF_HUB_OFFLINE=1 autotune workload show chat --tokenizer Qwen/Qwen3-Next-80B-A3B-Instruct
    """
    from dataclasses import asdict

    from autotune import api
    from autotune.datasets.stats import histogram, turn_counts

    view = api.show_workload(name, tokenizer)
    outputs = [p.max_tokens for p in view.prepared.prompts]
    turns = turn_counts(list(view.prepared.prompts))
    spec, path, prepared, tok_name, stats = (
        view.spec,
        view.path,
        view.prepared,
        view.tokenizer_name,
        view.stats,
    )
    if as_json:
        echo_json(
            {
                "name": spec.name,
                "digest": prepared.digest,
                "spec": spec.model_dump(mode="json"),
                "data": view.origin.label(),
                "data_note": view.origin.note,
                "tokenizer": tok_name,
                "stats": stats,
                "temperature": spec.temperature,
                "turns": {str(k): v for k, v in turns.items()},
                "prompt_length_unit": view.length_unit,
                "prompt_lengths": view.prompt_lengths,
                "output_lengths": outputs,
                "prompt_length_histogram": [asdict(b) for b in histogram(view.prompt_lengths)],
                "output_length_histogram": [asdict(b) for b in histogram(outputs)],
                "samples": [p.text for p in prepared.prompts[:count]],
                "sample_messages": [p.chat() for p in prepared.prompts[:count]],
            }
        )
        return
    click.echo(f"{spec.name}  {spec.source.kind}  ({path})")
    if spec.description:
        click.echo(spec.description)
    origin = view.origin
    click.echo(f"data    {origin.label()}" + (f": {origin.note}" if origin.note else ""))
    click.echo(
        f"prompts {len(prepared.prompts)}  max_tokens {spec.max_tokens}  "
        f"temperature {spec.temperature}  seed {spec.seed}  chat_template {spec.chat_template}"
    )
    click.echo(f"digest  {prepared.digest}")
    click.echo(f"tokens  ({tok_name})  " + "  ".join(f"{k} {_fmt(v)}" for k, v in stats.items()))
    click.echo("turns   " + "  ".join(f"turn {k}: {v}" for k, v in turns.items()))
    _print_histogram(f"prompt length ({view.length_unit})", view.prompt_lengths)
    _print_histogram("output length (max_tokens per request)", outputs)
    for i, p in enumerate(prepared.prompts[:count]):
        text = p.text if len(p.text) <= 600 else p.text[:600] + " …"
        turn = f", turn {p.turn}" if p.messages else ""
        click.echo(f"\n--- prompt {i} (max_tokens {p.max_tokens}{turn}) ---")
        click.echo(text)


def _print_histogram(title: str, values: list[int], width: int = 40) -> None:
    from autotune.datasets.stats import histogram

    bins = histogram(values)
    if not bins:
        return
    click.echo(f"\n{title}")
    peak = max(b.count for b in bins)
    span = max(len(f"{b.lo}-{b.hi}") for b in bins)
    for b in bins:
        bar = "█" * max(1 if b.count else 0, round(width * b.count / peak))
        click.echo(f"  {f'{b.lo}-{b.hi}':>{span}}  {bar} {b.count}")


def _fmt(v: Any) -> str:
    return f"{v:,.1f}" if isinstance(v, float) else str(v)
