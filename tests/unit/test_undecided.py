"""Undecided cells get measured (issue #31 item 3, ``autotune.search.strategy.undecided_cell``
with ``autotune.evidence.decide.verdict_of_runs``): where a level's two best configs are neither within 1 % nor
apart at 95 %, the engine of the one measured last takes more repeats there (sequential stopping)
until the two are decided, within ``max_repeats`` and, on a replay, the recorded repeats; a
decided level takes none. Through the real tuner loop, the replay engine and a SQLite store."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from autotune import api
from autotune.evidence.decide import verdict_of_runs as verdict
from autotune.store import Store
from autotune.testing.landscapes import write_rows
from autotune.testing.studies import ngram, replay_study

# Ten recorded repeats a cell (the test's own numbers). At c=1 n-gram N=1 is 10 % faster than
# the baseline with ±5 % noise: three repeats each leave the 95 % interval of the ratio over 1
# (undecided), more settle it. At c=4 it is 20 % faster with ±0.3 %: decided at three repeats.
C1_OFF = (100, 95, 105, 98, 102, 97, 103, 99, 101, 100)
C1_N1 = (110, 104, 116, 108, 112, 107, 113, 109, 111, 110)
C4_OFF = (300, 301, 299, 300.5, 299.5, 300, 301, 299, 300, 300.5)
C4_N1 = (360, 361, 359, 360.5, 359.5, 360, 361, 359, 360, 360.5)
ROWS = [
    ("none", 0, 1, C1_OFF, ""),
    ("none", 0, 4, C4_OFF, ""),
    ("ngram", 1, 1, C1_N1, "0.6"),
    ("ngram", 1, 4, C4_N1, "0.6"),
]


def _run(tmp_path: Path, sampler: str, **measurement: object) -> dict[tuple[int, int], list[float]]:
    land = write_rows(tmp_path / "l.csv", ROWS)
    store = Store(str(tmp_path / "t.db"))
    data = replay_study(land, sampler, repeats=3, methods=[ngram(1, 1)])
    data["measurement"] = {"remeasure_noisy": False, **measurement}
    api.create_study(store, data=data, source=str(land))
    api.run_study(store, "replayed")
    by: dict[tuple[int, int], list[float]] = defaultdict(list)
    for r in store.measurements(study="replayed"):
        by[(r.num_speculative_tokens, r.concurrency)].append(r.output_throughput_tok_s)
    return by


@pytest.mark.parametrize("sampler", ["model", "grid"])
def test_an_undecided_level_is_measured_until_decided(tmp_path: Path, sampler: str) -> None:
    by = _run(tmp_path, sampler)
    # The first engine (off under the grid; under the model, ngram N=1, ahead of off) had
    # nothing to compare with then; the second one's warm engine takes the extra repeats.
    first, second = ((0, 1), (1, 1)) if sampler == "grid" else ((1, 1), (0, 1))
    assert len(by[first]) == 3
    extra = len(by[second])
    assert 3 < extra <= 9  # more repeats of the undecided level, within 3 x repeats
    assert len(set(by[second])) == extra  # each a distinct recorded repeat
    assert verdict(by[second][:3], by[first]) == "undecided"  # why it went on
    if sampler == "grid":
        assert verdict(by[second], by[first]) == "decided"  # where it stopped
        assert verdict(by[second][:-1], by[first]) == "undecided"  # and not one repeat later
    else:
        # Off's repeats alone cannot narrow an interval that ngram's three runs keep wide: the
        # level stops at the cap, still undecided (the answer says so).
        assert extra == 9 and verdict(by[second], by[first]) == "undecided"
    assert len(by[(1, 4)]) == 3  # decided at once: no extra repeat
    # Off trails ngram by 17 % at c = 4: the grid repeats it anyway, the model screens it.
    assert len(by[(0, 4)]) == (3 if sampler == "grid" else 1)


def test_max_repeats_caps_the_sequential_stopping(tmp_path: Path) -> None:
    by = _run(tmp_path, "grid", max_repeats=4)
    assert len(by[(1, 1)]) == 4


def test_the_verdict_by_hand() -> None:
    assert verdict([100, 100.5, 99.5], [100.5, 101, 100]) == "tie"  # within 1 %
    assert verdict([120, 121, 119], [100, 101, 99]) == "decided"  # 20 % apart, ±1 %
    assert verdict(list(C1_N1[:3]), list(C1_OFF[:3])) == "undecided"  # 10 % apart, ±5 %
    assert verdict([110, 110], [100, 100]) == "decided"  # no measured noise: the margin stands
