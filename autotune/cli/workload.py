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

    \b
    Example:
      autotune workload show code
      autotune workload show chat --tokenizer Qwen/Qwen3-Next-80B-A3B-Instruct
    """
    from autotune import api

    view = api.show_workload(name, tokenizer)
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
                "samples": [p.text for p in prepared.prompts[:count]],
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
    for i, p in enumerate(prepared.prompts[:count]):
        text = p.text if len(p.text) <= 600 else p.text[:600] + " …"
        click.echo(f"\n--- prompt {i} (max_tokens {p.max_tokens}) ---")
        click.echo(text)


def _fmt(v: Any) -> str:
    return f"{v:,.1f}" if isinstance(v, float) else str(v)
