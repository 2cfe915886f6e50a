"""pandas frames of a study: one row per measurement, and one row per config × cell summarised.

The summary uses the recommendation's own statistics (``autotune.evidence.scores.score``) and
ranking (``autotune.recommend.choose.rank``), so a report and ``autotune recommend`` never
disagree about a number or a winner.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pandas as pd

from autotune.evidence.decide import PRACTICAL_TIE_PCT, rank
from autotune.evidence.objectives import measurement_goodput
from autotune.evidence.scores import (
    DEFAULT_PRECISION_PCT,
    ConfigScore,
    labels_of,
    score,
)
from autotune.recommend.choose import choose, screen
from autotune.spec.labels import PLAIN, Labels
from autotune.spec.methods import config_id
from autotune.spec.slo import SLO
from autotune.store.records import MeasurementRecord

if TYPE_CHECKING:  # the store (SQLAlchemy) loads only when a study is read from it
    from autotune.spec.study import StudySpec
    from autotune.store import Store

DEFAULT_MAX_SPREAD_PCT = 10.0
"""Used when a frame does not say which study it came from (e.g. read back from CSV); the same
default as ``measurement.max_spread_pct`` in a study file."""

CELL = ["workload", "workload_digest", "concurrency"]
"""A cell: measurements of different prompt sets (digests) never share a baseline."""

ACCEPTANCE_PREFIX = "acceptance_pos_"
"""Columns ``acceptance_pos_1`` … hold a_i = accepted at position i / num_drafts."""

_LEADING = [
    "study",
    "model",
    "trial_id",
    "config",
    "method",
    "draft",
    "num_speculative_tokens",
    "speculative_config",
    "workload",
    "workload_digest",
    "concurrency",
    "repeat",
    "output_throughput_tok_s",
    "baseline_median_tok_s",
    "speedup",
    "mean_acceptance_length",
]

_TRAILING = [
    "request_throughput_req_s",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "num_requests",
    "num_prompt_tokens",
    "num_output_tokens",
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "max_inflight",
    "loop_share",
    "distinct_4gram_ratio",
    "loop_at_max_tokens_share",
    "measure_s",
    "engine_start_s",
    "seed",
    "vllm_version",
    "device_name",
    "device_arch",
    "ray_node_id",
    "device_ids",
    "engine_args",
    "tensor_parallel_size",
    "env",
    "created_at",
    "id",
]


GOODPUT = "goodput_req_s"
"""The measurements frame's goodput column (requests/s that met the workload's SLO)."""


def frame_labels(df: pd.DataFrame) -> Labels:
    """The names of the configs of a measurements frame (autotune.spec.labels): the same as
    `recommend` and `study run` give them."""
    if df.empty or "speculative_config" not in df:
        return PLAIN
    return Labels(json.loads(c) for c in df["speculative_config"].unique())


def acceptance_columns(df: pd.DataFrame) -> list[str]:
    """The ``acceptance_pos_i`` columns of ``df`` in position order."""
    cols = [c for c in df.columns if str(c).startswith(ACCEPTANCE_PREFIX)]
    return sorted(cols, key=lambda c: int(str(c)[len(ACCEPTANCE_PREFIX) :]))


def measurements_frame(store: Store, study: str) -> pd.DataFrame:
    """One row per measurement of the study's completed trials.

    Config columns (method, draft, N, ``speculative_config`` as JSON text), ``speedup`` against
    the baseline's median throughput in the same (workload, prompt set, concurrency) — NaN where
    the baseline was not measured — and a_i expanded into ``acceptance_pos_1`` … (NaN past N).
    ``df.attrs`` carries the study name, model, ``max_spread_pct`` and ``precision_pct``.
    """
    from autotune.spec.loader import ResolvedStudy

    record = store.get_study(study)
    try:
        spec = ResolvedStudy.from_json(record.resolved_json).spec
        max_spread = spec.measurement.max_spread_pct
        precision = spec.measurement.precision_pct or DEFAULT_PRECISION_PCT  # None: default
    except ValueError:  # a study stored by an older schema: fall back to the default
        spec, max_spread, precision = None, DEFAULT_MAX_SPREAD_PCT, DEFAULT_PRECISION_PCT
    records = store.measurements(study=study)
    df = frame_from_records(records)
    df.attrs.update(
        study=record.name,
        model=record.model_alias or record.model,
        max_spread_pct=max_spread,
        precision_pct=precision,
    )
    if spec is not None and spec.slo is not None:
        df = add_goodput(df, records, spec)
    return df


def add_goodput(
    df: pd.DataFrame, records: Sequence[MeasurementRecord], spec: StudySpec
) -> pd.DataFrame:
    """``df`` (built from ``records``, row for row) with the study's SLO per workload in
    ``df.attrs["slo"]``, its objective in ``df.attrs["objective"]`` and a ``goodput_req_s``
    column: each measurement's goodput under its workload's SLO, NaN where it has no
    per-request latencies (a replayed landscape, or stored before schema 4)."""
    assert spec.slo is not None
    # A context bucket (WORKLOAD@ctxL) takes its workload's SLO.
    names = sorted({*spec.workloads, *(r.workload for r in records)})
    slos = {w: spec.slo.for_workload(w) for w in names}
    out = df.copy()
    out.attrs.update(df.attrs)
    out.attrs["slo"] = {
        w: {k: v for k, v in vars(s).items() if v is not None} for w, s in slos.items()
    }
    out.attrs["objective"] = spec.objective
    values = []
    for r in records:
        g = measurement_goodput(r, slos.get(r.workload, SLO()))
        values.append(math.nan if g is None else g)
    if not out.empty:
        out[GOODPUT] = values
    return out


def latest_prompt_sets(df: pd.DataFrame) -> pd.DataFrame:
    """Only the newest prompt set (workload digest) of each workload, like ``choose``."""
    if df.empty:
        return df
    newest = df.sort_values("created_at").groupby("workload")["workload_digest"].last()
    keep = df["workload_digest"] == df["workload"].map(newest)
    return df[keep]


def frame_from_records(records: Sequence[MeasurementRecord]) -> pd.DataFrame:
    """The measurements frame of any list of measurement records (see ``measurements_frame``)."""
    width = max((len(r.accepted_per_pos) for r in records), default=0)
    acc_cols = [f"{ACCEPTANCE_PREFIX}{i + 1}" for i in range(width)]
    rows = []
    names = labels_of(records)
    for r in records:
        row: dict[str, Any] = {
            "study": r.study,
            "model": r.model,
            "trial_id": r.trial_id,
            "config": names(r.speculative_config),
            "method": r.method,
            "draft": r.draft,
            "num_speculative_tokens": r.num_speculative_tokens,
            "speculative_config": config_id(r.speculative_config),
            "workload": r.workload,
            "workload_digest": r.workload_digest,
            "concurrency": r.concurrency,
            "repeat": r.repeat,
            "output_throughput_tok_s": r.output_throughput_tok_s,
            "mean_acceptance_length": r.mean_acceptance_length,
        }
        for col in _TRAILING:
            value = getattr(r, col)
            row[col] = json.dumps(value, sort_keys=True) if col in ("engine_args", "env") else value
        for i, col in enumerate(acc_cols):
            a = r.accepted_per_pos
            row[col] = a[i] / r.num_drafts if i < len(a) and r.num_drafts > 0 else math.nan
        rows.append(row)
    df = pd.DataFrame(rows, columns=[*_LEADING, *acc_cols, *_TRAILING])
    if df.empty:
        return df
    is_base = df["speculative_config"] == "null"
    base = (
        df[is_base]
        .groupby(CELL)["output_throughput_tok_s"]
        .median()
        .rename("baseline_median_tok_s")
    )
    df = df.drop(columns="baseline_median_tok_s").join(base, on=CELL)
    df["speedup"] = df["output_throughput_tok_s"] / df["baseline_median_tok_s"]
    return df[[*_LEADING, *acc_cols, *_TRAILING]]


def records_of(group: pd.DataFrame, acc_cols: list[str]) -> list[MeasurementRecord]:
    """Frame rows back as the store's records (what ``choose.score`` reads); the frame may have
    made a round trip through CSV, so every cell is converted from its text or NaN form."""
    out = []
    for rec in group.to_dict("records"):
        values: dict[str, Any] = {}
        for f in fields(MeasurementRecord):
            if f.name not in rec:
                continue
            v = rec[f.name]
            values[f.name] = None if not isinstance(v, str | dict) and pd.isna(v) else v
        drafts = int(rec["num_drafts"])
        # a_i was accepted_i / drafts: scaling back gives the counts, so pooled a_i weight each
        # repeat by its number of drafts exactly as the recommendation does.
        values["accepted_per_pos"] = tuple(
            round(rec[c] * drafts) for c in acc_cols if not pd.isna(rec[c]) and drafts > 0
        )
        for name in ("speculative_config", "engine_args", "env"):
            values[name] = json.loads(rec[name]) if isinstance(rec[name], str) else rec[name]
        for f in fields(MeasurementRecord):
            if f.type in ("int", int) and values.get(f.name) is not None:
                values[f.name] = int(values[f.name])
        values.setdefault("created_at", datetime.min)
        values["id"] = int(rec.get("id", 0))
        out.append(MeasurementRecord(**values))
    return out


def level_choices(
    df: pd.DataFrame, tie_pct: float = PRACTICAL_TIE_PCT
) -> dict[tuple[str, int], Any]:
    """(workload, concurrency) -> the :class:`~autotune.recommend.choose.Choice` ``recommend``
    makes there (its tie, margin and low-confidence rule), from a measurements frame."""
    records = records_of(df, acceptance_columns(df))
    out: dict[tuple[str, int], Any] = {}
    for workload, concurrency in sorted({(r.workload, r.concurrency) for r in records}):
        choice = choose(records, workload, concurrency, tie_pct)
        if choice is not None:
            out[(workload, concurrency)] = choice
    return out


SUMMARY_COLUMNS = [
    "workload",
    "workload_digest",
    "concurrency",
    "config",
    "method",
    "draft",
    "num_speculative_tokens",
    "speculative_config",
    "repeats",
    "median_tok_s",
    "mad_tok_s",
    "score_tok_s",
    "min_tok_s",
    "max_tok_s",
    "spread_pct",
    "noisy",
    "speedup",
    "mean_acceptance_length",
    "rank",
    "recommended",
    "loop_share",
    "degenerate",
]


def summary_frame(
    df: pd.DataFrame,
    max_spread_pct: float | None = None,
    tie_pct: float = PRACTICAL_TIE_PCT,
) -> pd.DataFrame:
    """One row per config × (workload, prompt set, concurrency).

    Median tok/s (what the recommendation ranks by, :mod:`autotune.evidence.decide`), MAD, the
    robust score (median − 1.4826·MAD),
    spread % over repeats, repeats, speedup (median / the baseline's median), mean acceptance
    length and pooled a_i (``acceptance_pos_i``); ``noisy`` when the spread exceeds
    ``max_spread_pct`` (default: the study's, from ``df.attrs``); ``rank`` within the cell by the
    recommendation's rule (screening runs, measured once where others were repeated, last),
    ``recommended`` for rank 1.
    """
    if max_spread_pct is None:
        max_spread_pct = float(df.attrs.get("max_spread_pct", DEFAULT_MAX_SPREAD_PCT))
    acc_cols = acceptance_columns(df)
    out: list[dict[str, Any]] = []
    names = frame_labels(df)
    for _, cell in df.groupby(CELL, sort=True):
        # One conversion per cell (a frame's per-call cost is per column), grouped by config in
        # order of first appearance as ``cell.groupby("speculative_config", sort=False)`` would.
        by_config: dict[str, list[MeasurementRecord]] = {}
        for key, rec in zip(cell["speculative_config"], records_of(cell, acc_cols), strict=True):
            if not pd.isna(key):
                by_config.setdefault(key, []).append(rec)
        scores: list[ConfigScore] = [score(recs, names) for recs in by_config.values()]
        base = next((s for s in scores if s.is_baseline), None)
        first = cell.iloc[0]
        ranked, screened = screen(scores)
        # Screening runs (measured once, never chosen) rank after every repeated config.
        ordered = rank(ranked, tie_pct) + sorted(screened, key=lambda s: -s.median_tok_s)
        for position, s in enumerate(ordered, start=1):
            row: dict[str, Any] = {
                "workload": first["workload"],
                "workload_digest": first["workload_digest"],
                "concurrency": int(first["concurrency"]),
                "config": s.label(prose=False),
                "method": s.method,
                "draft": s.draft,
                "num_speculative_tokens": s.num_speculative_tokens,
                "speculative_config": config_id(s.speculative_config),
                "repeats": s.repeats,
                "median_tok_s": s.median_tok_s,
                "mad_tok_s": s.mad_tok_s,
                "score_tok_s": s.score_tok_s,
                "min_tok_s": min(s.throughputs),
                "max_tok_s": max(s.throughputs),
                "spread_pct": s.spread_pct,
                "noisy": s.noisy(max_spread_pct),
                "speedup": (
                    s.median_tok_s / base.median_tok_s
                    if base is not None and base.median_tok_s > 0
                    else math.nan
                ),
                "mean_acceptance_length": (
                    math.nan if s.mean_acceptance_length is None else s.mean_acceptance_length
                ),
                "rank": position,
                "recommended": position == 1,
                "loop_share": math.nan if s.loop_share is None else s.loop_share,
                "degenerate": s.degenerate,
            }
            for i, col in enumerate(acc_cols):
                row[col] = s.acceptance_per_pos[i] if i < len(s.acceptance_per_pos) else math.nan
            out.append(row)
    summary = pd.DataFrame(out, columns=[*SUMMARY_COLUMNS, *acc_cols])
    summary.attrs.update(df.attrs)
    summary.attrs["max_spread_pct"] = max_spread_pct
    return summary


def degenerate_cells(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The cells (workload, prompt set, concurrency) of a measurements frame whose replies were
    mostly loops (:mod:`autotune.engine.degeneracy`): pooled loop share, distinct 4-gram ratio
    and loops at max_tokens, weighted by requests. Cells never checked are left out."""
    from autotune.engine.degeneracy import LOOP_SHARE_LIMIT

    if df.empty or "loop_share" not in df.columns:
        return []
    out = []
    for (workload, digest, concurrency), cell in df.groupby(CELL, sort=True):
        checked = cell[cell["loop_share"].notna()]
        if checked.empty:
            continue
        weights = checked["num_requests"].astype(float)

        def mean(col: str, part: pd.DataFrame = checked, w: pd.Series = weights) -> float | None:
            values = part[col]
            ok = values.notna()
            return float((values[ok] * w[ok]).sum() / w[ok].sum()) if ok.any() else None

        loop = mean("loop_share")
        if loop is not None and loop > LOOP_SHARE_LIMIT:
            out.append(
                {
                    "workload": workload,
                    "workload_digest": digest,
                    "concurrency": int(concurrency),
                    "loop_share": loop,
                    "distinct_4gram_ratio": mean("distinct_4gram_ratio"),
                    "loop_at_max_tokens_share": mean("loop_at_max_tokens_share"),
                }
            )
    return out
