"""The one answer of a (study, workload, context): per level and for all levels, with its
margin, verdict and confidence; every surface renders this value and nothing else.

``Recommendation.answer`` (:mod:`autotune.recommend.answer`) turns a recommendation's per-level
choices and its all-levels default into an :class:`Answer` with :func:`level_answer` and
:func:`default_answer`. ``recommend`` (text, ``--json``,
``--explain``), ``check``, ``report`` (text, JSON, HTML) and the ``next:`` hints read from it;
``Answer.as_json`` is the block they all carry under ``"answer"`` (the HTML as a JSON island),
so tests/unit/test_answer_surfaces.py can check that they agree. docs/answers.md defines the
margin, the verdict (:mod:`autotune.evidence.decide`) and the confidence for users.

Confidence is ``nothing compared`` where only one config was ranked at a level (a study that
measured only the baseline, say), else ``low`` when any reason holds, else ``ok``. Reasons
(``Reason.kind``): ``no-baseline``, ``noisy-repeats``, ``noisy-baseline``, ``undecided``,
``drift`` (the level's choice, :meth:`autotune.recommend.choose.Choice.low_confidence`),
``degenerate-outputs``
(most replies were loops), ``partial-study`` (the study stopped before its search finished: k of
n configs) and ``nothing-compared``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from autotune.spec.methods import config_id

if TYPE_CHECKING:
    from autotune.evidence.scores import ConfigScore
    from autotune.recommend.choose import Choice
    from autotune.store.records import MeasurementRecord

Confidence = Literal["ok", "low", "nothing compared"]
NOTHING_COMPARED = "nothing compared"


@dataclass(frozen=True)
class Reason:
    """One reason an answer is not ``ok``."""

    kind: str
    text: str

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "text": self.text}


@dataclass(frozen=True)
class LevelAnswer:
    """What to deploy at one concurrency level, and how sure it is."""

    concurrency: int
    winner: str
    speculative_config: dict[str, Any] | None
    median_tok_s: float
    runner_up: str | None
    runner_up_tok_s: float | None
    margin_pct: float | None
    """The winner's median over the runner-up's, ``100·(winner/runner-up − 1)``."""
    verdict: str
    """``tie``, ``undecided``, ``decided`` or ``nothing compared``."""
    speedup_vs_off: float | None
    confidence: Confidence
    reasons: tuple[Reason, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "winner": self.winner,
            "speculative_config": self.speculative_config,
            "median_tok_s": round(self.median_tok_s, 3),
            "runner_up": self.runner_up,
            "runner_up_tok_s": None
            if self.runner_up_tok_s is None
            else round(self.runner_up_tok_s, 3),
            "margin_pct": None if self.margin_pct is None else round(self.margin_pct, 3),
            "verdict": self.verdict,
            "speedup_vs_off": None
            if self.speedup_vs_off is None
            else round(self.speedup_vs_off, 4),
            "confidence": self.confidence,
            "reasons": [r.as_json() for r in self.reasons],
        }

    def margin_text(self) -> str:
        """``+2.4%, decided``, or ``nothing compared``."""
        if self.margin_pct is None:
            return self.verdict
        return f"{self.margin_pct:+.1f}%, {self.verdict}"


@dataclass(frozen=True)
class Loss:
    """A level where the all-levels answer is not that level's answer."""

    concurrency: int
    winner: str
    loss_pct: float
    """How far the default's median is below the level winner's, in percent (positive)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "winner": self.winner,
            "loss_pct": round(self.loss_pct, 3),
        }


@dataclass(frozen=True)
class DefaultAnswer:
    """One config for every measured level (the geometric mean over them), with the levels
    where it loses."""

    winner: str
    speculative_config: dict[str, Any] | None
    runner_up: str | None
    margin_pct: float | None
    verdict: str
    confidence: Confidence
    reasons: tuple[Reason, ...]
    loses_at: tuple[Loss, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "winner": self.winner,
            "speculative_config": self.speculative_config,
            "runner_up": self.runner_up,
            "margin_pct": None if self.margin_pct is None else round(self.margin_pct, 3),
            "verdict": self.verdict,
            "confidence": self.confidence,
            "reasons": [r.as_json() for r in self.reasons],
            "loses_at": [loss.as_json() for loss in self.loses_at],
        }


@dataclass(frozen=True)
class Answer:
    """The answer of one (study, workload, context) at every level and for all levels."""

    study: str
    model: str
    workload: str
    context_length: int | None
    status: str
    levels: tuple[LevelAnswer, ...]
    default: DefaultAnswer | None
    """None when no config was measured at every level."""
    study_reasons: tuple[Reason, ...]
    """Reasons that hold for every level (a partial study)."""

    def level(self, concurrency: int) -> LevelAnswer | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)

    @property
    def caveats(self) -> tuple[str, ...]:
        """Every reason of the answer, once each, in order: what the HTML and the CLI print."""
        seen: list[str] = []
        for r in (
            *self.study_reasons,
            *(r for lv in self.levels for r in lv.reasons),
            *(self.default.reasons if self.default else ()),
        ):
            line = r.text
            if line not in seen:
                seen.append(line)
        return tuple(seen)

    def as_json(self) -> dict[str, Any]:
        return {
            "study": self.study,
            "model": self.model,
            "workload": self.workload,
            "context_length": self.context_length,
            "status": self.status,
            "levels": [lv.as_json() for lv in self.levels],
            "default": None if self.default is None else self.default.as_json(),
            "study_reasons": [r.as_json() for r in self.study_reasons],
        }


def _confidence(verdict: str, reasons: tuple[Reason, ...]) -> Confidence:
    if verdict == NOTHING_COMPARED:
        return "nothing compared"
    return "low" if reasons else "ok"


def partial_reason(status: str, measured: int, planned: int, study: str) -> Reason:
    """The partial-study reason: the study stopped before its search finished."""
    return Reason(
        "partial-study",
        f"partial study: {study!r} is {status}, {measured} of {planned} planned configs "
        f"measured (autotune study resume {study})",
    )


def level_answer(
    c: Choice,
    max_spread_pct: float,
    precision_pct: float,
    shared: tuple[Reason, ...] = (),
) -> LevelAnswer:
    """One level's answer from its choice, with the study-wide reasons ``shared``."""
    at = f"{c.workload} at concurrency {c.concurrency}"
    reasons = [
        Reason(kind, f"{at}: {text}") for kind, text in c.reasons(max_spread_pct, precision_pct)
    ]
    if c.degenerate:
        reasons.append(Reason("degenerate-outputs", f"degenerate outputs: {c.degenerate_line()}"))
    if c.comparison is None:
        reasons.append(
            Reason(
                "nothing-compared",
                f"{at}: nothing compared, only {c.best.label()} was measured there",
            )
        )
    all_reasons = (*shared, *reasons)
    return LevelAnswer(
        concurrency=c.concurrency,
        winner=c.best.label(prose=False),
        speculative_config=c.best.speculative_config,
        median_tok_s=c.best.median_tok_s,
        runner_up=c.runner_up.label(prose=False) if c.runner_up else None,
        runner_up_tok_s=c.runner_up.median_tok_s if c.runner_up else None,
        margin_pct=c.margin_pct,
        verdict=c.verdict,
        speedup_vs_off=c.speedup,
        confidence=_confidence(c.verdict, all_reasons),
        reasons=all_reasons,
    )


def losing_levels(
    config: dict[str, Any] | None, per_level: Sequence[Choice]
) -> tuple[tuple[Choice, ConfigScore, float], ...]:
    """The levels of ``per_level`` where ``config`` was measured and another config wins outside
    the level's tie band: (the level's choice, ``config``'s score there, how far its median is
    below the winner's, in percent and positive). One rule for the all-levels answer's
    ``loses_at`` and `recommend`'s loss notes."""
    mine = config_id(config)
    out = []
    for lv in per_level:
        # Inside the level's 1 % tie band the answer is that level's answer too.
        if any(config_id(t.speculative_config) == mine for t in (lv.best, *lv.tied_with)):
            continue
        ours = next(
            (s for s in (*lv.ranked, *lv.screened) if config_id(s.speculative_config) == mine),
            None,
        )
        if ours is None or lv.best.median_tok_s <= 0:
            continue
        loss_pct = 100.0 * (1.0 - ours.median_tok_s / lv.best.median_tok_s)
        if loss_pct > 0:
            out.append((lv, ours, loss_pct))
    return tuple(out)


def default_answer(
    overall: Choice | None, levels: tuple[LevelAnswer, ...], per_level: tuple[Choice, ...]
) -> DefaultAnswer | None:
    """The all-levels answer: ``overall`` (``choose_overall``), the levels where another config
    wins, and the reasons of every level it draws on."""
    if overall is None:
        return None
    losses = tuple(
        Loss(lv.concurrency, lv.best.label(prose=False), pct)
        for lv, _, pct in losing_levels(overall.best.speculative_config, per_level)
    )
    reasons: list[Reason] = []
    for la in levels:
        for r in la.reasons:
            if r not in reasons:
                reasons.append(r)
    verdict = overall.verdict
    every_level_nothing = bool(levels) and all(la.verdict == NOTHING_COMPARED for la in levels)
    if every_level_nothing:
        verdict = NOTHING_COMPARED
    return DefaultAnswer(
        winner=overall.best.label(prose=False),
        speculative_config=overall.best.speculative_config,
        runner_up=overall.runner_up.label(prose=False) if overall.runner_up else None,
        margin_pct=overall.margin_pct,
        verdict=verdict,
        confidence=_confidence(verdict, tuple(reasons)),
        reasons=tuple(reasons),
        loses_at=losses,
    )


def from_rows(
    rows: Sequence[MeasurementRecord],
    *,
    study: str,
    model: str,
    status: str,
    max_spread_pct: float,
    precision_pct: float,
) -> tuple[Answer, ...]:
    """The answer of every workload in ``rows`` (one study's measurements, no SLO), for a
    surface that holds only the rows (a report written from a measurements frame): the same
    choices ``recommend`` makes, without the coverage a store would tell (no partial-study
    reason)."""
    from autotune.recommend.choose import choose, choose_overall
    from autotune.spec.context import split_bucket

    out = []
    for workload in sorted({r.workload for r in rows}):
        concurrencies = sorted({r.concurrency for r in rows if r.workload == workload})
        per_level = tuple(
            c for lv in concurrencies if (c := choose(rows, workload, lv)) is not None
        )
        levels = tuple(level_answer(c, max_spread_pct, precision_pct) for c in per_level)
        overall = choose_overall(rows, workload, concurrencies)
        out.append(
            Answer(
                study=study,
                model=model,
                workload=workload,
                context_length=split_bucket(workload)[1],
                status=status,
                levels=levels,
                default=default_answer(overall, levels, per_level),
                study_reasons=(),
            )
        )
    return tuple(out)
