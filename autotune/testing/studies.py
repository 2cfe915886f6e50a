"""Study builders for tests: the study files (as the dicts ``autotune study create`` reads)
that replay a test landscape, and the tiny real study the integration tests run on vLLM's CPU
build, plus a digest of a SQLite store for "nothing was written" checks.

Every builder returns a fresh dict, so a test may change it before creating the study.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import yaml


def ngram(lo: int = 1, hi: int = 2, **params: Any) -> dict[str, Any]:
    """The n-gram method entry of a study, N from ``lo`` to ``hi`` (knobs as ``params``)."""
    entry: dict[str, Any] = {"method": "ngram", "num_speculative_tokens": {"min": lo, "max": hi}}
    if params:
        entry["params"] = params
    return entry


def replay_study(
    landscape: Path | str,
    sampler: str = "grid",
    *,
    name: str = "replayed",
    model: str = "org/tiny",
    workloads: tuple[str, ...] = ("code",),
    concurrency: tuple[int, ...] = (1, 4),
    methods: list[dict[str, Any]] | None = None,
    repeats: int = 2,
    **extra: Any,
) -> dict[str, Any]:
    """A study replaying ``landscape`` (by default the shape of
    :data:`autotune.testing.landscapes.NGRAM_TWO_LEVELS`); ``extra`` keys are set as given."""
    data: dict[str, Any] = {
        "name": name,
        "model": {"name": model},
        "workloads": list(workloads),
        "concurrency": list(concurrency),
        "methods": methods if methods is not None else [ngram(1, 2)],
        "repeats": repeats,
        "sampler": sampler,
        "engine": {"kind": "replay", "landscape": str(landscape)},
    }
    data.update(extra)
    return data


TINY_MEASUREMENT: dict[str, Any] = {
    "max_prompts": 4,
    "max_tokens": 32,
    "warmup_requests": 1,
    "requests_per_concurrency": 2,
    "timeout_s": 300,
    "start_timeout_s": 600,
    # Exactly the runs the tests count: no sequential re-measures, no second baseline engine
    # (the protocol's own tests cover both on the replay backend).
    "remeasure_noisy": False,
    "drift_check": False,
}
"""The smallest measurement that still runs every level on a real engine (seconds per cell)."""


def tiny_real_study(
    name: str,
    methods: list[dict[str, Any]],
    concurrency: tuple[int, ...] = (1, 2),
    **extra: Any,
) -> dict[str, Any]:
    """A study of the ``tiny`` model on the real vLLM engine (CPU build): one repeat, the
    HumanEval-style ``code`` workload, :data:`TINY_MEASUREMENT`."""
    data: dict[str, Any] = {
        "name": name,
        "model": {"name": "tiny"},
        "workloads": ["code"],
        "concurrency": list(concurrency),
        "methods": methods,
        "repeats": 1,
        "sampler": "grid",
        "measurement": dict(TINY_MEASUREMENT),
    }
    data.update(extra)
    return data


def write_study(path: Path, data: dict[str, Any]) -> Path:
    """Write a study file (YAML) and return its path."""
    path.write_text(yaml.safe_dump(data))
    return path


def store_digest(path: Path) -> str | None:
    """A digest of every table's rows of a SQLite store (its WAL included), or None when the
    file does not exist: equal before and after a command means the command wrote nothing."""
    if not path.exists():
        return None
    h = hashlib.sha256()
    conn = sqlite3.connect(path)
    try:
        names = conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")
        for (name,) in names.fetchall():
            for row in conn.execute(f'SELECT * FROM "{name}" ORDER BY 1'):
                h.update(repr(tuple(row)).encode())
    finally:
        conn.close()
    return h.hexdigest()


GATE_STUDY = "gate"


def gate_study(landscape: Path | str, name: str = GATE_STUDY) -> dict[str, Any]:
    """The grid study replaying :func:`autotune.testing.landscapes.gate_points`."""
    return replay_study(
        landscape,
        name=name,
        model="tiny",
        concurrency=(1, 8),
        methods=[
            ngram(1, 3),
            {"method": "eagle3", "num_speculative_tokens": {"min": 1, "max": 4}},
        ],
        repeats=3,
    )
