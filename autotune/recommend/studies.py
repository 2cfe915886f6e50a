"""Which study answers a question and how much of it was measured: the study `recommend` and
`check` answer from (finished first, else the newest partial one, with its coverage), the
context-length buckets measured, and what to ask a study next (:class:`NextSteps`, the value the
CLI's ``next:`` hints are rendered from).

The planned space a coverage counts against is read from the study's stored resolved spec
(:func:`autotune.spec.options.planned_configs`): no caller passes it in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.errors import NoResultError, NotFoundError
from autotune.spec.loader import ResolvedStudy
from autotune.spec.options import planned_configs

if TYPE_CHECKING:
    from autotune.spec.context import BucketPick
    from autotune.store import MeasurementRecord, Store, StudyRecord

FINISHED = "done"
"""The only status of a study whose strategy finished (space exhausted or nothing can beat the
best). Budget-stopped studies read ``stopped: budget`` / ``stopped: --max-configs``,
interrupted ones ``interrupted``; a killed run stays ``running``."""


@dataclass(frozen=True)
class Coverage:
    """How much of a study's search space was measured."""

    measured: int
    """Engine configs that finished (completed or failed)."""
    planned: int
    """Engine configs in the study's search space."""
    status: str

    @property
    def exhausted(self) -> bool:
        return self.status == FINISHED or self.measured >= self.planned

    def line(self, study: str) -> str:
        return (
            f"study {study!r} is {self.status}: {self.measured} of the {self.planned} configs "
            f"its search planned were measured; the answer may change when it finishes "
            f"(autotune study resume {study})"
        )


def coverage(store: Store, record: StudyRecord) -> Coverage:
    """Finished configs vs the configs the study's search space planned (its stored spec's)."""
    resolved = ResolvedStudy.from_json(record.resolved_json)
    # Distinct configs: the drift check's second baseline run is the same config.
    from autotune.store import FINISHED_STATES

    measured = len({t.config_key for t in store.trials(record) if t.state in FINISHED_STATES})
    return Coverage(measured=measured, planned=planned_configs(resolved), status=record.status)


@dataclass(frozen=True)
class Selected:
    """The study an answer comes from, and why, when it is not a finished one."""

    study: StudyRecord
    rows: Sequence[MeasurementRecord]
    notes: tuple[str, ...]
    """Lines for stderr: which partial study is used and how much of it was measured."""
    coverage: Coverage | None
    """None for a finished study (status ``done``)."""


def select_study(store: Store, model: str, workload: str, study: str | None) -> Selected:
    """The study `recommend` and `check` answer from.

    ``study`` picks one explicitly. Otherwise, among the studies of ``model`` that measured
    ``workload``: the finished one (status ``done``) with the newest measurement; when none is
    finished, the partial one with the newest measurement, with a note saying so. Either way, a
    study whose search space was not exhausted gets a note with its coverage.
    """
    studies = [
        s
        for s in store.list_studies()
        if (study is None or s.name == study) and model in (s.model_alias, s.model)
    ]
    if study is not None and not studies:
        raise NotFoundError(f"no study named {study!r} for model {model!r}")
    candidates = []
    for s in studies:
        rows = store.measurements(study=s.name, workload=workload)
        if rows:
            candidates.append((s.status == FINISHED, max(r.created_at for r in rows), s, rows))
    if not candidates:
        raise NoResultError(
            f"nothing measured for model {model!r} and workload {workload!r} yet; "
            f"create and run a study first (autotune study create / autotune study run)"
        )
    finished, _, record, rows = max(candidates, key=lambda c: (c[0], c[1]))
    notes: list[str] = []
    if study is None and not finished:
        notes.append(
            f"no finished study of {model} measured {workload}; answering from the partial "
            f"study {record.name!r} (status {record.status}), the one measured most recently"
        )
    # A finished study's strategy ended by itself; only a partial one needs its coverage.
    cov = None if record.status == FINISHED else coverage(store, record)
    if cov is not None and not cov.exhausted:
        notes.append(cov.line(record.name))
    return Selected(record, rows, tuple(notes), cov)


def measured_buckets(
    store: Store, model: str, workload: str, study: str | None = None
) -> dict[int, str]:
    """The context-length buckets (``WORKLOAD@ctxL``) of ``workload`` measured for ``model``
    (in ``study`` only, when given): context length -> measured workload name."""
    from autotune.spec.context import buckets_of

    return buckets_of(workload, measured_workload_names(store, model, study))


def measured_workload_names(store: Store, model: str, study: str | None = None) -> set[str]:
    """Every workload name measured for ``model`` (in ``study`` only, when given)."""
    names: set[str] = set()
    for s in store.list_studies():
        if (study is None or s.name == study) and model in (s.model_alias, s.model):
            names.update(r.workload for r in store.measurements(study=s.name))
    return names


def per_context_only(store: Store, model: str, workload: str, study: str | None = None) -> str:
    """Why a question about ``workload`` without ``--context`` has no single answer ("" when it
    has one): it was measured per context-length bucket only."""
    from autotune.spec.context import buckets_of

    names = measured_workload_names(store, model, study)
    found = buckets_of(workload, names)
    if not found or workload in names:
        return ""
    return (
        f"workload {workload!r} of {model} was measured per context length only (buckets of "
        f"{', '.join(map(str, found))} prompt tokens): give --context L (the prompt tokens of "
        "the requests to answer for), or --format dsd for one table per bucket"
    )


def context_bucket(
    store: Store, model: str, workload: str, context: int, study: str | None = None
) -> BucketPick:
    """The measured bucket that answers for requests of ``context`` prompt tokens
    (``autotune.spec.context.BucketPick``): the smallest at or above it, else the largest."""
    from autotune.spec.context import pick_bucket

    found = measured_buckets(store, model, workload, study)
    pick = pick_bucket(workload, context, found.values())
    if pick is None:
        raise NoResultError(
            f"no context-length bucket of workload {workload!r} was measured for model "
            f"{model!r}; measure some with context_lengths: [...] in a study file, or drop "
            "--context"
        )
    return pick


@dataclass(frozen=True)
class Question:
    """One question worth asking a study after its run: a workload, at a context length."""

    workload: str
    """The workload as `recommend --workload` takes it (a bucket's base workload)."""
    context: int | None
    """The ``--context`` to ask at (a bucket's length, or the study's longest); None: none."""


@dataclass(frozen=True)
class NextSteps:
    """What to look at after a study run: its report, and its answer for every workload."""

    study: str
    model: str
    """The model as `recommend --model` takes it (the catalog alias, else the HF id)."""
    questions: tuple[Question, ...]
    per_bucket: tuple[str, ...]
    """Workloads measured per context length (one DSD table per bucket); empty without
    ``context_lengths``."""


def next_steps(record: StudyRecord) -> NextSteps:
    """The questions to ask ``record`` next (``autotune.cli._hints`` renders them as commands
    naming the study, so they answer from this one and not from whichever study is newest)."""
    from autotune.spec.context import split_bucket

    resolved = ResolvedStudy.from_json(record.resolved_json)
    lengths = resolved.spec.context_lengths if resolved.landscape is None else None
    questions = []
    for w in resolved.spec.workloads:
        base, length = split_bucket(w)  # a replayed landscape's bucket: ask by --context
        questions.append(Question(base, length or (lengths[-1] if lengths else None)))
    return NextSteps(
        study=record.name,
        model=record.model_alias or record.model,
        questions=tuple(questions),
        per_bucket=tuple(resolved.spec.workloads) if lengths else (),
    )
