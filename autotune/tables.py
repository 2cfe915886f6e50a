"""Tables for people and pipelines: one data model, three renderings that never cut a number.

A :class:`TextTable` holds already formatted cells and says which columns hold numbers or ids.
``plain`` prints aligned columns (what a pipe or a log file gets: at most ``PIPE_WIDTH`` columns
wide, text cells cut with "…" to fit, numbers and ids never), ``tsv`` prints tab-separated values with every cell filled, and ``to_rich``
builds a rich Table for a terminal whose number and id columns never wrap; when even those do
not fit the terminal, :func:`fits` says so and the CLI prints the plain form instead of letting
rich cut cells with "…".

It imports nothing heavy, so listing commands stay fast; rich loads only for a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["text", "number", "id"]


@dataclass(frozen=True)
class Column:
    name: str
    kind: Kind = "text"
    """number and id cells are never wrapped or shortened; text cells may wrap on a terminal."""

    @property
    def whole(self) -> bool:
        return self.kind != "text"


@dataclass
class TextTable:
    columns: list[Column]
    rows: list[list[str]] = field(default_factory=list)
    title: str | None = None
    caption: str | None = None
    group: int = 0
    """The first ``group`` columns are shown once per run of equal values (blank below it) in
    the plain and rich forms; TSV repeats them so that every line stands alone."""
    styles: list[str | None] = field(default_factory=list)
    """A rich style per row (e.g. bold for the recommended config); ignored by plain and TSV."""

    def add_row(self, *cells: Any, style: str | None = None) -> None:
        self.rows.append(["" if c is None else str(c) for c in cells])
        self.styles.append(style)

    def _shown(self) -> list[list[str]]:
        """Rows with repeated leading group cells blanked, as people read them."""
        out: list[list[str]] = []
        prev: list[str] | None = None
        for row in self.rows:
            shown = list(row)
            if prev is not None and self.group and row[: self.group] == prev[: self.group]:
                for i in range(self.group):
                    shown[i] = ""
            out.append(shown)
            prev = row
        return out

    def _section_starts(self) -> set[int]:
        if not self.group:
            return set()
        return {
            i
            for i in range(1, len(self.rows))
            if self.rows[i][: self.group] != self.rows[i - 1][: self.group]
        }


PIPE_WIDTH = 100
"""How wide the plain form is in a pipe or a file: text columns are cut (with "…") to fit."""

MIN_TEXT_WIDTH = 12
"""A text column is never cut narrower than this (or its header)."""


def plain(table: TextTable, width: int | None = None) -> str:
    """Aligned columns, two spaces apart, numbers right-aligned. Number and id cells are never
    shortened; with ``width``, text cells are cut with "…" (widest column first, none below
    ``MIN_TEXT_WIDTH``) until a line fits, so a pipe gets a table of bounded width."""
    shown = table._shown()
    heads = [c.name for c in table.columns]
    widths = [max([len(h)] + [len(r[i]) for r in shown]) for i, h in enumerate(heads)]
    if width is not None:
        widths = _cut_widths(table, widths, width)

    def fit(cell: str, w: int) -> str:
        return cell if len(cell) <= w else cell[: w - 1].rstrip() + "…"

    def line(cells: list[str]) -> str:
        parts = [
            fit(cell, w).rjust(w) if col.kind == "number" else fit(cell, w).ljust(w)
            for cell, w, col in zip(cells, widths, table.columns, strict=True)
        ]
        return "  ".join(parts).rstrip()

    lines = []
    if table.title:
        lines.append(table.title)
    lines.append(line(heads))
    lines.extend(line(r) for r in shown)
    if table.caption:
        lines.append(table.caption)
    return "\n".join(lines)


def _cut_widths(table: TextTable, widths: list[int], width: int) -> list[int]:
    """Column widths with the text columns narrowed until a line is at most ``width``."""
    widths = list(widths)
    floor = [
        w if col.whole else min(w, max(MIN_TEXT_WIDTH, len(col.name)))
        for w, col in zip(widths, table.columns, strict=True)
    ]
    excess = sum(widths) + 2 * (len(widths) - 1) - width
    while excess > 0:  # the widest text column loses one character at a time: cut evenly
        cuttable = [i for i, w in enumerate(widths) if w > floor[i]]
        if not cuttable:
            break
        widths[max(cuttable, key=lambda j: widths[j])] -= 1
        excess -= 1
    return widths


def is_cut(table: TextTable, width: int) -> bool:
    """Whether ``plain(table, width)`` cuts a text cell."""
    return "…" in plain(table, width) and "…" not in plain(table)


def tsv(table: TextTable) -> str:
    """Tab-separated values with a header line; every cell filled, tabs/newlines replaced."""

    def clean(cell: str) -> str:
        return cell.replace("\t", " ").replace("\n", " ")

    lines = ["\t".join(clean(c.name) for c in table.columns)]
    lines.extend("\t".join(clean(c) for c in row) for row in table.rows)
    return "\n".join(lines)


_PAD = 1
"""Spaces rich puts on each side of a cell with ``padding=(0, 1)``."""


def required_width(table: TextTable) -> int:
    """The narrowest a rich rendering can be with every number and id whole and every text
    column at least as wide as its longest word."""
    shown = table._shown()
    total = 0
    for i, col in enumerate(table.columns):
        cells = [r[i] for r in shown]
        if col.whole:
            need = max([len(col.name)] + [len(c) for c in cells])
        else:
            words = [w for c in [col.name, *cells] for w in c.split()]
            need = max([1] + [len(w) for w in words])
        total += need + 2 * _PAD + 1
    return total


def fits(table: TextTable, width: int) -> bool:
    return required_width(table) <= width


def to_rich(table: TextTable) -> Any:
    """A rich Table: number and id columns ``no_wrap`` at full width, text columns fold."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    shown = table._shown()
    out = Table(
        box=box.SIMPLE_HEAD,
        padding=(0, _PAD),
        show_edge=False,
        title=table.title,
        title_justify="left",
        caption=table.caption,
        caption_justify="left",
    )
    for i, col in enumerate(table.columns):
        widest = max([len(col.name)] + [len(r[i]) for r in shown])
        if col.whole:
            out.add_column(
                col.name,
                justify="right" if col.kind == "number" else "left",
                no_wrap=True,
                min_width=widest,
            )
        else:
            out.add_column(col.name, overflow="fold")
    starts = table._section_starts()
    for i, (row, style) in enumerate(zip(shown, table.styles, strict=True)):
        if i in starts:
            out.add_section()
        # Cells are text, not markup: a config name such as ``ngram[min=3,max=5]`` must show.
        out.add_row(*(Text(c) for c in row), style=style)
    return out
