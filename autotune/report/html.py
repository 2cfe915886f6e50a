"""A self-contained HTML report: the summary table and the figures, with no network needed.

Interactive plotly figures (plotly.js inlined once) when plotly is installed (the ``plots``
extra), else the matplotlib figures embedded as base64 PNG.
"""

from __future__ import annotations

import base64
import html
import importlib.util
import io
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from autotune.errors import NoResultError
from autotune.report._figures import BASELINE_COLOR, Figures, build, footnote
from autotune.report.frames import summary_frame
from autotune.report.table import provenance

Renderer = Literal["auto", "plotly", "matplotlib"]

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table.summary { border-collapse: collapse; font-size: 0.85em; }
table.summary th, table.summary td { padding: 3px 8px; border-bottom: 1px solid #ddd;
  text-align: right; }
table.summary th { background: #f3f3f3; }
table.summary td:nth-child(-n+3) { text-align: left; }
tr.recommended td { font-weight: bold; background: #eef6ee; }
tr.noisy td:last-child { color: #b36b00; }
.note { color: #555; font-size: 0.85em; }
img { max-width: 100%; }
"""


def plotly_available() -> bool:
    return importlib.util.find_spec("plotly") is not None


def write_html(df: pd.DataFrame, path: Path | str, renderer: Renderer = "auto") -> Path:
    """Write the report of a measurements frame as one HTML file; returns its path."""
    if df.empty:
        raise NoResultError("nothing measured in this study yet: nothing to report")
    use_plotly = renderer == "plotly" or (renderer == "auto" and plotly_available())
    figs = build(df)
    summary = summary_frame(df)
    sections = _plotly_sections(figs) if use_plotly else _png_sections(df)
    title = f"autotune report: {figs.title}"
    body = [
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="note">{html.escape(provenance(df))}</p>',
        "<h2>Summary</h2>",
        _summary_html(summary),
        *sections,
    ]
    page = (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def _summary_html(summary: pd.DataFrame) -> str:
    head = [
        "workload",
        "concurrency",
        "config",
        "tok/s (median)",
        "MAD",
        "spread %",
        "repeats",
        "speedup",
        "AL",
        "",
    ]
    rows = []
    ordered = summary.assign(_spec=summary["speculative_config"] != "null").sort_values(
        ["workload", "concurrency", "_spec", "method", "num_speculative_tokens"]
    )
    for r in ordered.to_dict("records"):
        classes = [c for c in ("recommended", "noisy") if r[c]]
        flags = " ".join(f for f, on in (("★", r["recommended"]), ("noisy", r["noisy"])) if on)
        cells = [
            r["workload"],
            r["concurrency"],
            r["config"],
            f"{r['median_tok_s']:,.1f}",
            f"{r['mad_tok_s']:,.1f}",
            f"{r['spread_pct']:.1f}",
            r["repeats"],
            "-" if pd.isna(r["speedup"]) else f"{r['speedup']:.2f}x",
            "-" if pd.isna(r["mean_acceptance_length"]) else f"{r['mean_acceptance_length']:.2f}",
            flags,
        ]
        tds = "".join(f"<td>{html.escape(str(c))}</td>" for c in cells)
        rows.append(f'<tr class="{" ".join(classes)}">{tds}</tr>')
    ths = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    note = (
        "★ recommended: highest robust score (median − 1.4826·MAD over repeats), configs within "
        "1% tied and the smaller N preferred. noisy: spread over repeats above "
        f"{summary.attrs.get('max_spread_pct', 10.0):g}%. AL: mean acceptance length."
    )
    return (
        f'<table class="summary"><thead><tr>{ths}</tr></thead><tbody>'
        + "".join(rows)
        + f'</tbody></table><p class="note">{html.escape(note)}</p>'
    )


# --- matplotlib fallback ---------------------------------------------------------------------


def _png_sections(df: pd.DataFrame) -> list[str]:
    from autotune.report.plots import _pyplot, figures

    plt = _pyplot()
    out = []
    titles = {
        "throughput": "Throughput vs num_speculative_tokens",
        "acceptance": "Acceptance per position",
        "speedup": "Best speedup per method vs concurrency",
    }
    for name, fig in figures(df).items():
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", pad_inches=0.15)
        plt.close(fig)
        data = base64.b64encode(buf.getvalue()).decode("ascii")
        out.append(f"<h2>{html.escape(titles[name])}</h2>")
        out.append(f'<img alt="{name}" src="data:image/png;base64,{data}">')
    return out


# --- plotly ----------------------------------------------------------------------------------


def _plotly_sections(figs: Figures) -> list[str]:
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
        out.append(pio.to_html(fig, full_html=False, include_plotlyjs=(i == 0)))
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
                        name="off (no speculation)",
                        legendgroup="off",
                        showlegend="off" not in shown,
                        line={"color": BASELINE_COLOR, "dash": "dash"},
                        hovertemplate=(
                            f"off: {base.median_tok_s:,.1f} tok/s"
                            + (" (recommended)" if base.recommended else "")
                            + "<extra></extra>"
                        ),
                    ),
                    row=i,
                    col=j,
                )
                shown.add("off")
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
        "method's best N at that concurrency; dashed line: off (no speculation) = 1×</sup>",
        height=460,
        width=max(700, 480 * len(names)),
        template="plotly_white",
    )
    return fig
