"""Run a study in steps (``study run --max-configs K``, then ``study resume``) and read what it
ended with, to compare with one uninterrupted run (issue #33 item 1): the unit tests do it on
SQLite, the contract suite on PostgreSQL too."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.spec.methods import config_id
from autotune.store import Store
from autotune.testing.landscapes import Row

CLOSE_EVERYWHERE: list[Row] = [
    ("none", 0, 1, (100, 102, 98, 101), ""),
    ("none", 0, 4, (300, 306, 294, 303), ""),
    ("ngram", 1, 1, (101, 103, 99, 100), "0.3"),
    ("ngram", 1, 4, (301, 305, 297, 300), "0.3"),
    ("ngram", 2, 1, (102, 100, 104, 99), "0.3;0.1"),
    ("ngram", 2, 4, (299, 304, 302, 296), "0.3;0.1"),
    ("ngram", 3, 1, (103, 99, 101, 102), "0.3;0.1;0.05"),
    ("ngram", 3, 4, (302, 298, 300, 305), "0.3;0.1;0.05"),
]
"""Every config within the noise of every other at both levels, four recorded repeats a cell
(the test's own numbers): a study of two repeats takes a close-call repeat on each engine
while its allowance (one per level) lasts. A driver that counted the allowance itself spent it
again after each resume: 20 and 19 measurements against 18 at ``--max-configs`` 2 and 3."""


@dataclass(frozen=True)
class Outcome:
    """What a study ended with: every stored measurement and every stored answer."""

    measurements: tuple[tuple[str, str, int, float], ...]
    """(config id, workload, concurrency, tok/s) of every measurement, sorted."""
    answers: tuple[tuple[str, int, str], ...]
    """(workload, concurrency, config id) of every stored recommendation, sorted."""

    @property
    def count(self) -> int:
        return len(self.measurements)


def outcome(store: Store, study: str) -> Outcome:
    rows = store.measurements(study=study)
    saved = store.recommendations(store.get_study(study))
    return Outcome(
        measurements=tuple(
            sorted(
                (
                    config_id(r.speculative_config),
                    r.workload,
                    r.concurrency,
                    r.output_throughput_tok_s,
                )
                for r in rows
            )
        ),
        answers=tuple(
            sorted((a.workload, a.concurrency, config_id(a.speculative_config)) for a in saved)
        ),
    )


def run_in_steps(url: str, data: dict[str, Any], source: str, steps: Sequence[int]) -> Outcome:
    """Create the study ``data`` in the empty store at ``url``, run it with ``--max-configs K``
    for each K of ``steps`` (none: one uninterrupted run), resume it to its end, and read its
    :class:`Outcome`."""
    from autotune import api

    store = Store(url)
    try:
        api.create_study(store, data=data, source=source)
        for k in steps:
            api.run_study(store, data["name"], max_configs=k)
        api.run_study(store, data["name"])
        assert store.get_study(data["name"]).status in ("done", "stopped: budget")
        return outcome(store, data["name"])
    finally:
        store.dispose()
