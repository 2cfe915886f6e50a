"""Landscape builders for tests: hand-chosen sweeps written through the engine's own writer
(:func:`autotune.engine.readers.landscape.write_landscape`), so a test landscape is always one the
reader accepts and no test carries a CSV writer of its own.

A sweep is given as rows, one per (config, level): ``(method, N, concurrency, tok/s per
repeat, acceptance per position)``, optionally followed by ``engine_start_s`` and
``measure_s``; the acceptance is written as the file's column is (``"0.6;0.4"``, empty for the
baseline) or as a sequence of floats. The mean acceptance length is the counters' arithmetic, ``1 + sum(a_i)``; the
baseline is ``("none", 0, ...)`` with no acceptance. The numbers are the test's own choice,
never a measurement: a file written here replays, it does not report.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from autotune.engine.readers.landscape import LandscapePoint, write_landscape

Row = tuple[Any, ...]
"""``(method, N, concurrency, tok/s per repeat, acceptance per position[, engine_start_s,
measure_s])``."""

NGRAM_TWO_LEVELS: list[Row] = [
    ("none", 0, 1, (100, 101), ""),
    ("none", 0, 4, (300, 302), ""),
    ("ngram", 1, 1, (150, 151), "0.6"),
    ("ngram", 1, 4, (330, 331), "0.6"),
    ("ngram", 2, 1, (170, 171), "0.6;0.4"),
    ("ngram", 2, 4, (310, 312), "0.6;0.4"),
]
"""Baseline and n-gram N=1, 2 at concurrency 1 and 4, two repeats each: N=2 wins at 1, N=1
at 4 (the tuner's and the recommendation's small worked example)."""

NGRAM1_CLEAR: list[Row] = [
    ("none", 0, 1, (100, 101), ""),
    ("none", 0, 4, (300, 302), ""),
    ("ngram", 1, 1, (190, 191), "0.6"),
    ("ngram", 1, 4, (390, 392), "0.6"),
    ("ngram", 2, 1, (150, 151), "0.6;0.4"),
    ("ngram", 2, 4, (340, 341), "0.6;0.4"),
]
"""The same configs where n-gram N=1 wins both levels by far more than the ~1% spreads."""


def point(
    method: str,
    n: int,
    concurrency: int,
    tok_s: float,
    *,
    repeat: int = 0,
    acceptance: Sequence[float] | str = (),
    model: str = "org/tiny",
    workload: str = "code",
    draft: str | None = None,
    engine_start_s: float = 10.0,
    measure_s: float = 2.0,
    params: dict[str, Any] | None = None,
) -> LandscapePoint:
    """One recorded point; the mean acceptance length follows from ``acceptance``."""
    if isinstance(acceptance, str):
        acceptance = [float(a) for a in acceptance.split(";") if a.strip()]
    acc = tuple(float(a) for a in acceptance)
    return LandscapePoint(
        model=model,
        workload=workload,
        method=method,
        draft=draft or None,
        num_speculative_tokens=n,
        concurrency=concurrency,
        repeat=repeat,
        output_throughput_tok_s=float(tok_s),
        mean_acceptance_length=1 + sum(acc) if n else None,
        acceptance_per_pos=acc,
        engine_start_s=engine_start_s,
        measure_s=measure_s,
        params=tuple(sorted((params or {}).items())),
    )


def sweep(
    rows: Iterable[Row],
    *,
    model: str = "org/tiny",
    workload: str = "code",
    draft: str | None = None,
    engine_start_s: float = 10.0,
    measure_s: float = 2.0,
) -> list[LandscapePoint]:
    """The points of ``rows`` (see the module docstring), one per repeat."""
    out = []
    for row in rows:
        method, n, concurrency, tputs, acceptance = row[:5]
        start, measure = row[5:7] if len(row) >= 7 else (engine_start_s, measure_s)
        for repeat, tput in enumerate(tputs):
            out.append(
                point(
                    method,
                    n,
                    concurrency,
                    tput,
                    repeat=repeat,
                    acceptance=acceptance,
                    model=model,
                    workload=workload,
                    draft=draft if n else None,
                    engine_start_s=start,
                    measure_s=measure,
                )
            )
    return out


def write(path: Path, points: Iterable[LandscapePoint]) -> Path:
    """Write ``points`` as a landscape file (the engine's writer); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_landscape(path, points)
    return path


def write_rows(path: Path, rows: Iterable[Row] = NGRAM_TWO_LEVELS, **common: Any) -> Path:
    """``write(path, sweep(rows, **common))``: the usual one-liner of a test."""
    return write(path, sweep(rows, **common))


# Every repeat records the same throughput, so medians are exact and MAD is 0: the check
# gate's tolerance boundaries are hand-computed from these numbers (tests/unit/test_check.py).
GATE_TOK_S: dict[int, dict[tuple[str, int], float]] = {
    # concurrency 1: eagle3 N=3 scores highest, N=2 is within the 1% tie margin (recommended:
    # smaller N), N=4 is 0.6% below N=2; ngram trails.
    1: {("none", 0): 100.0, ("ngram", 1): 150.0, ("ngram", 2): 170.0, ("ngram", 3): 180.0,
        ("eagle3", 1): 160.0, ("eagle3", 2): 199.0, ("eagle3", 3): 200.0, ("eagle3", 4): 197.8},
    # concurrency 8: nothing beats running without speculation.
    8: {("none", 0): 600.0, ("ngram", 1): 560.0, ("ngram", 2): 540.0, ("ngram", 3): 520.0,
        ("eagle3", 1): 585.0, ("eagle3", 2): 580.0, ("eagle3", 3): 550.0, ("eagle3", 4): 500.0},
}  # fmt: skip
GATE_ACCEPTANCE = {"ngram": (0.6, 0.4, 0.3), "eagle3": (0.8, 0.6, 0.5, 0.4)}


def gate_points() -> list[LandscapePoint]:
    """The ``tiny`` model's n-gram vs EAGLE-3 (draft ``tiny:eagle3``) sweep at concurrency 1
    and 8, three identical repeats per cell (see :data:`GATE_TOK_S`)."""
    return [
        point(
            method,
            n,
            c,
            tput,
            repeat=r,
            acceptance=GATE_ACCEPTANCE.get(method, ())[:n],
            model="tiny",
            draft="tiny:eagle3" if method == "eagle3" else None,
            engine_start_s=20.0,
            measure_s=3.0,
        )
        for c, by_config in GATE_TOK_S.items()
        for (method, n), tput in by_config.items()
        for r in range(3)
    ]


def write_gate(path: Path) -> Path:
    """Write :func:`gate_points` to ``path``."""
    return write(path, gate_points())
