"""A self-contained HTML report that leads with the answer, with no network needed.

First screen: per workload × concurrency, the recommended config, its speedup, acceptance length,
margin over the runner-up, a noise flag and the ``vllm serve`` line to copy. Then the figures,
which scale with the window: inline SVG from matplotlib by default (a few hundred kB for a whole
study), or interactive plotly (``renderer="plotly"``: plotly.js inlined once, ~4.8 MB). Last,
every config × cell in a table that sorts (click a heading) and filters (type in the box) with a
few lines of inline JavaScript.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from autotune.errors import NoResultError
from autotune.report._figures import (
    Figures,
    TradeOffPanel,
    build,
    trade_off_panels,
)
from autotune.report.frames import summary_frame
from autotune.report.html_plotly import plotly_sections, plotly_trade_off, point_color
from autotune.report.published import acceptance_comparison
from autotune.report.table import provenance

if TYPE_CHECKING:
    from autotune.recommend.answer_value import Answer

Renderer = Literal["auto", "svg", "plotly", "matplotlib"]

ANSWERS_ID = "autotune-answers"
"""The id of the JSON island that carries every ``Answer.as_json`` of the page."""

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.2em 2em;
  color: #222; }
h1 { font-size: 1.35em; margin: 0.2em 0; } h2 { font-size: 1.15em; margin-top: 1.4em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { padding: 3px 8px; border-bottom: 1px solid #ddd; text-align: right; }
th { background: #f3f3f3; }
td.t, th.t { text-align: left; }
div.scroll { overflow-x: auto; max-width: 100%; }
table.answer { width: 100%; }
table.answer td { font-size: 1.05em; }
table.answer td.w { white-space: nowrap; }
table.answer td:last-child code { word-break: break-all; }
table.answer code { font-size: 0.9em; background: #f6f6f6; padding: 1px 4px; }
table.summary th { cursor: pointer; user-select: none; }
tr.recommended td { font-weight: bold; background: #eef6ee; }
.noisy { color: #b36b00; }
.tie { color: #3a5a8c; font-style: italic; }
.note { color: #555; font-size: 0.85em; }
button.copy { font-size: 0.8em; margin-left: 4px; }
figure { margin: 0.5em 0; } figure svg, figure img { width: 100%; height: auto; max-width: 1400px; }
#filter { margin: 0.3em 0; padding: 3px 6px; width: 18em; }
"""

_SCRIPT = """
document.querySelectorAll('button.copy').forEach(b => b.addEventListener('click', () => {
  navigator.clipboard && navigator.clipboard.writeText(b.dataset.text);
  b.textContent = 'copied';
}));
const table = document.querySelector('table.summary');
if (table) {
  const body = table.tBodies[0];
  const value = (td) => { const t = td.textContent.replace(/[,x★%]/g, '').trim();
    const n = parseFloat(t); return isNaN(n) || !/^-?[0-9.]+/.test(t) ? t : n; };
  table.querySelectorAll('th').forEach((th, i) => th.addEventListener('click', () => {
    const up = th.dataset.dir !== 'up'; th.dataset.dir = up ? 'up' : 'down';
    const rows = Array.from(body.rows);
    rows.sort((a, b) => { const x = value(a.cells[i]), y = value(b.cells[i]);
      return (x > y ? 1 : x < y ? -1 : 0) * (up ? 1 : -1); });
    rows.forEach(r => body.appendChild(r));
  }));
  document.getElementById('filter').addEventListener('input', (e) => {
    const words = e.target.value.toLowerCase().split(/\\s+/).filter(Boolean);
    // whole words of cells ("code 8": workload code at concurrency 8, not any 8 in a number)
    Array.from(body.rows).forEach(r => {
      const cells = new Set(Array.from(r.cells).flatMap(
        c => c.textContent.toLowerCase().split(/[\\s=]+/)));
      r.style.display = words.every(w => cells.has(w)) ? '' : 'none'; });
  });
}
"""


def write_html(
    df: pd.DataFrame,
    path: Path | str,
    renderer: Renderer = "auto",
    answers: Sequence[Answer] | None = None,
) -> Path:
    """Write the report of a measurements frame as one HTML file; returns its path.

    ``auto`` and ``svg`` embed the matplotlib figures as scalable SVG; ``plotly`` embeds
    interactive figures; ``matplotlib`` embeds PNG images. ``answers`` are the study's
    (:mod:`autotune.recommend.answer_value`, what `recommend` answers); without them they are
    built from the frame's rows.
    """
    if df.empty:
        raise NoResultError("nothing measured in this study yet: nothing to report")
    figs = build(df)
    summary = summary_frame(df)
    if answers is None:
        answers = _frame_answers(df, summary)
    if renderer == "plotly":
        sections = plotly_sections(figs)
    else:
        sections = _image_sections(df, "png" if renderer == "matplotlib" else "svg")
    sections += _trade_off_sections(df, figs, renderer)
    published = acceptance_comparison(df)
    if published is not None:
        sections.append(published.html())
    title = f"autotune report: {figs.title}"
    body = [
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="note">{html.escape(provenance(df))}</p>',
        '<h2 id="answer">What to deploy</h2>',
        # the model as vLLM takes it (the HF id), not the catalog alias the title uses
        _answer_html(
            summary, str(df["model"].iloc[0] if "model" in df else figs.title), df, answers
        ),
        _slo_answer_html(df),
        *sections,
        '<h2 id="all">Every config at every level</h2>',
        '<input id="filter" type="search" placeholder="filter: whole words, e.g. code 8 ngram">',
        _summary_html(summary),
    ]
    page = (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + f"\n<script>{_SCRIPT}</script>\n</body></html>\n"
    )
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def _frame_answers(df: pd.DataFrame, summary: pd.DataFrame) -> tuple[Answer, ...]:
    from autotune.evidence.scores import DEFAULT_PRECISION_PCT
    from autotune.recommend.answer_value import from_rows
    from autotune.report.frames import acceptance_columns, records_of

    return from_rows(
        records_of(df, acceptance_columns(df)),
        study=str(df.attrs.get("study", "")),
        model=str(df["model"].iloc[0]) if "model" in df else "",
        status=str(df.attrs.get("status", "")),
        max_spread_pct=float(summary.attrs.get("max_spread_pct", 10.0)),
        precision_pct=float(df.attrs.get("precision_pct", DEFAULT_PRECISION_PCT)),
    )


def _data(**attrs: Any) -> str:
    return " ".join(
        f'data-{k.replace("_", "-")}="{html.escape("" if v is None else str(v), quote=True)}"'
        for k, v in attrs.items()
    )


def _answer_html(
    summary: pd.DataFrame, model: str, df: pd.DataFrame, answers: Sequence[Answer]
) -> str:
    """Per workload × concurrency the answer (:class:`autotune.recommend.answer_value.Answer`,
    the value `recommend` renders): the winner, its margin and verdict, its confidence with
    the reasons, the line to copy; then each workload's one config for all levels beside it,
    every caveat the CLI prints, and the answers as a JSON island (``#autotune-answers``)."""
    from autotune.recommend.render import serve_args

    head = [
        ("workload", "t"),
        ("concurrency", ""),
        ("recommended", "t"),
        ("speedup", ""),
        ("AL", ""),
        ("margin over runner-up", "t"),
        ("confidence", "t"),
        ("vllm serve", "t"),
    ]
    rows = []
    defaults = []
    for answer in answers:
        cells_of = summary[summary["workload"] == answer.workload]
        for la in answer.levels:
            cell = cells_of[cells_of["concurrency"] == la.concurrency]
            key = json.dumps(la.speculative_config, sort_keys=True)
            picked = cell[cell["speculative_config"] == key]
            best = (picked if not picked.empty else cell.sort_values("rank")).iloc[0]
            margin = la.margin_text()
            if la.runner_up is not None:
                margin += f" over {la.runner_up}"
            why = "; ".join(r.text for r in la.reasons)
            cls = "noisy" if la.confidence != "ok" else "tie" if la.verdict == "tie" else ""
            confidence = (
                f'<span class="{cls}" title="{html.escape(why, quote=True)}">'
                f"{html.escape(la.confidence)}</span>"
            )
            line = _serve_line(df, best, model, la.speculative_config, serve_args)
            speedup = "-" if la.speedup_vs_off is None else f"{la.speedup_vs_off:.2f}x"
            al = best["mean_acceptance_length"]
            cells = [
                f'<td class="t w">{html.escape(answer.workload)}</td>',
                f'<td class="w">{la.concurrency}</td>',
                f'<td class="t w"><b>{html.escape(la.winner)}</b></td>',
                f'<td class="w">{speedup}</td>',
                f'<td class="w">{"-" if pd.isna(al) else f"{al:.2f}"}</td>',
                f'<td class="t">{html.escape(margin)}</td>',
                f'<td class="t">{confidence}</td>',
                f'<td class="t"><code>{html.escape(line)}</code><button class="copy" '
                f'data-text="{html.escape(line, quote=True)}">copy</button></td>',
            ]
            attrs = _data(
                workload=answer.workload,
                concurrency=la.concurrency,
                winner=la.winner,
                margin_pct=None if la.margin_pct is None else round(la.margin_pct, 3),
                verdict=la.verdict,
                confidence=la.confidence,
            )
            rows.append(f'<tr class="level" {attrs}>' + "".join(cells) + "</tr>")
        d = answer.default
        if d is not None:
            loses = "; ".join(
                f"at c={loss.concurrency} it loses to {loss.winner} by {loss.loss_pct:.1f}%"
                for loss in d.loses_at
            )
            words = (
                "nothing compared"
                if d.margin_pct is None
                else (f"{d.margin_pct:+.1f}% over {d.runner_up}, {d.verdict}")
            )
            attrs = _data(
                workload=answer.workload,
                winner=d.winner,
                margin_pct=None if d.margin_pct is None else round(d.margin_pct, 3),
                verdict=d.verdict,
                confidence=d.confidence,
            )
            defaults.append(
                f'<li class="default" {attrs}><b>{html.escape(answer.workload)}</b>: '
                f"<b>{html.escape(d.winner)}</b> ({html.escape(words)}; confidence "
                f"{html.escape(d.confidence)})"
                + (f"; {html.escape(loses)}" if loses else "; best at every level")
                + "</li>"
            )
    ths = "".join(f'<th class="{c}">{html.escape(h)}</th>' for h, c in head)
    caveats = [c for a in answers for c in a.caveats]
    caveats = list(dict.fromkeys(caveats))
    note = (
        "recommended: the highest median over repeats; configs within 1% of it tie and the "
        "preferred answers (off, then the smaller N). margin: the answer's median over the "
        "runner-up's; verdict: tie (within 1%), undecided (beyond 1% while the 95% interval "
        "of the ratio of the medians contains 1) or decided (docs/answers.md); confidence: ok, "
        "low (hover for the reasons, listed below) or nothing compared (one config measured); "
        "speedup against running without speculation in the same cell; AL: mean acceptance "
        "length; the vllm serve line is `recommend --format args` (the measured engine args)."
    )
    island = json.dumps([a.as_json() for a in answers], sort_keys=True).replace("</", "<\\/")
    return (
        f'<div class="scroll"><table class="answer"><thead><tr>{ths}</tr></thead><tbody>'
        + "".join(rows)
        + f'</tbody></table></div><p class="note">{html.escape(note)}</p>'
        + (
            '<h3 id="default">One config for every level (recommend without --concurrency)</h3>'
            f'<ul class="defaults">{"".join(defaults)}</ul>'
            if defaults
            else ""
        )
        + (
            '<h3 id="caveats">Caveats</h3><ul class="caveats">'
            + "".join(f"<li>{html.escape(c)}</li>" for c in caveats)
            + "</ul>"
            if caveats
            else ""
        )
        + f'<script type="application/json" id="{ANSWERS_ID}">{island}</script>'
    )


def _serve_line(df: pd.DataFrame, best: Any, model: str, config: Any, serve_args: Any) -> str:
    """The measured engine's ``vllm serve`` line for the answer of one cell: its engine args
    and tensor-parallel size as stored with its measurements (``recommend --format args``)."""
    rows = df[
        (df["workload"] == best["workload"])
        & (df["concurrency"] == best["concurrency"])
        & (df["speculative_config"] == best["speculative_config"])
    ]
    engine_args: dict[str, Any] = {}
    tp = 1
    if not rows.empty:
        first = rows.iloc[0]
        raw = first.get("engine_args")
        engine_args = json.loads(raw) if isinstance(raw, str) else dict(raw or {})
        size = first.get("tensor_parallel_size")
        tp = 1 if size is None or pd.isna(size) else int(size)
    return str(serve_args(model, config, tensor_parallel_size=tp, engine_args=engine_args))


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
        tds = "".join(
            f'<td class="{"t" if i in (0, 2, 9) else ""}">{html.escape(str(c))}</td>'
            for i, c in enumerate(cells)
        )
        rows.append(f'<tr class="{" ".join(classes)}">{tds}</tr>')
    ths = "".join(
        f'<th class="{"t" if i in (0, 2, 9) else ""}" title="click to sort">{html.escape(h)}</th>'
        for i, h in enumerate(head)
    )
    note = (
        "★ recommended: the highest median over repeats; configs within 1% of it tie and the "
        "preferred answers (off, then the smaller N; docs/answers.md). noisy: spread over "
        "repeats above "
        f"{summary.attrs.get('max_spread_pct', 10.0):g}%. AL: mean acceptance length."
    )
    return (
        f'<div class="scroll"><table class="summary"><thead><tr>{ths}</tr></thead><tbody>'
        + "".join(rows)
        + f'</tbody></table></div><p class="note">{html.escape(note)}</p>'
    )


# --- throughput vs p99 TPOT ------------------------------------------------------------------


def _trade_off_sections(df: pd.DataFrame, figs: Figures, renderer: Renderer) -> list[str]:
    """Per level, every config's throughput against its p99 TPOT with the Pareto front and the
    study's TPOT limit, then the same numbers (with goodput and the SLO verdict) as a table;
    nothing when the engine recorded no latencies (a replayed landscape)."""
    from autotune.report.tradeoff import slo_of, trade_off_frame

    trade = trade_off_frame(df)
    panels = trade_off_panels(df, trade)
    if not panels:
        return []
    limits = {w: slo_of(df, w).describe() for w in figs.workloads}
    said = "; ".join(f"{w}: {t}" for w, t in limits.items() if t)
    note = (
        "median tok/s over repeats vs p99 TPOT (median of the repeats' p99); line: the Pareto "
        "front (no config has both more tok/s and a lower p99 TPOT); ★ recommended"
        + (f" under the study's SLO ({said}); hollow: misses it" if said else "")
        + "; dashed: the p99 TPOT limit"
    )
    out = ['<h2 id="tradeoff">Throughput vs p99 TPOT</h2>']
    if renderer == "plotly":
        out.append(plotly_trade_off(figs, panels))
    else:
        out.append(_mpl_trade_off(figs, panels, "png" if renderer == "matplotlib" else "svg"))
    out.append(f'<p class="note">{html.escape(note)}</p>')
    goodput = trade["goodput_req_s"].notna().any()
    head = ["workload", "conc", "config", "tok/s", "p99 TPOT ms", "p99 TTFT ms", "p99 ITL ms"]
    head += ["goodput req/s"] if goodput else []
    head += ["SLO", "front"]
    rows = []
    for r in trade.sort_values(
        ["workload", "concurrency", "median_tok_s"], ascending=[True, True, False]
    ).to_dict("records"):
        cells = [
            r["workload"],
            str(r["concurrency"]),
            str(r["config"]) + (" ★" if r["recommended"] else ""),
            f"{r['median_tok_s']:,.1f}",
            *(_ms(r[m]) for m in ("p99_tpot_ms", "p99_ttft_ms", "p99_itl_ms")),
        ]
        if goodput:
            cells.append(_ms(r["goodput_req_s"], ".2f"))
        cells.append(
            ("meets" if r["meets_slo"] else "misses") if limits.get(r["workload"]) else "-"
        )
        cells.append("front" if r["on_front"] else "")
        css = ' class="recommended"' if r["recommended"] else ""
        rows.append(
            f"<tr{css}>"
            + "".join(
                f"<td{' class=t' if i in (0, 2) else ''}>{html.escape(c)}</td>"
                for i, c in enumerate(cells)
            )
            + "</tr>"
        )
    out.append(
        '<div class="scroll"><table class="tradeoff"><thead><tr>'
        + "".join(
            f"<th{' class=t' if i in (0, 2) else ''}>{html.escape(h)}</th>"
            for i, h in enumerate(head)
        )
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
    )
    return out


def _slo_answer_html(df: pd.DataFrame) -> str:
    """Under the study's ``slo:``, what it changes in the answer above (which ranks by
    throughput alone): per level, the config recommended under the SLO, or that none meets it."""
    from autotune.report.tradeoff import slo_of, trade_off_frame

    if not df.attrs.get("slo"):
        return ""
    trade = trade_off_frame(df)
    parts = []
    for (workload, concurrency), level in trade.groupby(["workload", "concurrency"], sort=True):
        if not slo_of(df, str(workload)):
            continue
        best = level[level["recommended"]]
        chosen = str(best["config"].iloc[0]) if not best.empty else "no config meets it"
        parts.append(f"{workload} · {concurrency}: {chosen}")
    if not parts:
        return ""
    said = "; ".join(
        f"{w}: {slo_of(df, w).describe()}" for w in sorted(df.attrs["slo"]) if slo_of(df, w)
    )
    by = "goodput" if df.attrs.get("objective") == "goodput" else "throughput"
    return (
        f'<p class="slo-answer"><b>Under the study\'s SLO</b> ({html.escape(said)}, ranked by '
        f"{by}): {html.escape('; '.join(parts))}</p>"
    )


def _ms(value: Any, fmt: str = ".1f") -> str:
    return "-" if value is None or pd.isna(value) else format(float(value), fmt)


def _mpl_trade_off(figs: Figures, panels: list[TradeOffPanel], fmt: str) -> str:
    """The panels as one matplotlib figure, inline SVG (or PNG)."""
    from autotune.report.plots import _pyplot

    plt = _pyplot()
    cols = min(len(panels), 3)
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        front = panel.front
        if len(front) > 1:
            ax.step(
                [p.p99_tpot_ms for p in front],
                [p.median_tok_s for p in front],
                where="post",
                color="#999999",
                linewidth=1.2,
                zorder=1,
            )
        for p in panel.points:
            color = point_color(figs, p.label)
            ax.scatter(
                [p.p99_tpot_ms],
                [p.median_tok_s],
                s=150 if p.recommended else 36,
                marker="*" if p.recommended else "o",
                facecolors=color if p.meets_slo else "none",
                edgecolors=color,
                zorder=3,
            )
            if p.on_front or p.recommended:
                ax.annotate(
                    p.config.replace(" (no speculation)", ""),
                    (p.p99_tpot_ms, p.median_tok_s),
                    textcoords="offset points",
                    xytext=(4, 4),
                    fontsize=7,
                )
        if panel.tpot_limit_ms is not None:
            ax.axvline(panel.tpot_limit_ms, color="#d62728", linestyle="--", linewidth=1)
        ax.set_title(panel.title, fontsize=9)
        ax.set_xlabel("p99 TPOT (ms)", fontsize=8)
        ax.set_ylabel("output tok/s", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=110, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
    if fmt == "svg":
        svg = buf.getvalue().decode("utf-8")
        return f'<figure class="tradeoff">{svg[svg.index("<svg") :]}</figure>'
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return (
        f'<figure class="tradeoff"><img alt="tradeoff" src="data:image/png;base64,{data}"></figure>'
    )


# --- matplotlib fallback ---------------------------------------------------------------------


def _image_sections(df: pd.DataFrame, fmt: str) -> list[str]:
    """The matplotlib figures inline: SVG (scales with the window, small) or PNG."""
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
        fig.savefig(buf, format=fmt, dpi=110, bbox_inches="tight", pad_inches=0.15)
        plt.close(fig)
        out.append(f"<h2>{html.escape(titles[name])}</h2>")
        if fmt == "svg":
            svg = buf.getvalue().decode("utf-8")
            svg = svg[svg.index("<svg") :]  # drop the XML prolog and DOCTYPE
            out.append(f'<figure class="{name}">{svg}</figure>')
        else:
            data = base64.b64encode(buf.getvalue()).decode("ascii")
            out.append(
                f'<figure class="{name}"><img alt="{name}" src="data:image/png;base64,{data}"></figure>'
            )
    return out
