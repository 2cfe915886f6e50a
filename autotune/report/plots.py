"""matplotlib figures of a study: throughput vs N, acceptance per position, speedup vs concurrency.

Drawn with the Agg backend (no display needed); ``plot_png`` writes them as PNG files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from autotune.errors import NoResultError
from autotune.report._figures import BASELINE_COLOR, Figures, Panel, build, footnote
from autotune.spec.labels import OFF_PROSE

DPI = 120


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display, works in CI
    import matplotlib.pyplot as plt

    return plt


def figures(df: pd.DataFrame) -> dict[str, Any]:
    """The report's matplotlib figures by name (``throughput``, ``acceptance``, ``speedup``);
    a figure with nothing to show (no speculative config, no baseline) is left out."""
    if df.empty:
        raise NoResultError("nothing measured in this study yet: nothing to plot")
    figs = build(df)
    out = {"throughput": throughput_figure(figs)}
    if figs.has_acceptance:
        out["acceptance"] = acceptance_figure(figs)
    if figs.has_speedup:
        out["speedup"] = speedup_figure(figs)
    return out


def plot_png(df: pd.DataFrame, out_dir: Path | str) -> list[Path]:
    """Write ``throughput.png``, ``acceptance.png`` and ``speedup.png`` (those that have data)
    into ``out_dir``; returns the paths written."""
    plt = _pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in figures(df).items():
        path = out / f"{name}.png"
        fig.savefig(path, dpi=DPI, bbox_inches="tight", pad_inches=0.15)
        plt.close(fig)
        paths.append(path)
    return paths


def _legend(fig: Any, handles: list[Any], labels: list[str], note: str) -> None:
    # The note rides in the legend's title: constrained layout then keeps both clear of the axes.
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncols=max(1, min(len(labels), 6)),
        frameon=False,
        title=note,
        title_fontproperties={"size": 8},
    )


def throughput_figure(figs: Figures) -> Any:
    """Output throughput vs num_speculative_tokens: one panel per (workload, concurrency), one
    line per method, the baseline as a horizontal line; right axis: speedup vs the baseline."""
    plt = _pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    nrows, ncols = len(figs.workloads), len(figs.concurrencies)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(1.0 + 4.3 * ncols, 1.6 + 3.4 * nrows),
        squeeze=False,
        layout="constrained",
    )
    handles: dict[str, Any] = {}
    for i, workload in enumerate(figs.workloads):
        for j, concurrency in enumerate(figs.concurrencies):
            ax = axes[i][j]
            panel = figs.panel(workload, concurrency)
            ax.set_title(f"{workload} · concurrency {concurrency}", fontsize=10)
            ax.grid(True, alpha=0.3)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if i == nrows - 1:
                ax.set_xlabel("num_speculative_tokens (N)")
            if j == 0:
                ax.set_ylabel("output throughput (tok/s)")
            if panel is None:
                ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
                continue
            for label, points in panel.series.items():
                color = figs.color(label)
                xs = [p.num_speculative_tokens for p in points]
                ys = [p.median_tok_s for p in points]
                err = [
                    [p.median_tok_s - p.min_tok_s for p in points],
                    [p.max_tok_s - p.median_tok_s for p in points],
                ]
                line = ax.errorbar(
                    xs, ys, yerr=err, color=color, marker="o", ms=5, capsize=3, lw=1.6
                )
                handles.setdefault(label, line)
                for p in points:
                    if p.noisy:
                        # hollow: the repeats disagree more than the study allows
                        ax.plot(
                            p.num_speculative_tokens,
                            p.median_tok_s,
                            "o",
                            ms=8,
                            mfc="white",
                            mec=color,
                            mew=1.5,
                            zorder=3,
                        )
                    if p.recommended:
                        ax.plot(
                            p.num_speculative_tokens,
                            p.median_tok_s,
                            "*",
                            ms=16,
                            color=color,
                            mec="black",
                            mew=0.8,
                            zorder=4,
                        )
            b = panel.baseline
            if b is not None:
                ax.axhline(b.median_tok_s, color=BASELINE_COLOR, ls="--", lw=1.3)
                ax.axhspan(b.min_tok_s, b.max_tok_s, color=BASELINE_COLOR, alpha=0.12, lw=0)
                if b.recommended:
                    ax.set_title(
                        f"{workload} · concurrency {concurrency} · ★ off recommended", fontsize=10
                    )
                handles.setdefault(
                    OFF_PROSE,
                    Line2D([], [], color=BASELINE_COLOR, ls="--", lw=1.3),
                )
                base = b.median_tok_s
                right = ax.secondary_yaxis(
                    "right",
                    functions=(lambda y, b=base: y / b, lambda s, b=base: s * b),
                )
                if j == ncols - 1:
                    right.set_ylabel("speedup vs off (×)")
            _pad_ylim(ax, panel)
    fig.suptitle(f"{figs.title}: output throughput vs num_speculative_tokens", fontsize=12)
    order = [*figs.labels, OFF_PROSE]
    keep = [k for k in order if k in handles]
    _legend(fig, [handles[k] for k in keep], keep, footnote(figs))
    return fig


def _pad_ylim(ax: Any, panel: Panel) -> None:
    """Keep at least 10% of the top value in view, so near-equal numbers do not fill the panel
    and read as large differences."""
    values = [v for pts in panel.series.values() for p in pts for v in (p.min_tok_s, p.max_tok_s)]
    if panel.baseline is not None:
        values += [panel.baseline.min_tok_s, panel.baseline.max_tok_s]
    if not values:
        return
    lo, hi = min(values), max(values)
    span = max(hi - lo, 0.1 * hi)
    mid = (lo + hi) / 2
    ax.set_ylim(min(lo, mid - span / 2) - 0.08 * span, max(hi, mid + span / 2) + 0.08 * span)


def acceptance_figure(figs: Figures) -> Any:
    """a_i per position for each method (at its largest measured N), one panel per workload."""
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    names = [w for w in figs.workloads if figs.acceptance.get(w)]
    fig, axes = plt.subplots(
        1, len(names), figsize=(1.0 + 4.8 * len(names), 4.4), squeeze=False, layout="constrained"
    )
    handles: dict[str, Any] = {}
    for ax, workload in zip(axes[0], names, strict=True):
        for curve in figs.acceptance[workload]:
            positions = list(range(1, len(curve.acceptance_per_pos) + 1))
            (line,) = ax.plot(
                positions,
                curve.acceptance_per_pos,
                marker="o",
                color=figs.color(curve.label),
                lw=1.6,
            )
            handles.setdefault(curve.label, line)
            al = curve.mean_acceptance_length
            ax.annotate(
                f"N={curve.num_speculative_tokens}" + (f", AL {al:.2f}" if al else ""),
                (positions[-1], curve.acceptance_per_pos[-1]),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=8,
                color=figs.color(curve.label),
            )
        ax.set_title(workload, fontsize=10)
        ax.set_ylim(0, 1.05)
        longest = max(len(c.acceptance_per_pos) for c in figs.acceptance[workload])
        ax.set_xlim(0.7, longest + 0.9)  # room for the N / AL labels at the line ends
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("draft position i")
        ax.set_ylabel("acceptance a_i (accepted at i / drafts)")
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"{figs.title}: acceptance per position", fontsize=12)
    keep = [k for k in figs.labels if k in handles]
    note = (
        "each method at its largest measured N, pooled over repeats and concurrency levels; "
        "AL = mean acceptance length (1 + accepted / drafts)"
    )
    _legend(fig, [handles[k] for k in keep], keep, note)
    return fig


def _label_points(ax: Any, labels: list[tuple[int, float, str, str]]) -> None:
    """Label points without overlap: at each x, labels are stacked upwards at least one text
    height (~7% of the y range) apart, starting at their point."""
    if not labels:
        return
    ys = [y for _, y, _, _ in labels] + [1.0]
    gap = 0.07 * (max(ys) - min(ys) or 1.0)
    for x in sorted({x for x, _, _, _ in labels}):
        placed = -float("inf")
        for _, y, text, color in sorted((lb for lb in labels if lb[0] == x), key=lambda t: t[1]):
            at = max(y, placed + gap)
            placed = at
            ax.annotate(
                text,
                (x, y),
                xytext=(x * 1.06, at + gap * 0.3),
                textcoords="data",
                fontsize=8,
                color=color,
            )


def speedup_figure(figs: Figures) -> Any:
    """Each method's best speedup (over N) vs concurrency, one panel per workload."""
    plt = _pyplot()

    names = [w for w in figs.workloads if figs.speedup.get(w)]
    fig, axes = plt.subplots(
        1, len(names), figsize=(1.0 + 4.8 * len(names), 4.4), squeeze=False, layout="constrained"
    )
    handles: dict[str, Any] = {}
    for ax, workload in zip(axes[0], names, strict=True):
        labels: list[tuple[int, float, str, str]] = []
        for label, points in figs.speedup[workload].items():
            xs = [p.concurrency for p in points]
            ys = [p.speedup for p in points]
            (line,) = ax.plot(xs, ys, marker="o", color=figs.color(label), lw=1.6)
            handles.setdefault(label, line)
            labels += [
                (p.concurrency, p.speedup, f"N={p.num_speculative_tokens}", figs.color(label))
                for p in points
            ]
        _label_points(ax, labels)
        ax.axhline(1.0, color=BASELINE_COLOR, ls="--", lw=1.3)
        if len(figs.concurrencies) > 1:
            ax.set_xscale("log", base=2)
        ax.set_xticks(figs.concurrencies, [str(c) for c in figs.concurrencies])
        ax.minorticks_off()
        ax.margins(x=0.12, y=0.15)  # room for the N labels
        ax.set_title(workload, fontsize=10)
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel("speedup vs off (×)")
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"{figs.title}: best speedup per method vs concurrency", fontsize=12)
    keep = [k for k in figs.labels if k in handles]
    note = (
        "each point: the method's best N at that concurrency (labelled); "
        f"dashed line: {OFF_PROSE} = 1×"
    )
    _legend(fig, [handles[k] for k in keep], keep, note)
    return fig
