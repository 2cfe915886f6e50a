"""What the report's figures show, as plain data both renderers (matplotlib, plotly) draw.

Each series is one method with its draft and parameters (every N of it); only each workload's
newest prompt set is plotted, as the recommendation uses only that one.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import pandas as pd

from autotune.report.frames import acceptance_columns, latest_prompt_sets, summary_frame
from autotune.spec.labels import OFF, Labels

PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
)
BASELINE_COLOR = "#444444"


@dataclass(frozen=True)
class Point:
    num_speculative_tokens: int
    median_tok_s: float
    min_tok_s: float
    max_tok_s: float
    repeats: int
    noisy: bool
    recommended: bool


@dataclass(frozen=True)
class Baseline:
    median_tok_s: float
    min_tok_s: float
    max_tok_s: float
    noisy: bool
    recommended: bool


@dataclass(frozen=True)
class Panel:
    """Throughput vs N at one (workload, concurrency)."""

    workload: str
    concurrency: int
    baseline: Baseline | None
    series: dict[str, list[Point]]
    """Series label -> points sorted by N."""

    @property
    def title(self) -> str:
        return f"{self.workload} · concurrency {self.concurrency}"


@dataclass(frozen=True)
class AcceptanceCurve:
    """a_i of one series at its largest measured N, pooled over concurrency levels."""

    label: str
    num_speculative_tokens: int
    acceptance_per_pos: list[float]
    mean_acceptance_length: float | None


@dataclass(frozen=True)
class SpeedupPoint:
    concurrency: int
    speedup: float
    num_speculative_tokens: int


@dataclass
class Figures:
    """Everything the report draws, for one study."""

    title: str
    max_spread_pct: float
    labels: list[str]
    """Series labels in legend order; colours follow this order."""
    workloads: list[str]
    concurrencies: list[int]
    panels: list[Panel]
    acceptance: dict[str, list[AcceptanceCurve]] = field(default_factory=dict)
    """Workload -> curves."""
    speedup: dict[str, dict[str, list[SpeedupPoint]]] = field(default_factory=dict)
    """Workload -> series label -> best speedup per concurrency level."""

    def color(self, label: str) -> str:
        return PALETTE[self.labels.index(label) % len(PALETTE)]

    def panel(self, workload: str, concurrency: int) -> Panel | None:
        return next(
            (p for p in self.panels if (p.workload, p.concurrency) == (workload, concurrency)),
            None,
        )

    @property
    def has_acceptance(self) -> bool:
        return any(self.acceptance.values())

    @property
    def has_speedup(self) -> bool:
        return any(any(s.values()) for s in self.speedup.values())


def _series_key(config_json: str) -> str:
    config = json.loads(config_json)
    if config is None:
        return "null"
    config.pop("num_speculative_tokens", None)
    return json.dumps(config, sort_keys=True)


def _series_labels(keys: list[str]) -> dict[str, str]:
    """Series names (autotune.spec.labels without N): the method, with the knobs or draft
    added only where configs of the method differ in them, as every other output names them."""
    configs = {k: json.loads(k) for k in keys}
    names = Labels(configs.values())
    return {k: names.variant(c) for k, c in configs.items()}


def build(df: pd.DataFrame) -> Figures:
    """Prepare every figure of the report from a measurements frame."""
    data = latest_prompt_sets(df)
    summary = summary_frame(data, df.attrs.get("max_spread_pct"))
    summary = summary.assign(series=summary["speculative_config"].map(_series_key))
    spec_keys = sorted(k for k in summary["series"].unique() if k != "null")
    key_label = _series_labels(spec_keys)
    labels = [key_label[k] for k in spec_keys]
    study = df.attrs.get("study") or (str(df["study"].iloc[0]) if not df.empty else "")
    model = df.attrs.get("model") or (str(df["model"].iloc[0]) if not df.empty else "")
    figs = Figures(
        title=f"{study} · {model}" if model else study,
        max_spread_pct=float(summary.attrs["max_spread_pct"]),
        labels=labels,
        workloads=sorted(summary["workload"].unique()),
        concurrencies=sorted(int(c) for c in summary["concurrency"].unique()),
        panels=[],
    )
    for (workload, concurrency), cell in summary.groupby(["workload", "concurrency"]):
        base_rows = cell[cell["series"] == "null"]
        baseline = None
        if not base_rows.empty:
            b = base_rows.iloc[0]
            baseline = Baseline(
                b["median_tok_s"], b["min_tok_s"], b["max_tok_s"], b["noisy"], b["recommended"]
            )
        series: dict[str, list[Point]] = {}
        for key, g in cell[cell["series"] != "null"].groupby("series"):
            series[key_label[str(key)]] = [
                Point(
                    int(r["num_speculative_tokens"]),
                    r["median_tok_s"],
                    r["min_tok_s"],
                    r["max_tok_s"],
                    int(r["repeats"]),
                    bool(r["noisy"]),
                    bool(r["recommended"]),
                )
                for _, r in g.sort_values("num_speculative_tokens").iterrows()
            ]
        figs.panels.append(Panel(str(workload), int(concurrency), baseline, series))

    figs.acceptance = _acceptance(data, key_label)
    for workload, wsum in summary.groupby("workload"):
        per_series: dict[str, list[SpeedupPoint]] = {}
        for key, g in wsum[wsum["series"] != "null"].groupby("series"):
            points = []
            for concurrency, level in g.groupby("concurrency"):
                best = level.sort_values("rank").iloc[0]
                if not math.isnan(best["speedup"]):
                    points.append(
                        SpeedupPoint(
                            int(concurrency), best["speedup"], int(best["num_speculative_tokens"])
                        )
                    )
            if points:
                per_series[key_label[str(key)]] = points
        figs.speedup[str(workload)] = per_series
    return figs


def _acceptance(data: pd.DataFrame, key_label: dict[str, str]) -> dict[str, list[AcceptanceCurve]]:
    acc_cols = acceptance_columns(data)
    spec = data[(data["speculative_config"] != "null") & (data["num_drafts"] > 0)]
    spec = spec.assign(series=spec["speculative_config"].map(_series_key))
    out: dict[str, list[AcceptanceCurve]] = {}
    for workload, wdata in spec.groupby("workload"):
        curves = []
        for key, g in wdata.groupby("series"):
            n = int(g["num_speculative_tokens"].max())
            top = g[g["num_speculative_tokens"] == n]
            drafts = top["num_drafts"].astype(float)
            total = float(drafts.sum())
            # Pool repeats and concurrency levels weighted by their drafts, as vLLM's counters
            # would if the runs were one.
            per_pos = [float((top[c].fillna(0.0) * drafts).sum() / total) for c in acc_cols[:n]]
            accepted = float(top["num_accepted_tokens"].sum())
            curves.append(
                AcceptanceCurve(
                    label=key_label[str(key)],
                    num_speculative_tokens=n,
                    acceptance_per_pos=per_pos,
                    mean_acceptance_length=1.0 + accepted / total if total > 0 else None,
                )
            )
        out[str(workload)] = curves
    return out


def footnote(figs: Figures) -> str:
    return (
        "median over repeats; bars: min–max of repeats; ★ recommended; "
        f"hollow marker: noisy (spread > {figs.max_spread_pct:g}%)"
    )


# --- throughput vs p99 TPOT (the latency trade-off) -------------------------------------------


@dataclass(frozen=True)
class TradeOffPoint:
    """One config at one level: its median tok/s against its p99 TPOT."""

    label: str
    """Series label (the colour), or ``off``."""
    config: str
    """``ngram N=3``, ``off (no speculation)``."""
    median_tok_s: float
    p99_tpot_ms: float
    meets_slo: bool
    on_front: bool
    recommended: bool


@dataclass(frozen=True)
class TradeOffPanel:
    """Throughput vs p99 TPOT at one (workload, concurrency), with the Pareto front."""

    workload: str
    concurrency: int
    points: list[TradeOffPoint]
    tpot_limit_ms: float | None
    """The study's p99 TPOT limit for the workload (None: it sets none)."""

    @property
    def title(self) -> str:
        return f"{self.workload} · concurrency {self.concurrency}"

    @property
    def front(self) -> list[TradeOffPoint]:
        """The front's points by rising p99 TPOT (the order a step line joins them)."""
        return sorted((p for p in self.points if p.on_front), key=lambda p: p.p99_tpot_ms)


def trade_off_panels(df: pd.DataFrame, trade: pd.DataFrame) -> list[TradeOffPanel]:
    """The trade-off frame (:func:`autotune.report.tradeoff.trade_off_frame`) of ``df`` as one
    panel per level, coloured like the other figures (configs without p99 TPOT left out)."""
    from autotune.report.tradeoff import slo_of

    data = latest_prompt_sets(df)
    keys = sorted(k for k in data["speculative_config"].map(_series_key).unique() if k != "null")
    key_label = _series_labels(keys)
    panels = []
    for (workload, concurrency), level in trade.groupby(["workload", "concurrency"], sort=True):
        points = []
        for r in level.to_dict("records"):
            if r["p99_tpot_ms"] is None or pd.isna(r["p99_tpot_ms"]):
                continue
            key = _series_key(r["speculative_config"])
            points.append(
                TradeOffPoint(
                    label=OFF if key == "null" else key_label.get(key, key),
                    config=str(r["config"]),
                    median_tok_s=float(r["median_tok_s"]),
                    p99_tpot_ms=float(r["p99_tpot_ms"]),
                    meets_slo=bool(r["meets_slo"]),
                    on_front=bool(r["on_front"]),
                    recommended=bool(r["recommended"]),
                )
            )
        if points:
            limit = slo_of(df, str(workload)).p99_tpot_ms
            panels.append(TradeOffPanel(str(workload), int(concurrency), points, limit))
    return panels
