"""The replay engine (autotune.engine.replay) on the recorded knob sweep: replayed repeats are
the recorded ones, drawn without replacement."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from autotune.engine._base import EngineConfig, MeasureSettings, PreparedWorkload
from autotune.engine.landscape import read_landscape
from autotune.engine.replay import ReplayEngine

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
        # Two cycles: each is a permutation of the recorded repeats.
        for _ in range(2):
            got = [
                engine.measure(prepared, concurrency, r, settings).output_throughput_tok_s
                for r in range(k)
            ]
            assert sorted(got) == sorted(values)
            assert _spread(got) == _spread(values)
        spread_seen += _spread(values) > 0.1
        engine.stop()
    # The check means something: cells recorded with a wide spread replay with it.
    assert spread_seen >= 3
