"""The interactive figures of the HTML report (``renderer="plotly"``): throughput, acceptance,
speedup and the throughput-vs-p99-TPOT trade-off as plotly figures, plotly.js inlined once.

:mod:`autotune.report.html` lays out the page and calls these; the default inline-SVG figures
(matplotlib) stay there.
"""

from __future__ import annotations

import html
from typing import Any

from autotune.report._figures import BASELINE_COLOR, Figures, TradeOffPanel, footnote
from autotune.spec.labels import OFF, OFF_PROSE


def point_color(figs: Figures, label: str) -> str:
    """A config's colour in every figure (the baseline's grey for one not in the legend)."""
    return figs.color(label) if label in figs.labels else BASELINE_COLOR


def plotly_trade_off(figs: Figures, panels: list[TradeOffPanel]) -> str:
    """The panels as interactive plotly subplots (plotly.js is already on the page)."""
    import plotly.graph_objects as go
    import plotly.io as pio
    from plotly.subplots import make_subplots

    cols = min(len(panels), 3)
    rows = -(-len(panels) // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[p.title for p in panels])
    for i, panel in enumerate(panels):
        row, col = i // cols + 1, i % cols + 1
        front = panel.front
        fig.add_trace(
            go.Scatter(
                x=[p.p99_tpot_ms for p in front],
                y=[p.median_tok_s for p in front],
                mode="lines",
                line={"shape": "hv", "color": "#999999"},
                name="Pareto front",
                showlegend=i == 0,
            ),
            row=row,
            col=col,
        )
        for p in panel.points:
            color = point_color(figs, p.label)
            fig.add_trace(
                go.Scatter(
                    x=[p.p99_tpot_ms],
                    y=[p.median_tok_s],
                    mode="markers",
                    marker={
                        "symbol": ("star" if p.recommended else "circle")
                        + ("" if p.meets_slo else "-open"),
                        "size": 14 if p.recommended else 8,
                        "color": color,
                    },
                    name=p.config,
                    hovertemplate=f"{html.escape(p.config)}<br>%{{y:,.1f}} tok/s<br>"
                    "p99 TPOT %{x:.1f} ms<extra></extra>",
                    showlegend=False,
                ),
                row=row,
                col=col,
            )
        if panel.tpot_limit_ms is not None:
            fig.add_vline(
                x=panel.tpot_limit_ms, line_dash="dash", line_color="#d62728", row=row, col=col
            )
        fig.update_xaxes(title_text="p99 TPOT (ms)", row=row, col=col)
        fig.update_yaxes(title_text="output tok/s", row=row, col=col)
    fig.update_layout(height=320 * rows, width=None, autosize=True, margin={"t": 40})
    return str(
        pio.to_html(
            fig,
            full_html=False,
            include_plotlyjs=False,
            config={"responsive": True},
            default_width="100%",
        )
    )


def plotly_sections(figs: Figures) -> list[str]:
    import plotly.io as pio

    built = [("Throughput vs num_speculative_tokens", _plotly_throughput(figs))]
    if figs.has_acceptance:
        built.append(("Acceptance per position", _plotly_acceptance(figs)))
    if figs.has_speedup:
        built.append(("Best speedup per method vs concurrency", _plotly_speedup(figs)))
    out = []
    for i, (title, fig) in enumerate(built):
        out.append(f"<h2>{html.escape(title)}</h2>")
        # plotly.js is inlined once, in the first figure: the page works offline.
        fig.update_layout(width=None, autosize=True)  # follow the window, not a fixed width
        out.append(
            pio.to_html(
                fig,
                full_html=False,
                include_plotlyjs=(i == 0),
                config={"responsive": True},
                default_width="100%",
            )
        )
    return out


def _hex_rgba(color: str, alpha: float) -> str:
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _plotly_throughput(figs: Figures) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    nrows, ncols = len(figs.workloads), len(figs.concurrencies)
    fig = make_subplots(
        rows=nrows,
        cols=ncols,
        subplot_titles=[
            f"{w} · concurrency {c}" for w in figs.workloads for c in figs.concurrencies
        ],
        horizontal_spacing=0.08,
        vertical_spacing=0.12 if nrows > 1 else 0.0,
    )
    shown: set[str] = set()
    for i, workload in enumerate(figs.workloads, start=1):
        for j, concurrency in enumerate(figs.concurrencies, start=1):
            panel = figs.panel(workload, concurrency)
            if panel is None:
                continue
            base = panel.baseline
            for label, points in panel.series.items():
                color = figs.color(label)
                speedups = [
                    f"{p.median_tok_s / base.median_tok_s:.2f}x" if base else "-" for p in points
                ]
                fig.add_trace(
                    go.Scatter(
                        x=[p.num_speculative_tokens for p in points],
                        y=[p.median_tok_s for p in points],
                        error_y={
                            "type": "data",
                            "symmetric": False,
                            "array": [p.max_tok_s - p.median_tok_s for p in points],
                            "arrayminus": [p.median_tok_s - p.min_tok_s for p in points],
                        },
                        mode="lines+markers",
                        name=label,
                        legendgroup=label,
                        showlegend=label not in shown,
                        line={"color": color},
                        marker={
                            "size": [16 if p.recommended else 8 for p in points],
                            "symbol": [
                                "star"
                                if p.recommended
                                else ("circle-open" if p.noisy else "circle")
                                for p in points
                            ],
                            "color": color,
                        },
                        customdata=[
                            [p.repeats, p.min_tok_s, p.max_tok_s, s, p.noisy]
                            for p, s in zip(points, speedups, strict=True)
                        ],
                        hovertemplate=(
                            f"{label} N=%{{x}}<br>%{{y:,.1f}} tok/s (median of %{{customdata[0]}})"
                            "<br>range %{customdata[1]:,.1f}–%{customdata[2]:,.1f}"
                            "<br>speedup %{customdata[3]}<br>noisy %{customdata[4]}<extra></extra>"
                        ),
                    ),
                    row=i,
                    col=j,
                )
                shown.add(label)
            if base is not None:
                xs = sorted(
                    {p.num_speculative_tokens for pts in panel.series.values() for p in pts}
                )
                xs = xs or [0, 1]
                fig.add_trace(
                    go.Scatter(
                        x=[xs[0], xs[-1]],
                        y=[base.median_tok_s] * 2,
                        mode="lines",
                        name=OFF_PROSE,
                        legendgroup=OFF,
                        showlegend=OFF not in shown,
                        line={"color": BASELINE_COLOR, "dash": "dash"},
                        hovertemplate=(
                            f"{OFF}: {base.median_tok_s:,.1f} tok/s"
                            + (" (recommended)" if base.recommended else "")
                            + "<extra></extra>"
                        ),
                    ),
                    row=i,
                    col=j,
                )
                shown.add(OFF)
                fig.add_hrect(
                    y0=base.min_tok_s,
                    y1=base.max_tok_s,
                    fillcolor=_hex_rgba(BASELINE_COLOR, 0.12),
                    line_width=0,
                    layer="below",
                    row=i,
                    col=j,
                )
            fig.update_xaxes(title_text="num_speculative_tokens (N)", dtick=1, row=i, col=j)
            fig.update_yaxes(
                title_text="output throughput (tok/s)" if j == 1 else None, row=i, col=j
            )
    fig.update_layout(
        title=f"{figs.title}: output throughput vs num_speculative_tokens<br>"
        f"<sup>{footnote(figs)}</sup>",
        height=140 + 330 * nrows,
        width=max(700, 420 * ncols),
        template="plotly_white",
    )
    return fig


def _plotly_acceptance(figs: Figures) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = [w for w in figs.workloads if figs.acceptance.get(w)]
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=names)
    shown: set[str] = set()
    for j, workload in enumerate(names, start=1):
        for curve in figs.acceptance[workload]:
            al = curve.mean_acceptance_length
            fig.add_trace(
                go.Scatter(
                    x=list(range(1, len(curve.acceptance_per_pos) + 1)),
                    y=curve.acceptance_per_pos,
                    mode="lines+markers",
                    name=curve.label,
                    legendgroup=curve.label,
                    showlegend=curve.label not in shown,
                    line={"color": figs.color(curve.label)},
                    hovertemplate=(
                        f"{curve.label} N={curve.num_speculative_tokens}"
                        + (f", AL {al:.2f}" if al else "")
                        + "<br>a_%{x} = %{y:.3f}<extra></extra>"
                    ),
                ),
                row=1,
                col=j,
            )
            shown.add(curve.label)
        fig.update_xaxes(title_text="draft position i", dtick=1, row=1, col=j)
        fig.update_yaxes(
            title_text="acceptance a_i (accepted at i / drafts)" if j == 1 else None,
            range=[0, 1.05],
            row=1,
            col=j,
        )
    fig.update_layout(
        title=f"{figs.title}: acceptance per position<br><sup>each method at its largest "
        "measured N, pooled over repeats and concurrency levels</sup>",
        height=460,
        width=max(700, 480 * len(names)),
        template="plotly_white",
    )
    return fig


def _plotly_speedup(figs: Figures) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = [w for w in figs.workloads if figs.speedup.get(w)]
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=names)
    shown: set[str] = set()
    for j, workload in enumerate(names, start=1):
        for label, points in figs.speedup[workload].items():
            fig.add_trace(
                go.Scatter(
                    x=[p.concurrency for p in points],
                    y=[p.speedup for p in points],
                    text=[f"N={p.num_speculative_tokens}" for p in points],
                    textposition="top right",
                    mode="lines+markers+text",
                    name=label,
                    legendgroup=label,
                    showlegend=label not in shown,
                    line={"color": figs.color(label)},
                    textfont={"color": figs.color(label), "size": 10},
                    hovertemplate=f"{label} %{{text}}<br>concurrency %{{x}}: %{{y:.2f}}x"
                    "<extra></extra>",
                ),
                row=1,
                col=j,
            )
            shown.add(label)
        fig.add_hline(y=1.0, line_dash="dash", line_color=BASELINE_COLOR, row=1, col=j)
        fig.update_xaxes(
            title_text="concurrency (requests in flight)",
            type="log" if len(figs.concurrencies) > 1 else "linear",
            tickvals=figs.concurrencies,
            row=1,
            col=j,
        )
        fig.update_yaxes(title_text="speedup vs off (×)" if j == 1 else None, row=1, col=j)
    fig.update_layout(
        title=f"{figs.title}: best speedup per method vs concurrency<br><sup>each point: the "
        f"method's best N at that concurrency; dashed line: {OFF_PROSE} = 1×</sup>",
        height=460,
        width=max(700, 480 * len(names)),
        template="plotly_white",
    )
    return fig
