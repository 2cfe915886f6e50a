"""``autotune verify``: the recommendation served by ``vllm serve`` and measured by ``vllm bench
serve``, compared with the study's in-process numbers (``compare`` is pure; ``server`` starts
the server and calls the benchmark client; ``run`` ties them to a study; ``remeasure`` is
``check --measure``).

The functions here are the entry points the CLI calls (``verify``, ``check``, ``report``).
``verify`` is a client of :mod:`autotune.api` (it asks the facade for the recommendation it
checks), so the facade never imports this package; submodules are imported where used, so
importing it imports neither vLLM nor SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.store import Store, StudyRecord


def verify(
    store: Store,
    model: str,
    workload: str,
    *,
    study: str | None = None,
    dsd: bool = False,
    table: str | None = None,
    tolerance_pct: float = 10.0,
    repeats: int = 1,
    workdir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Any:
    """Serve the recommendation (``dsd``: its Dynamic SD table; ``table``: the Dynamic SD config
    given as ``check --config`` takes one) with ``vllm serve``, measure
    it and its reference with ``vllm bench serve`` at each of the study's concurrency levels,
    store the comparison with the study and return it (``autotune.verify.compare.Verification``;
    ``.passed`` is False when a level's server-path speedup differs from the study's by more
    than ``tolerance_pct`` percent)."""
    from autotune.verify.run import verify as run_verify

    return run_verify(
        store,
        model,
        workload,
        study=study,
        dsd=dsd,
        table=table,
        tolerance=tolerance_pct / 100.0,
        repeats=repeats,
        workdir=workdir,
        progress=progress,
    )


def verifications(store: Store, study: StudyRecord, workload: str | None = None) -> list[Any]:
    """The newest stored verification per (workload, mode) of a study, as
    ``(created_at, Verification)`` pairs (shown by ``report`` and ``check``)."""
    from autotune.verify.run import latest

    return latest(store, study, workload)


def verification_lines(
    store: Store, study: StudyRecord | str, workload: str | None = None
) -> list[str]:
    """One line per stored verification (newest per workload and mode), for ``report``/``check``."""
    from autotune.verify.compare import summary_line

    record = store.get_study(study) if isinstance(study, str) else study
    return [
        summary_line(v, f"{when:%Y-%m-%d %H:%M}")
        for when, v in verifications(store, record, workload)
    ] + check_history_lines(store, record, workload)


def dsd_lines(store: Store, study: StudyRecord | str, workload: str) -> list[str]:
    """What the newest stored ``verify --dsd`` of (study, workload) says of the table against
    true off (``recommend --format dsd`` prints it): the table, or routing by load."""
    from autotune.verify.compare import dsd_line

    record = store.get_study(study) if isinstance(study, str) else study
    return [
        f"{line} (verify --dsd on {when:%Y-%m-%d %H:%M})"
        for when, v in verifications(store, record, workload)
        if v.mode == "dsd" and (line := dsd_line(v)) is not None
    ]


def check_history_lines(store: Store, study: StudyRecord, workload: str | None = None) -> list[str]:
    """One line per stored ``check --measure`` of a study, oldest first: its history across
    vLLM versions (shown by ``report`` and ``check``)."""
    from autotune.recommend.measured import history_line
    from autotune.verify.remeasure import history

    return [
        history_line(f"{when:%Y-%m-%d %H:%M}", data)
        for when, data in history(store, study, workload)
    ]


def check_measured(
    store: Store,
    model: str,
    workload: str,
    deployed: dict[str, Any] | None,
    *,
    study: str | None = None,
    concurrency: int | None = None,
    tolerance_pct: float = 1.0,
    acceptance_tolerance_pct: float = 5.0,
    speedup_tolerance_pct: float | None = None,
    acceptance_only: bool = False,
    max_pairs: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> Any:
    """``check --measure``: start the deployed config (and the baseline, unless
    ``acceptance_only``) on the study's prompts and protocol on the installed vLLM, compare its
    acceptance (exactly at temperature 0, by interval above it, within
    ``acceptance_tolerance_pct``) and its speedup (interleaved target/baseline pairs, judged by
    the shared rule against the study's, at most ``max_pairs`` per level) with the study's,
    store the result with its vLLM version and return it
    (``autotune.recommend.measured.MeasuredCheck``; ``.outcome``: passed, failed, undecided)."""
    from autotune.verify.remeasure import DEFAULT_MAX_PAIRS
    from autotune.verify.remeasure import check_measured as run_check

    return run_check(
        store,
        model,
        workload,
        deployed,
        study=study,
        concurrency=concurrency,
        tolerance_pct=tolerance_pct,
        acceptance_tolerance=acceptance_tolerance_pct / 100.0,
        speedup_tolerance_pct=speedup_tolerance_pct,
        acceptance_only=acceptance_only,
        max_pairs=DEFAULT_MAX_PAIRS if max_pairs is None else max_pairs,
        progress=progress,
    )
