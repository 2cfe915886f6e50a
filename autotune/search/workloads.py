"""The workloads a study's trial jobs measure, prepared once per run by the tuner
(:class:`autotune.search.tuner.Tuner`) and handed to every job."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.engine._base import PreparedWorkload
from autotune.errors import SpecError
from autotune.spec.loader import ResolvedStudy


def prepare_workloads(
    study: ResolvedStudy, prepare: Callable[..., Any] | None, study_name: str
) -> list[PreparedWorkload]:
    """The study's workloads as a trial job measures them: a replay's are named, digested by
    its landscape and hold no prompts; a real study's are prepared by ``prepare`` (default
    :func:`autotune.datasets.prepare`), and with ``context_lengths`` its context buckets are
    built again and checked against the ones ``study create`` stored (study ``study_name``)."""
    if study.landscape is not None:
        from autotune.engine.readers.landscape import digest

        d = digest(Path(study.landscape))
        return [
            PreparedWorkload(name=w, digest=f"landscape:{d}:{w}", prompts=())
            for w in study.spec.workloads
        ]
    if prepare is None:
        from autotune.datasets import prepare as prepare_fn

        prepare = prepare_fn
    if not study.spec.context_lengths:
        return [prepare(*study.measured_workload(name)) for name in study.workloads]
    from autotune.datasets.context import load_target_tokenizer, prepare_measured

    tokenizer = load_target_tokenizer(study)
    out = []
    for name in study.measured_names():
        prepared, _ = prepare_measured(study, name, tokenizer)
        built = study.context_buckets.get(name)
        if built is not None and built.digest != prepared.digest:
            raise SpecError(
                f"context bucket {name}'s prompts differ from the ones built at study "
                "create (the workload's source or the target's tokenizer changed); create "
                "the study again (autotune study create FILE --replace)",
                source=study_name,
                field="context_lengths",
            )
        out.append(prepared)
    return out
