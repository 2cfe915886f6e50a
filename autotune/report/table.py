"""The study report's terminal table (a :class:`autotune.tables.TextTable`) and provenance line."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from autotune.tables import Column, TextTable

if TYPE_CHECKING:
    from autotune.recommend.answer_value import Answer


def _num(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, fmt)


def summary_table(summary: pd.DataFrame) -> TextTable:
    """Per (workload, concurrency), the baseline then each method by N; the recommended config
    is marked ★ (and bold on a terminal), a noisy spread is flagged."""
    spread = summary.attrs.get("max_spread_pct")
    table = TextTable(
        [
            Column("workload", "id"),
            Column("conc", "number"),
            Column("config", "id"),
            Column("tok/s", "number"),
            Column("MAD", "number"),
            Column("spread %", "number"),
            Column("reps", "number"),
            Column("speedup", "number"),
            Column("AL", "number"),
        ],
        caption=(
            "tok/s: median over repeats; MAD: median absolute deviation; spread: (max − min) / "
            "median; AL: mean acceptance length; ★ recommended (highest median; within 1% a "
            f"tie, the smaller N: docs/answers.md); noisy: spread > {spread:g}%"
            if spread is not None
            else None
        ),
        group=2,
    )
    ordered = summary.assign(
        _base=summary["speculative_config"] != "null",
    ).sort_values(["workload", "concurrency", "_base", "method", "num_speculative_tokens"])
    for r in ordered.to_dict("records"):
        spread_text = _num(r["spread_pct"], ".1f") + (" noisy" if r["noisy"] else "")
        table.add_row(
            r["workload"],
            r["concurrency"],
            str(r["config"]) + (" ★" if r["recommended"] else ""),
            _num(r["median_tok_s"], ",.1f"),
            _num(r["mad_tok_s"], ",.1f"),
            spread_text,
            r["repeats"],
            _num(r["speedup"], ".2f") + ("x" if not pd.isna(r["speedup"]) else ""),
            _num(r["mean_acceptance_length"], ".2f"),
            style="bold" if r["recommended"] else None,
        )
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


def front_table(trade_off: pd.DataFrame, slo_text: dict[str, str] | None = None) -> TextTable:
    """Per level, the configs on the throughput-vs-p99-TPOT Pareto front (no other config has
    both more tok/s and a lower p99 TPOT), fastest first, and the recommendation under the
    study's SLO (★) where it is off the front; ``SLO`` says whether each meets the study's SLO
    (``slo_text``: workload -> its limits, for the caption)."""
    has_goodput = "goodput_req_s" in trade_off and trade_off["goodput_req_s"].notna().any()
    columns = [
        Column("workload", "id"),
        Column("conc", "number"),
        Column("config", "id"),
        Column("tok/s", "number"),
        Column("p99 TPOT ms", "number"),
        Column("p99 TTFT ms", "number"),
        Column("p99 ITL ms", "number"),
    ]
    if has_goodput:
        columns.append(Column("goodput req/s", "number"))
    columns.append(Column("SLO", "id"))
    limits = "; ".join(f"{w}: {t}" for w, t in (slo_text or {}).items() if t)
    table = TextTable(
        columns,
        caption=(
            "Pareto front per level: throughput (median over repeats) vs p99 TPOT (median of "
            "the repeats' p99); ★ recommended"
            + (f" under the SLO ({limits})" if limits else "")
            + ("; goodput: requests/s meeting the SLO (vLLM's definition)" if has_goodput else "")
        ),
        group=2,
    )
    shown = trade_off[trade_off["on_front"] | trade_off["recommended"]]
    shown = shown.sort_values(["workload", "concurrency", "median_tok_s"], ascending=[1, 1, 0])
    for r in shown.to_dict("records"):
        cells: list[Any] = [
            r["workload"],
            r["concurrency"],
            str(r["config"])
            + (" ★" if r["recommended"] else "")
            + ("" if r["on_front"] else " (off front)"),
            _num(r["median_tok_s"], ",.1f"),
            _num(r["p99_tpot_ms"], ".1f"),
            _num(r["p99_ttft_ms"], ".1f"),
            _num(r["p99_itl_ms"], ".1f"),
        ]
        if has_goodput:
            cells.append(_num(r["goodput_req_s"], ".2f"))
        judged = bool((slo_text or {}).get(r["workload"]))
        cells.append(("meets" if r["meets_slo"] else "misses") if judged else "-")
        table.add_row(*cells, style="bold" if r["recommended"] else None)
    return table


def answer_table(answers: Sequence[Answer]) -> TextTable:
    """The study's answer (:mod:`autotune.recommend.answer_value`) per workload and level, and
    for all levels (``all``): winner, margin over the runner-up, verdict, confidence."""
    table = TextTable(
        [
            Column("workload", "id"),
            Column("conc", "id"),
            Column("answer", "id"),
            Column("runner-up", "id"),
            Column("margin %", "number"),
            Column("verdict", "id"),
            Column("confidence", "id"),
        ],
        caption="margin: the answer's median over the runner-up's; verdict and confidence: "
        "docs/answers.md; all: one config for every level (recommend without --concurrency)",
    )
    for a in answers:
        for la in a.levels:
            table.add_row(
                a.workload,
                str(la.concurrency),
                la.winner,
                la.runner_up or "-",
                "-" if la.margin_pct is None else f"{la.margin_pct:+.1f}",
                la.verdict,
                la.confidence,
            )
        if (d := a.default) is not None and len(a.levels) > 1:
            table.add_row(
                a.workload,
                "all",
                d.winner,
                d.runner_up or "-",
                "-" if d.margin_pct is None else f"{d.margin_pct:+.1f}",
                d.verdict,
                d.confidence,
            )
    return table


def answer_lines(answers: Sequence[Answer]) -> list[str]:
    """Where each all-levels answer loses, then every caveat (the reasons behind ``low``)."""
    lines = []
    for a in answers:
        if a.default is not None:
            for loss in a.default.loses_at:
                lines.append(
                    f"{a.workload}: at c={loss.concurrency} the all-levels answer "
                    f"{a.default.winner} loses to {loss.winner} by {loss.loss_pct:.1f}%"
                )
    for a in answers:
        lines += [f"caveat: {c}" for c in a.caveats]
    return list(dict.fromkeys(lines))
