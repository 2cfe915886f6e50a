"""Answering: the measured recommendation with its low-confidence levels, ties and losses, the
published prior when nothing was measured (:mod:`autotune.recommend.published`), and the
stored-choice check (`autotune check`).

Which study answers and how much of it was measured is :mod:`autotune.recommend.studies`'s; the
one answer every surface renders is :mod:`autotune.recommend.answer_value`'s. The results are
typed objects with ``to_json`` where a command prints them as JSON; the CLI renders their text.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.errors import NoResultError, SpecError
from autotune.recommend.published import PriorRecommendation, published_prior
from autotune.recommend.starts import starts_json as _starts_json
from autotune.recommend.studies import Coverage, select_study
from autotune.spec.loader import ResolvedStudy

if TYPE_CHECKING:
    from autotune.recommend.answer_value import Answer
    from autotune.recommend.check import CheckResult
    from autotune.recommend.choose import Choice
    from autotune.spec.slo import SLO
    from autotune.store import MeasurementRecord, Store, StudyRecord


@dataclass(frozen=True)
class LowConfidence:
    """A level whose answer the measurements cannot back (``Choice.low_confidence``)."""

    concurrency: int
    reason: str
    """Every reason, joined with "; "."""

    def line(self) -> str:
        """The stderr note (after ``note: ``) of `recommend` and `check`."""
        return f"low confidence at concurrency {self.concurrency}: {self.reason}"

    def as_json(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "reason": self.reason}


def low_confidence(
    choices: Sequence[Choice], max_spread_pct: float, precision_pct: float | None = None
) -> tuple[LowConfidence, ...]:
    """The low-confidence levels among per-level ``choices`` (``autotune.recommend.choose``),
    judged against the study's ``measurement.max_spread_pct`` and ``precision_pct`` (the
    baseline's drift limit; None: the default)."""
    from autotune.evidence.scores import DEFAULT_PRECISION_PCT

    out = []
    for c in choices:
        reasons = c.low_confidence(
            max_spread_pct, DEFAULT_PRECISION_PCT if precision_pct is None else precision_pct
        )
        if reasons:
            out.append(LowConfidence(c.concurrency, "; ".join(reasons)))
    return tuple(out)


@dataclass(frozen=True)
class Loss:
    """A level where an answer over several levels loses to that level's own answer."""

    concurrency: int
    answer: str
    winner: str
    winner_config: dict[str, Any] | None
    loss_pct: float
    answer_tok_s: float
    winner_tok_s: float

    def line(self) -> str:
        """The stderr note (after ``note: ``)."""
        return (
            f"at concurrency {self.concurrency} the answer {self.answer} loses to "
            f"{self.winner} by {self.loss_pct:.1f}% ({self.answer_tok_s:,.1f} vs "
            f"{self.winner_tok_s:,.1f} tok/s median); answer that level alone with "
            f"--concurrency {self.concurrency}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "winner": self.winner,
            "winner_speculative_config": self.winner_config,
            "loss_pct": round(self.loss_pct, 3),
        }


def _sig(value: float | None, digits: int = 4) -> float | None:
    """``value`` to ``digits`` significant digits (1.080695528 -> 1.081)."""
    return None if value is None else float(f"{value:.{digits}g}")


@dataclass(frozen=True)
class Recommendation:
    """What `autotune recommend` answers, with everything `--explain` shows."""

    model: str
    model_alias: str | None
    workload: str
    concurrency: int | None
    """None: one config for every measured level (see ``choose_overall``)."""
    choice: Choice
    per_level: Sequence[Choice]
    study: StudyRecord
    resolved: ResolvedStudy
    rows: Sequence[MeasurementRecord]
    notes: tuple[str, ...] = ()
    """Lines for stderr (partial study, coverage)."""
    coverage: Coverage | None = None
    engine_args: dict[str, Any] = field(default_factory=dict)
    """Every engine arg the recommended config's trial ran with (false and zero included)."""
    tensor_parallel_size: int = 1
    source: str = "measured"
    low_confidence_levels: tuple[LowConfidence, ...] = ()
    """Every level of ``per_level`` whose winner's margin is inside the noise or whose winner or
    baseline spread over the study's ``measurement.max_spread_pct`` (``Choice.low_confidence``)."""
    weights: dict[int, float] | None = None
    """The measured levels the answer weighs and how much (a traffic mix, or the two
    neighbours of an unmeasured ``concurrency``); None: ``concurrency`` alone, or every level
    equally."""
    traffic: dict[int, float] | None = None
    """The traffic mix asked for (concurrency -> share of time), normalised."""
    default: Choice | None = None
    """The all-levels answer (every measured level weighted equally), whatever was asked."""

    @functools.cached_property
    def answer(self) -> Answer:
        """The one answer every surface renders (:mod:`autotune.recommend.answer_value`): this
        study's and workload's, at every level and for all levels, whatever was asked."""
        from autotune.evidence.scores import DEFAULT_PRECISION_PCT
        from autotune.recommend.answer_value import (
            Answer,
            Reason,
            default_answer,
            level_answer,
            partial_reason,
        )
        from autotune.spec.context import split_bucket

        m = self.resolved.spec.measurement
        precision = DEFAULT_PRECISION_PCT if m.precision_pct is None else m.precision_pct
        cov = self.coverage
        shared: tuple[Reason, ...] = ()
        if cov is not None and not cov.exhausted:
            shared = (partial_reason(cov.status, cov.measured, cov.planned, self.study.name),)
        per_level = tuple(self.per_level)
        levels = tuple(level_answer(c, m.max_spread_pct, precision, shared) for c in per_level)
        return Answer(
            study=self.study.name,
            model=self.model,
            workload=self.workload,
            context_length=split_bucket(self.workload)[1],
            status=self.study.status,
            levels=levels,
            default=default_answer(self.default, levels, per_level),
            study_reasons=shared,
        )

    @property
    def speculative_config(self) -> dict[str, Any] | None:
        config: dict[str, Any] | None = self.choice.best.speculative_config
        return config

    def _answers(self, concurrency: int) -> bool:
        """Whether the measured level ``concurrency`` is one the answer draws on."""
        if self.weights is not None:
            return self.weights.get(concurrency, 0.0) > 0
        return self.concurrency is None or concurrency == self.concurrency

    @property
    def low_confidence(self) -> tuple[LowConfidence, ...]:
        """The low-confidence levels of the answer: ``concurrency``'s (or the levels it is
        answered from), else every level's (what `recommend` and `check` note on stderr and
        `--json` carries)."""
        return tuple(lc for lc in self.low_confidence_levels if self._answers(lc.concurrency))

    @property
    def ties(self) -> tuple[Choice, ...]:
        """The tied levels of the answer (``Choice.tie``): ``concurrency``'s (or the levels it
        is answered from), else every level's."""
        return tuple(c for c in self.per_level if c.tie and self._answers(c.concurrency))

    @property
    def interpolated(self) -> bool:
        """Whether ``concurrency`` was not measured and is answered from its neighbours."""
        return self.concurrency is not None and self.weights is not None

    def losses(self) -> tuple[Loss, ...]:
        """The levels the answer draws on where another config beats it outside a tie (only
        for an answer over several levels: one level's answer is that level's best)."""
        if self.concurrency is not None and self.weights is None:
            return ()
        from autotune.recommend.answer_value import losing_levels

        levels = [lv for lv in self.per_level if self._answers(lv.concurrency)]
        return tuple(
            Loss(
                concurrency=lv.concurrency,
                answer=ours.label(),
                winner=lv.best.label(),
                winner_config=lv.best.speculative_config,
                loss_pct=pct,
                answer_tok_s=ours.median_tok_s,
                winner_tok_s=lv.best.median_tok_s,
            )
            for lv, ours, pct in losing_levels(self.speculative_config, levels)
        )

    def judged_where(self) -> str | None:
        """Which levels a judgement of this answer is about, when not its own concurrency:
        an unmeasured ``concurrency`` answered from its two neighbours; None otherwise."""
        if not (self.interpolated and self.weights is not None):
            return None
        lo, hi = sorted(self.weights)
        return (
            f"at concurrency {self.concurrency} (not measured: from its neighbours {lo} and "
            f"{hi}, weighted {self.weights[lo]:.2f}/{self.weights[hi]:.2f})"
        )

    def answered_from(self) -> str:
        """The stderr note saying which study (and which levels) answered."""
        where = ""
        if self.traffic is not None:
            mix = ", ".join(f"{c}: {share:.0%}" for c, share in sorted(self.traffic.items()))
            where = f" for the traffic mix {{{mix}}}"
        if self.interpolated and self.weights is not None:
            lo, hi = sorted(self.weights)
            where = (
                f" for concurrency {self.concurrency}, which was not measured: from its "
                f"neighbours {lo} and {hi}, weighted {self.weights[lo]:.2f}/"
                f"{self.weights[hi]:.2f} by distance in log-concurrency"
            )
        elif self.weights is not None:
            shares = ", ".join(f"{c}: {w:.2f}" for c, w in sorted(self.weights.items()))
            where += f" (weights on the measured levels {shares})"
        return f"answered from study {self.study.name!r} (status {self.study.status}){where}"

    @property
    def degenerate(self) -> tuple[Choice, ...]:
        """The levels of the answer whose replies were mostly loops (``Choice.degenerate``):
        ``concurrency``'s, else every level's."""
        return tuple(
            c
            for c in self.per_level
            if c.degenerate and (self.concurrency is None or c.concurrency == self.concurrency)
        )

    def to_json(self, shown: dict[str, Any] | None) -> dict[str, Any]:
        """What `recommend --json` prints; ``shown`` is the config printed (the DSD table's with
        ``--format dsd``)."""
        from autotune.evidence.decide import compare
        from autotune.spec.context import split_bucket

        cov = self.coverage
        speedup = self.choice.speedup
        return {
            "source": "measured",
            "speculative_config": shown,
            "config": self.choice.best.label(),
            "study": self.study.name,
            "workload": self.workload,
            "context_length": split_bucket(self.workload)[1],
            "status": self.study.status,
            "concurrency": self.concurrency,
            "answered_from_levels": (
                {str(c): round(w, 4) for c, w in sorted(self.weights.items())}
                if self.weights is not None
                else None
            ),
            "traffic": (
                {str(c): round(w, 6) for c, w in sorted(self.traffic.items())}
                if self.traffic is not None
                else None
            ),
            "configs_measured": cov.measured if cov else None,
            "configs_planned": cov.planned if cov else None,
            "speedup_vs_off": _sig(speedup),
            "loses_at": [loss.as_json() for loss in self.losses()],
            "notes": list(self.notes),
            "low_confidence": [lc.as_json() for lc in self.low_confidence],
            "tie": bool(self.ties),
            "tied_with": [
                {
                    "concurrency": t.concurrency,
                    "config": o.label(),
                    "speculative_config": o.speculative_config,
                    # The one sign (autotune.evidence.decide): the answer's median over o's.
                    **compare(t.best, o).as_json(),
                }
                for t in self.ties
                for o in t.tied_with
            ],
            "answer": self.answer.as_json(),
            "degenerate": bool(self.degenerate),
            "output_degeneracy": [
                {
                    "concurrency": c.concurrency,
                    "loop_share": c.loop_share,
                    "distinct_4gram_ratio": c.distinct_4gram_ratio,
                    "loop_at_max_tokens_share": c.loop_at_max_tokens_share,
                    "degenerate": c.degenerate,
                }
                for c in self.per_level
                if self.concurrency is None or c.concurrency == self.concurrency
            ],
            "baseline_drift": [
                {"concurrency": c.concurrency, "drift_pct": round(c.drift_pct, 3)}
                for c in self.per_level
                if c.drift_pct is not None and self._answers(c.concurrency)
            ],
            "starts": [
                _starts_json(self.rows, c) for c in self.per_level if self._answers(c.concurrency)
            ],
        }

    def is_low_confidence(self, concurrency: int) -> bool:
        """Whether the level ``concurrency`` of ``per_level`` is low-confidence."""
        return any(lc.concurrency == concurrency for lc in self.low_confidence_levels)


def recommend(
    store: Store,
    model: str,
    workload: str,
    concurrency: int | None,
    study: str | None,
    slo: SLO | None,
    traffic: dict[int, float] | None,
) -> Recommendation:
    """The measured recommendation for (model, workload[, concurrency]).

    A ``concurrency`` between two measured levels is answered from its two neighbours, each
    config's score ratio to the level's best weighted by distance in log-concurrency
    (:func:`autotune.recommend.choose.neighbour_weights`); outside the measured range it raises
    :class:`NoResultError`. A ``traffic`` mix (concurrency -> share of time, summing to 1)
    chooses the config with the best weighted geometric mean over the levels, unmeasured
    levels split over their neighbours the same way.

    Answers from the study ``select_study`` picks: finished studies first. Under a latency SLO
    (``slo``, an :class:`autotune.spec.slo.SLO`; else the study's own ``slo:`` block) only the
    configs whose p99 latencies meet it are chosen; none meeting it raises
    :class:`autotune.recommend.slo.NoConfigMeetsSLO` naming the closest. Each level is judged
    against the study's ``measurement.max_spread_pct`` (``low_confidence_levels``).
    """
    from autotune.evidence.objectives import study_slo
    from autotune.recommend.choose import (
        choose_overall,
        neighbour_weights,
        traffic_weights,
    )
    from autotune.recommend.slo import (
        NoConfigMeetsSLO,
        answers_by_goodput,
        choose_level,
        choose_overall_slo,
    )

    sel = select_study(store, model, workload, study)
    record, rows = sel.study, sel.rows
    levels = sorted({r.concurrency for r in rows})
    weights: dict[int, float] | None = None
    if traffic is not None:
        try:
            weights = traffic_weights(traffic, levels)
        except ValueError as exc:
            raise NoResultError(f"--traffic for {model}/{workload}: {exc}") from None
    elif concurrency is not None and concurrency not in levels:
        weights = neighbour_weights(concurrency, levels)
        if weights is None:
            raise NoResultError(
                f"concurrency {concurrency} lies outside the levels measured for "
                f"{model}/{workload} ({', '.join(map(str, levels))}); autotune answers "
                "between measured levels but does not extrapolate"
            )
    resolved = ResolvedStudy.from_json(record.resolved_json)
    slo = slo if slo else study_slo(resolved.spec, workload)

    goodput = answers_by_goodput(resolved.spec, slo)
    from autotune.evidence.cells import Evidence

    evidence = Evidence.of(rows)  # the newest prompt set's cells, once for every rule below

    def at(level: int) -> Any:  # the one rule confirmation judges by too (choose_level)
        return choose_level(evidence, workload, level, slo, goodput)

    per_level = []
    for lv in levels:
        try:
            if (c := at(lv)) is not None:
                per_level.append(c)
        except NoConfigMeetsSLO:
            if lv == concurrency:
                raise

    def overall(weights: dict[int, float] | None) -> Choice | None:
        if slo:
            return choose_overall_slo(evidence, workload, levels, slo, weights=weights)
        return choose_overall(evidence, workload, levels, weights=weights)

    choice = at(concurrency) if concurrency is not None and weights is None else overall(weights)
    if weights is None and concurrency is None:
        default = choice
    else:
        try:
            default = overall(None)
        except NoConfigMeetsSLO:
            default = None
    if choice is None:
        raise NoResultError(f"no usable measurements for {model}/{workload}")
    # The printed command is the measured one: the engine args stored with the best's trial.
    trial = next((t for t in store.trials(record) if t.id in choice.best.trial_ids), None)
    return Recommendation(
        model=record.model,
        model_alias=record.model_alias,
        workload=workload,
        concurrency=concurrency,
        choice=choice,
        per_level=per_level,
        study=record,
        resolved=resolved,
        rows=rows,
        notes=sel.notes + ((f"under the latency SLO {slo.describe()}",) if slo else ()),
        coverage=sel.coverage,
        engine_args=dict(trial.engine_args if trial else resolved.engine_args),
        tensor_parallel_size=trial.tensor_parallel_size if trial else resolved.tensor_parallel_size,
        low_confidence_levels=low_confidence(
            per_level,
            resolved.spec.measurement.max_spread_pct,
            resolved.spec.measurement.precision_pct,
        ),
        weights=weights,
        traffic=dict(traffic) if traffic is not None else None,
        default=default,
    )


SOURCES = ("any", "measured", "published")


def answer(
    store: Store | Callable[[], Store] | None,
    model: str,
    workload: str,
    concurrency: int | None,
    study: str | None,
    source: str,
    slo: SLO | None,
    traffic: dict[int, float] | None,
) -> Recommendation | PriorRecommendation:
    """What `autotune recommend` prints: the measured recommendation, else (``source`` "any")
    the published starting point; ``source`` "measured"/"published" asks for one of them only.

    ``store`` may be a callable, so a published answer never opens (or creates) a database;
    None says there is no store yet (nothing measured), so it is not even imported.
    """
    if source not in SOURCES:
        raise SpecError(f"must be one of {', '.join(SOURCES)}", source="--source")
    if source == "published" and study is not None:
        raise SpecError("--study names a measured study; drop it or use --source measured")
    if source == "published" and traffic is not None:
        raise SpecError("--traffic weighs measured levels; drop it or use --source measured")
    if source != "published":
        try:
            if store is None:
                raise NoResultError(
                    f"nothing measured for model {model!r} and workload {workload!r} yet (the "
                    "store does not exist); create and run a study first (autotune study "
                    "create / autotune study run)"
                )
            opened = store() if callable(store) else store
            return recommend(opened, model, workload, concurrency, study, slo, traffic)
        except NoResultError as exc:
            # A published result says nothing of latency or of a traffic mix: no fallback.
            if source == "measured" or study is not None or slo or traffic:
                raise
            measured_error: NoResultError | None = exc
    else:
        measured_error = None
    prior = published_prior(model, workload, concurrency)
    if prior is None:
        what = f"{measured_error}; n" if measured_error else "N"
        raise NoResultError(f"{what}o published result is known for model {model!r} either")
    return prior


@dataclass(frozen=True)
class StoredCheck:
    """What `autotune check` answers from the store: the recommendation it judged against, the
    stderr notes (partial study, coverage, low-confidence levels) and the gate's verdict."""

    recommendation: Recommendation
    result: CheckResult
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """What `check --json` prints: the verdict, the notes and the one answer."""
        return {
            **self.result.to_json(),
            "study": self.study.name,
            "workload": self.recommendation.workload,
            "concurrency": self.recommendation.concurrency,
            "notes": list(self.notes),
            "answer": self.recommendation.answer.as_json(),
        }

    @property
    def study(self) -> StudyRecord:
        return self.recommendation.study


def check_stored(
    store: Store,
    model: str,
    workload: str,
    deployed: dict[str, Any] | None,
    concurrency: int | None,
    tolerance_pct: float,
    study: str | None,
) -> StoredCheck:
    """Judge ``deployed`` against the measured recommendation (:func:`autotune.recommend.check.
    check`): within ``tolerance_pct`` of its robust score, in the same cell, measured on the
    vLLM installed now."""
    from autotune.recommend import check as gate

    rec = recommend(store, model, workload, concurrency, study, None, None)
    result = gate.check(
        rec.choice,
        deployed,
        study=rec.study.name,
        tolerance_pct=tolerance_pct,
        measured_vllm_versions=[r.vllm_version for r in rec.rows],
        installed_vllm=gate.installed_vllm_version(),
        levels=[lv.concurrency for lv in rec.per_level],
        where=rec.judged_where(),
    )
    # a partial study, or one whose space was not exhausted (#11.2); low-confidence levels (#11.8)
    notes = (*rec.notes, *(lc.line() for lc in rec.low_confidence))
    return StoredCheck(rec, result, notes)
