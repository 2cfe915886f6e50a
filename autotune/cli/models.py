"""``autotune models``: the model catalog (aliases, HF ids, methods, drafts, N bounds)."""

from __future__ import annotations

import click

from autotune.cli._common import echo_json, emit_table, table_format_options


@click.command("models")
@table_format_options
def models(as_json: bool, fmt: str) -> None:
    """List the catalog's models with their methods, published drafts and N bounds.

    Then, where the catalog cites a published acceptance-length curve for a model and method,
    one line per curve (AL@N N:AL ..., what was measured, the source): priors that order the
    search's first batch (the N a method starts at), never measurements.

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
            Column("TP"),  # per-device sizes: text, cut in a pipe (tsv, json: whole)
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
            f"1..{m.n_max}" if m.n_max else ("= block" if m.n_is_block else "-"),
        )
    emit_table(table, fmt)
    if fmt == "tsv":
        return
    from autotune.spec.catalog import load_catalog

    built = [
        f"  {alias}: {entry.provenance}" + (f"; licence {entry.licence}" if entry.licence else "")
        for alias, entry in load_catalog().models.items()
        if entry.provenance
    ]
    if built:
        click.echo("\nbuilt locally on first use (provenance, licence):")
        click.echo("\n".join(built))
    lines = [
        f"  {alias} {method} ({', '.join(p for p in (c.workload, c.condition) if p)}): "
        f"{c.compact()}\n    {c.measured}; {c.citation()}"
        for alias, entry in load_catalog().models.items()
        for method, m in entry.methods.items()
        for c in m.acceptance_curves
    ]
    if lines:
        click.echo("\npublished acceptance length by N (priors for the first batch, not measured):")
        click.echo("\n".join(lines))
