"""The terminal report: a rich table of the summary frame, one block of rows per cell."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd


def _num(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, fmt)


def summary_table(summary: pd.DataFrame) -> Any:
    """A rich Table: per (workload, concurrency), the baseline then each method by N; the
    recommended config is marked ★ and a noisy spread is flagged."""
    from rich import box
    from rich.table import Table

    spread = summary.attrs.get("max_spread_pct")
    table = Table(
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
        show_edge=False,
        pad_edge=False,
        caption=(
            "tok/s: median over repeats; MAD: median absolute deviation; spread: (max − min) / "
            "median; AL: mean acceptance length; ★ recommended (median − 1.4826·MAD, ties → "
            f"smaller N); noisy: spread > {spread:g}%"
            if spread is not None
            else None
        ),
        caption_justify="left",
    )
    table.add_column("workload", no_wrap=True)
    table.add_column("conc", justify="right", no_wrap=True, min_width=4)
    table.add_column("config", no_wrap=True)
    for name in ("tok/s", "MAD", "spread %", "reps", "speedup", "AL"):
        table.add_column(name, justify="right", no_wrap=True)

    ordered = summary.assign(
        _base=summary["speculative_config"] != "null",
    ).sort_values(["workload", "concurrency", "_base", "method", "num_speculative_tokens"])
    previous = None
    for r in ordered.to_dict("records"):
        cell = (r["workload"], r["concurrency"])
        if previous is not None and cell != previous:
            table.add_section()
        spread_text = _num(r["spread_pct"], ".1f")
        if r["noisy"]:
            spread_text = f"[yellow]{spread_text} noisy[/yellow]"
        style = "bold" if r["recommended"] else None
        table.add_row(
            str(r["workload"]) if cell != previous else "",
            str(r["concurrency"]) if cell != previous else "",
            str(r["config"]) + (" ★" if r["recommended"] else ""),
            _num(r["median_tok_s"], ",.1f"),
            _num(r["mad_tok_s"], ",.1f"),
            spread_text,
            str(r["repeats"]),
            _num(r["speedup"], ".2f") + ("x" if not pd.isna(r["speedup"]) else ""),
            _num(r["mean_acceptance_length"], ".2f"),
            style=style,
        )
        previous = cell
    return table


def provenance(df: pd.DataFrame) -> str:
    """One line: where the measurements come from (vLLM versions, devices)."""
    if df.empty:
        return ""
    versions = ", ".join(sorted(df["vllm_version"].astype(str).unique()))
    devices = ", ".join(
        sorted(f"{n} ({a})" for n, a in df[["device_name", "device_arch"]].drop_duplicates().values)
    )
    return f"vLLM {versions} on {devices}; {len(df)} measurements"
