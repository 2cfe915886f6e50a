"""``autotune export --landscape`` (autotune.export.landscape): a study's measurements as a
landscape CSV that replays as the study was measured, its p99 latency columns included, so the
replay is chosen under an SLO too. The study here replays the recorded CPU sweep with p99s
(tests/data/tiny-cpu-slo-landscape.csv), so every latency in the store is a recorded one."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import api
from autotune.engine.readers.landscape import LATENCY_COLUMNS, read_landscape
from autotune.search.landscape_study import study_from_landscape
from autotune.store import Store

DATA = Path(__file__).resolve().parents[1] / "data" / "tiny-cpu-slo-landscape.csv"


def _cell(p: object) -> tuple[object, ...]:
    return tuple(
        getattr(p, k) for k in ("method", "num_speculative_tokens", "concurrency", "repeat")
    )


@pytest.fixture
def measured(tmp_path: Path) -> Store:
    store = Store(str(tmp_path / "t.db"))
    api.create_study(store, data=study_from_landscape(DATA, "slo"), source=str(DATA))
    api.run_study(store, "slo", replay_time_scale=0.0)
    return store


def test_the_exported_landscape_reads_back_with_the_measured_latencies(
    measured: Store, tmp_path: Path
) -> None:
    rows = measured.measurements(study="slo")
    assert rows and all(r.p99_tpot_ms is not None for r in rows)  # the recording has p99s
    out = tmp_path / "exported.csv"
    assert api.export_landscape(measured, "slo", out) == len(rows)
    header = out.read_text().splitlines()[0].split(",")
    assert [c for c in header if c in LATENCY_COLUMNS] == list(LATENCY_COLUMNS)
    back = {_cell(p): p for p in read_landscape(out)}
    stored = {_cell(r): r for r in rows}
    assert back.keys() == stored.keys()
    for cell, r in stored.items():
        for column in LATENCY_COLUMNS:
            assert getattr(back[cell], column) == pytest.approx(getattr(r, column), abs=5e-4)
    # and they are the recording's own numbers: the replay draws a cell's recorded repeats
    # in its own order (and the search measures what it chooses), so each exported p99 is one
    # of its cell's recorded ones: replayed, stored, exported, nothing invented
    recorded: dict[tuple[object, ...], set[float]] = {}
    for p in read_landscape(DATA):
        recorded.setdefault(_cell(p)[:3], set()).add(round(p.p99_itl_ms or -1, 3))
    assert all(round(p.p99_itl_ms or -1, 3) in recorded[_cell(p)[:3]] for p in back.values())


def test_the_exported_landscape_replays_under_the_slo(
    autotune, db_path: Path, measured: Store, tmp_path: Path
) -> None:
    """The exported file is a study of its own whose SLO answer is the original's."""
    out = tmp_path / "exported.csv"
    api.export_landscape(measured, "slo", out)
    flags = ("--model", "tiny:llama", "--workload", "code", "--concurrency", "8")
    slo = ("--slo-p99-tpot-ms", "12")
    original = autotune("--db", str(tmp_path / "t.db"), "recommend", *flags, *slo, db=False)
    assert original.exit_code == 0, original.stderr
    assert autotune("study", "create", "--landscape", str(out), "--name", "again").exit_code == 0
    assert autotune("study", "run", "again", "--replay-time-scale", "0", "-q").exit_code == 0
    replayed = autotune("recommend", *flags, *slo)
    assert replayed.exit_code == 0, replayed.stderr
    assert replayed.stdout == original.stdout


def test_a_study_without_latencies_writes_no_latency_columns(tmp_path: Path) -> None:
    land = tmp_path / "l.csv"
    land.write_text(
        "model,workload,method,draft,num_speculative_tokens,concurrency,repeat,"
        "output_throughput_tok_s,mean_acceptance_length,acceptance_per_pos,engine_start_s,"
        "measure_s\norg/tiny,code,none,,0,1,0,100,,,1,1\norg/tiny,code,ngram,,1,1,0,120,1.5,0.5,1,1\n"
    )
    store = Store(str(tmp_path / "t.db"))
    api.create_study(store, data=study_from_landscape(land, "plain"), source=str(land))
    api.run_study(store, "plain", replay_time_scale=0.0)
    out = tmp_path / "exported.csv"
    api.export_landscape(store, "plain", out)
    assert not set(out.read_text().splitlines()[0].split(",")) & set(LATENCY_COLUMNS)
    assert all(p.p99_tpot_ms is None for p in read_landscape(out))
