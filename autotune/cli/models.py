"""``autotune models``: the model catalog (aliases, HF ids, methods, drafts, N bounds)."""

from __future__ import annotations

import click

from autotune.cli._common import echo_json, emit_table, table_format_options


@click.command("models")
@table_format_options
def models(as_json: bool, fmt: str) -> None:
    """List the catalog's models with their methods, published drafts and N bounds.

    \b
    Example:
      autotune models
      autotune models --json
    """
    from autotune import api

    if as_json or fmt == "json":
        echo_json(api.catalog_json())
        return
    from autotune.tables import Column, TextTable

    table = TextTable(
        [
            Column("alias", "id"),
            Column("model", "id"),
            Column("TP", "id"),
            Column("method", "id"),
            Column("draft", "id"),
            Column("N", "number"),
        ],
        group=3,
    )
    for m in api.catalog_methods():
        table.add_row(
            m.alias,
            m.model,
            ", ".join(f"{k}={v}" for k, v in m.tensor_parallel_size.items()),
            m.method or "-",
            m.draft or "-",
            f"1..{m.n_max}" if m.n_max else ("= block" if m.method == "dspark" else "-"),
        )
    emit_table(table, fmt)
