"""The report's latency view: per level, throughput against p99 TPOT with the Pareto front.

Serving under a latency SLO trades throughput for tail latency: a deeper draft raises tokens/s
but its multi-token chunks and longer verification steps raise TPOT and ITL. For each
(workload, concurrency) level of a study's newest prompt sets, :func:`trade_off_frame` lists
every rankable config with its median throughput, its p99 latencies (median over repeats, as
:mod:`autotune.recommend.slo` judges them), its median goodput
(:func:`autotune.evidence.objectives.median_goodput`) where the study has an SLO and the
measurements carry per-request latencies, whether it meets the study's SLO, whether it is on
the throughput-vs-p99-TPOT Pareto front, and whether it is the recommendation under the SLO. The
HTML report plots it and ``autotune report`` prints the front.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from autotune.evidence.objectives import METRICS
from autotune.recommend.slo import NoConfigMeetsSLO, choose_goodput, choose_slo, trade_off_rows
from autotune.report.frames import GOODPUT
from autotune.spec.methods import config_id
from autotune.spec.slo import SLO

if TYPE_CHECKING:
    pass

TRADE_OFF_COLUMNS = [
    "workload",
    "concurrency",
    "config",
    "speculative_config",
    "median_tok_s",
    *METRICS,
    GOODPUT,
    "meets_slo",
    "on_front",
    "recommended",
]


def slo_of(df: pd.DataFrame, workload: str) -> SLO:
    """The SLO the study set for ``workload`` (empty when it set none)."""
    return SLO(**(df.attrs.get("slo") or {}).get(workload, {}))


def trade_off_frame(df: pd.DataFrame) -> pd.DataFrame:
    """One row per rankable config per level (newest prompt sets only): see the module
    docstring. Empty when no measurement recorded p99 TPOT (a replayed landscape)."""
    from autotune.report.frames import acceptance_columns, latest_prompt_sets, records_of

    empty = pd.DataFrame(columns=TRADE_OFF_COLUMNS)
    if df.empty or "p99_tpot_ms" not in df or df["p99_tpot_ms"].isna().all():
        return empty
    data = latest_prompt_sets(df)
    acc_cols = acceptance_columns(data)
    goodput = GOODPUT in data and data[GOODPUT].notna().any()
    rows: list[dict[str, Any]] = []
    for (workload, concurrency), cell in data.groupby(["workload", "concurrency"], sort=True):
        records = records_of(cell, acc_cols)
        slo = slo_of(df, str(workload))
        choice = choose_slo(records, str(workload), int(concurrency), slo)
        if choice is None:
            continue
        level = trade_off_rows(choice)
        if goodput and df.attrs.get("objective") == "goodput" and slo:
            # Under objective: goodput the recommendation is the best median goodput.
            try:
                best = choose_goodput(records, str(workload), int(concurrency), slo)
            except NoConfigMeetsSLO:
                best = None
            key = None if best is None else config_id(best.best.speculative_config)
            for r in level:
                r["recommended"] = key is not None and config_id(r["speculative_config"]) == key
        medians = cell.groupby("speculative_config")[GOODPUT].median() if goodput else pd.Series()
        for r in level:
            r["workload"] = str(workload)
            r["speculative_config"] = config_id(r["speculative_config"])
            r[GOODPUT] = float(medians.get(r["speculative_config"], math.nan))
            rows.append(r)
    return pd.DataFrame(rows, columns=TRADE_OFF_COLUMNS) if rows else empty
