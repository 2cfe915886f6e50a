"""Published vs measured acceptance length: the catalog's cited curves for a study's model beside
what the study measured, per method and N. A publication is a prior (it orders the search's
first batch), never a measurement; the report shows both so the difference reads off it."""

from __future__ import annotations

import html
import math
import statistics
from dataclasses import dataclass
from typing import Any

import pandas as pd

from autotune.report.frames import latest_prompt_sets
from autotune.spec.catalog import AcceptanceCurve, acceptance_curves
from autotune.tables import Column, TextTable


@dataclass(frozen=True)
class AcceptanceRow:
    """One (method, N): each published curve's AL there and the study's median AL per workload."""

    method: str
    num_speculative_tokens: int
    published: tuple[float | None, ...]
    """One per curve of the method, in catalog order (None: the curve has no point at N)."""
    measured: tuple[float | None, ...]
    """One per workload of the comparison (None: not measured at this N there)."""


@dataclass(frozen=True)
class AcceptanceComparison:
    """Published vs measured acceptance length for one study (its model's curved methods)."""

    model: str
    curves: dict[str, tuple[AcceptanceCurve, ...]]
    workloads: tuple[str, ...]
    rows: tuple[AcceptanceRow, ...]

    def legend(self) -> list[str]:
        """One line per curve: its number, what it measured, its citation."""
        out = []
        for method, curves in self.curves.items():
            for i, c in enumerate(curves, 1):
                what = ", ".join(p for p in (c.workload or c.dataset, c.condition) if p)
                out.append(f"{method} published {i}: {what}; {c.measured}; {c.citation()}")
        return out

    def table(self) -> TextTable:
        width = max(len(c) for c in self.curves.values())
        table = TextTable(
            [
                Column("method", "id"),
                Column("N", "number"),
                *(Column(f"published {i}", "number") for i in range(1, width + 1)),
                *(Column(f"measured {w}", "number") for w in self.workloads),
            ],
            caption="AL: mean acceptance length (1 + accepted drafts per step). published: "
            "the catalog's cited curves (priors that order the first batch, never "
            "measurements); measured: the study's median over levels and repeats",
            group=1,
        )
        for r in self.rows:
            pub = [*r.published, *([None] * (width - len(r.published)))]
            table.add_row(
                r.method, r.num_speculative_tokens, *(_al(v) for v in (*pub, *r.measured))
            )
        return table

    def as_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "curves": {
                m: [c.model_dump(mode="json") for c in curves] for m, curves in self.curves.items()
            },
            "rows": [
                {
                    "method": r.method,
                    "num_speculative_tokens": r.num_speculative_tokens,
                    "published": list(r.published),
                    "measured": dict(zip(self.workloads, r.measured, strict=True)),
                }
                for r in self.rows
            ],
        }

    def html(self) -> str:
        """The table and its legend as an HTML section."""
        table = self.table()
        ths = "".join(f"<th>{html.escape(c.name)}</th>" for c in table.columns)
        body = "".join(
            "<tr>"
            + "".join(
                (f'<td class="t">{html.escape(v)}</td>' if i == 0 else f"<td>{html.escape(v)}</td>")
                for i, v in enumerate(row)
            )
            + "</tr>"
            for row in table.rows
        )
        notes = "".join(f'<p class="note">{html.escape(line)}</p>' for line in self.legend())
        return (
            '<h2 id="published">Published vs measured acceptance length</h2>'
            f'<div class="scroll"><table><thead><tr>{ths}</tr></thead><tbody>{body}'
            f'</tbody></table></div><p class="note">{html.escape(table.caption or "")}</p>' + notes
        )


def acceptance_comparison(df: pd.DataFrame) -> AcceptanceComparison | None:
    """The comparison for a measurements frame (``df.attrs["model"]``: the study's alias or
    HF id); None when the catalog holds no curve for the model. Measured ALs are the median
    of ``mean_acceptance_length`` over the newest prompt set's rows of each workload (every
    level and repeat, every draft and parameter set of the method)."""
    model = str(df.attrs.get("model") or (df["model"].iloc[0] if len(df) else ""))
    found = acceptance_curves(model)
    if not found:
        return None
    current = latest_prompt_sets(df) if len(df) else df
    workloads = tuple(sorted(str(w) for w in set(current["workload"]))) if len(df) else ()
    rows = []
    for method, curves in found.items():
        mine = current[current["method"] == method] if len(df) else current
        ns = {n for c in curves for n in c.acceptance_length_by_n}
        ns |= {int(n) for n in mine["num_speculative_tokens"]} if len(mine) else set()
        for n in sorted(ns):
            measured = []
            for w in workloads:
                values = mine[(mine["workload"] == w) & (mine["num_speculative_tokens"] == n)]
                al = [float(v) for v in values["mean_acceptance_length"] if not _missing(v)]
                measured.append(statistics.median(al) if al else None)
            rows.append(
                AcceptanceRow(
                    method,
                    n,
                    tuple(c.acceptance_length_by_n.get(n) for c in curves),
                    tuple(measured),
                )
            )
    return AcceptanceComparison(
        model, {m: tuple(c) for m, c in found.items()}, workloads, tuple(rows)
    )


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _al(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
