"""``autotune.tables``: the plain form a pipe gets is bounded in width; numbers and ids whole."""

from __future__ import annotations

from autotune.tables import PIPE_WIDTH, Column, TextTable, is_cut, plain, tsv


def _table() -> TextTable:
    t = TextTable([Column("name", "id"), Column("tok/s", "number"), Column("data"), Column("note")])
    t.add_row("a-very-long-model-id/with-a-path", "1,918.5", "real: " + "x" * 80, "y" * 200)
    t.add_row("short", "12.0", "file", "z")
    return t


def test_a_pipe_gets_text_cut_to_the_width_and_every_number_and_id_whole() -> None:
    t = _table()
    out = plain(t, PIPE_WIDTH).splitlines()
    assert max(len(line) for line in out) <= PIPE_WIDTH
    assert out[1].startswith("a-very-long-model-id/with-a-path  1,918.5  real: xxx")
    assert out[1].count("…") == 2 and is_cut(t, PIPE_WIDTH)
    assert out[2].startswith("short") and "12.0" in out[2]
    # The uncut forms stay whole: no width given, and TSV for tools.
    assert "y" * 200 in plain(t) and "y" * 200 in tsv(t)


def test_a_table_that_fits_is_not_cut() -> None:
    t = TextTable([Column("name", "id"), Column("note")])
    t.add_row("a", "short note")
    assert plain(t, PIPE_WIDTH) == plain(t) and not is_cut(t, PIPE_WIDTH)


def test_text_is_never_cut_below_its_floor_even_when_ids_overflow() -> None:
    t = TextTable([Column("id", "id"), Column("description")])
    t.add_row("i" * 120, "d" * 50)
    line = plain(t, PIPE_WIDTH).splitlines()[1]
    assert line.startswith("i" * 120) and line.endswith("d" * 11 + "…")
