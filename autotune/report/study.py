"""What `autotune report` shows and writes for a study: the measurement and summary frames, the
files asked for, the coverage note of a partial study, the trade-off, drift and context-bucket
sections, and the lines on cells whose replies were mostly loops."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import NoResultError
from autotune.spec.loader import ResolvedStudy

if TYPE_CHECKING:
    import pandas as pd

    from autotune.evidence.cells import Drift
    from autotune.recommend.answer_value import Answer
    from autotune.report.context import BucketSection
    from autotune.store import Store


@dataclass(frozen=True)
class StudyReport:
    """What `autotune report` shows and wrote: the measurements, their summary, the files."""

    frame: pd.DataFrame
    """One row per measurement."""
    summary: pd.DataFrame
    """One row per config × cell."""
    written: list[Path]
    notes: tuple[str, ...]
    """Lines for stderr: how much of a partial study was measured."""
    trade_off: pd.DataFrame
    """Per level every config's tok/s vs p99 latencies, goodput, SLO and
    Pareto-front flags (:func:`autotune.report.tradeoff.trade_off_frame`; empty without
    latencies)."""
    slo_text: dict[str, str]
    """Workload -> the study's SLO for it, as text ("" where it sets none)."""
    drift: tuple[Drift, ...]
    """The baseline's drift per level (``autotune.evidence.cells.Drift``; the drift check)."""
    precision_pct: float
    """The study's ``measurement.precision_pct`` (the drift limit)."""
    buckets: tuple[BucketSection, ...]
    """One ``autotune.report.context.BucketSection`` per context-length bucket measured."""
    answers: tuple[Answer, ...] = ()
    """The study's answer per workload (:mod:`autotune.recommend.answer_value`): what
    `recommend --study` answers, rendered by the text, JSON and HTML report alike."""


def report_study(
    store: Store,
    name: str,
    *,
    html: Path | None = None,
    png_dir: Path | None = None,
    csv: Path | None = None,
    parquet: Path | None = None,
) -> StudyReport:
    """A study's measurements and summary frames, writing the files asked for; refuses (before
    writing anything) when Parquet support is missing or nothing was measured yet."""
    from autotune.report import (
        measurements_frame,
        plot_png,
        require_parquet,
        summary_frame,
        write_csv,
        write_html,
        write_parquet,
    )

    if parquet is not None:
        require_parquet()
    df = measurements_frame(store, name)
    if df.empty:
        raise NoResultError(
            f"study {name!r} in {store.shown_url} has no measurements yet (autotune study run {name})"
        )
    record = store.get_study(name)
    answers = study_answers(store, record.name, record.model, sorted(df["workload"].unique()))
    written: list[Path] = []
    if csv is not None:
        written.append(write_csv(df, csv))
    if parquet is not None:
        written.append(write_parquet(df, parquet))
    if png_dir is not None:
        written.extend(plot_png(df, png_dir))
    if html is not None:
        written.append(write_html(df, html, answers=answers))
    from autotune.recommend.studies import FINISHED, coverage

    cov = coverage(store, record) if record.status != FINISHED else None
    notes = () if cov is None or cov.exhausted else (cov.line(name),)
    from autotune.evidence.cells import baseline_drift
    from autotune.evidence.scores import DEFAULT_PRECISION_PCT
    from autotune.report.tradeoff import slo_of, trade_off_frame

    slo_text = {str(w): slo_of(df, str(w)).describe() for w in sorted(df["workload"].unique())}
    from autotune.report.context import bucket_sections

    resolved = ResolvedStudy.from_json(record.resolved_json)
    precision = resolved.spec.measurement.precision_pct
    drift = tuple(baseline_drift(store.measurements(study=name)))
    summary = summary_frame(df)
    built = {k: v.model_dump() for k, v in resolved.context_buckets.items()}
    return StudyReport(
        df,
        summary,
        written,
        notes,
        trade_off_frame(df),
        slo_text,
        drift,
        DEFAULT_PRECISION_PCT if precision is None else precision,
        tuple(bucket_sections(df, summary, built)),
        answers,
    )


def study_answers(store: Store, study: str, model: str, workloads: list[str]) -> tuple[Answer, ...]:
    """The answer `recommend --study STUDY --workload W` gives, for every workload measured."""
    from autotune.recommend.answer import recommend

    out = []
    for workload in workloads:
        try:
            rec = recommend(store, model, str(workload), None, study, None, None)
        except NoResultError:  # no config meets the study's SLO at every level, say
            continue
        out.append(rec.answer)
    return tuple(out)


def degenerate_lines(store: Store, study: str) -> list[str]:
    """One line per cell of the study whose replies were mostly loops (the guard,
    :mod:`autotune.engine.degeneracy`): what `study run` and `report` note, so a flagged cell
    never decides a winner silently."""
    from autotune.engine.degeneracy import flag_line
    from autotune.report.frames import degenerate_cells, frame_from_records

    cells = degenerate_cells(frame_from_records(store.measurements(study=study)))
    return [
        flag_line(
            c["loop_share"], c["distinct_4gram_ratio"], f"{c['workload']} c={c['concurrency']}"
        )
        for c in cells
    ]
