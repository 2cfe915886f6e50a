"""``autotune models``: the model catalog (aliases, HF ids, methods, drafts, N bounds)."""

from __future__ import annotations

import click

from autotune.cli._common import console, echo_json, json_option


@click.command("models")
@json_option
def models(as_json: bool) -> None:
    """List the catalog's models with their methods, published drafts and N bounds.

    \b
    Example:
      autotune models
      autotune models --json
    """
    from autotune.spec.catalog import load_catalog
    from autotune.spec.methods import RuleContext, max_n

    catalog = load_catalog()
    if as_json:
        echo_json({alias: e.model_dump(mode="json") for alias, e in catalog.models.items()})
        return
    from rich.table import Table

    table = Table("alias", "model", "TP", "method", "draft", "N", show_lines=True)
    for alias, entry in catalog.models.items():
        tp = ", ".join(f"{k}={v}" for k, v in entry.tensor_parallel_size.items())
        if not entry.methods:
            table.add_row(alias, entry.model, tp, "-", "-", "-")
        for i, (method, m) in enumerate(entry.methods.items()):
            ctx = RuleContext(
                mtp_layers=entry.mtp_layers,
                block_size=m.block_size,
                mla_attention=entry.mla_attention,
            )
            hi = min(m.n_max or max_n(method, ctx), max_n(method, ctx))
            table.add_row(
                alias if i == 0 else "",
                entry.model if i == 0 else "",
                tp if i == 0 else "",
                method,
                m.draft or "-",
                # A DSpark draft's N is its trained block, read from its config.json.
                "= block" if method == "dspark" and m.block_size is None else f"1..{hi}",
            )
    console().print(table)
