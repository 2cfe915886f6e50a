"""The replay engine (autotune.engine.replay) on the recorded knob sweep: replayed repeats are
the recorded ones, drawn without replacement, and never one twice (issue #31 item 4): past a
cell's recorded repeats the engine refuses, the search asks for none, and no copy is stored as
a repeat, through the real tuner loop and store."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from autotune import api
from autotune.engine._base import EngineConfig, MeasureSettings, PreparedWorkload
from autotune.engine.readers.landscape import read_landscape
from autotune.engine.replay import ReplayEngine, recorded_repeats
from autotune.errors import EngineError
from autotune.store import Store
from autotune.testing.landscapes import write_rows
from autotune.testing.studies import ngram, replay_study

REPO = Path(__file__).resolve().parents[2]
KNOBS = REPO / "bench" / "landscapes" / "cpu-tiny-knobs.csv"


def _spread(values: list[float]) -> float:
    import statistics

    return (max(values) - min(values)) / statistics.median(values)


def test_k_replayed_repeats_of_a_cell_are_its_k_recorded_ones() -> None:
    points = read_landscape(KNOBS)
    recorded: dict[tuple, list[float]] = defaultdict(list)
    for p in points:
        recorded[(p.config, p.workload, p.concurrency)].append(p.output_throughput_tok_s)
    engine = ReplayEngine(KNOBS, seed=7)
    settings = MeasureSettings()
    spread_seen = 0
    for (config, workload, concurrency), values in sorted(recorded.items(), key=str):
        method, draft, n, knobs = config
        engine.start(
            EngineConfig(
                model=points[0].model,
                method=method,
                num_speculative_tokens=n,
                draft=draft,
                method_params=json.loads(knobs) if knobs else {},
            )
        )
        prepared = PreparedWorkload(workload, engine.workload_digest(workload), ())
        k = len(values)
        got = [
            engine.measure(prepared, concurrency, r, settings).output_throughput_tok_s
            for r in range(k)
        ]
        assert sorted(got) == sorted(values)
        assert _spread(got) == _spread(values)
        # One more would be a copy of a recorded repeat: refused, not served.
        with pytest.raises(EngineError, match=f"recorded {k} repeat"):
            engine.measure(prepared, concurrency, k, settings)
        spread_seen += _spread(values) > 0.1
        engine.stop()
    # The check means something: cells recorded with a wide spread replay with it.
    assert spread_seen >= 3


def test_an_engine_told_of_earlier_draws_serves_only_the_rest(tmp_path: Path) -> None:
    """A config started again (a drift check's second baseline, another driver, another Ray
    actor) continues where the config's earlier draws stopped: one permutation in all."""
    land = write_rows(tmp_path / "l.csv", [("none", 0, 1, (100, 101, 102, 103), "")])
    config = EngineConfig(model="org/tiny", method="none", num_speculative_tokens=0)
    prepared = PreparedWorkload("code", "d", ())
    settings = MeasureSettings()

    def draws(engine: ReplayEngine, count: int) -> list[float]:
        return [
            engine.measure(prepared, 1, r, settings).output_throughput_tok_s for r in range(count)
        ]

    one = ReplayEngine(land, seed=3)
    one.start(config)
    first = draws(one, 2)
    one.start(config)  # a new start forgets its own draws: the job tells it the earlier ones
    again = ReplayEngine(land, seed=3)  # another driver
    again.start(config)
    earlier = [one.measure(prepared, 1, r, settings) for r in range(2)]
    assert [m.output_throughput_tok_s for m in earlier] == first
    again.resume_after(earlier)
    rest = draws(again, 2)
    assert sorted(first + rest) == [100, 101, 102, 103]
    with pytest.raises(EngineError):
        draws(again, 1)
    assert recorded_repeats(land, config) == {("code", 1): 4}


# Two recorded repeats a cell, 10 % apart: the spread rule would re-run every level.
WIDE = [
    ("none", 0, 1, (100, 110), ""),
    ("none", 0, 4, (300, 330), ""),
    ("ngram", 1, 1, (150, 165), "0.6"),
    ("ngram", 1, 4, (330, 363), "0.6"),
    ("ngram", 2, 1, (170, 187), "0.6;0.4"),
    ("ngram", 2, 4, (310, 341), "0.6;0.4"),
]


@pytest.mark.parametrize("sampler", ["model", "grid"])
@pytest.mark.parametrize("repeats", [2, 4])
def test_a_replayed_study_stores_each_recorded_repeat_at_most_once(
    tmp_path: Path, sampler: str, repeats: int
) -> None:
    """Before: 10 recorded repeats became ``repeats 20`` and 3 became ``reps 6`` (each copy
    counted). Now every stored repeat of a (config, level) is a distinct recorded one, however
    many ``repeats`` or re-runs the study asks, and the run says what it cannot honour."""
    land = write_rows(tmp_path / "l.csv", WIDE)
    store = Store(str(tmp_path / "t.db"))
    data = replay_study(land, sampler, repeats=repeats, methods=[ngram(1, 2)])
    api.create_study(store, data=data, source=str(land))
    summary = api.run_study(store, "replayed")
    rows = store.measurements(study="replayed")
    by: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        by[(r.num_speculative_tokens, r.concurrency)].append(r.output_throughput_tok_s)
    recorded = {(n, c): sorted(t) for _, n, c, t, _ in WIDE}
    assert by and set(by) <= set(recorded)
    for cell, values in by.items():
        assert len(values) == len(set(values)) <= 2  # never a copy
        assert set(values) <= set(recorded[cell])
    if repeats > 2:
        assert "repeats 4 cannot be honoured at 6 of 6 recorded cells" in summary.replay_note
        assert "recorded 2 there" in summary.replay_note
    else:
        assert summary.replay_note == ""
    # The cell that the spread rule wanted again is complete with its two recorded repeats (the
    # first engine's: off under the grid, ngram N=2 under the model, whose first run there off
    # then trails beyond the screen).
    first = (0, 1) if sampler == "grid" else (2, 1)
    assert sorted(by[first]) == sorted(recorded[first])
