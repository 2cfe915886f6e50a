"""The one rule that compares two configs' medians: margin, tie, undecided, decided.

Every surface (recommend, check, report, the run's progress line, the search's undecided
repeats) states a comparison through :func:`compare`, so their margins, ties and verdicts never
disagree. docs/answers.md is the user's copy of the definition:

- margin: ``100·(answer/other − 1)`` of the two medians, one sign everywhere (positive: the
  answer is ahead);
- tie: ``|margin| ≤`` :data:`PRACTICAL_TIE_PCT` (1 %, as vLLM's own tuner breaks ties to the
  smaller K only within 1 %); inside it the preference picks (:func:`preference`: off, then the
  smaller N, then no draft model);
- undecided: beyond 1 % where the 95 % interval of the ratio of the medians still contains 1
  (:meth:`autotune.evidence.scores.ConfigScore.ties_with`), unless the ratio is past 2× (a 2×,
  let alone a 10×, gap is never a tie nor undecided: it is decided, and the noisy repeats that
  widened the interval are a confidence reason of their own);
- decided: otherwise. Beyond the tie the answer is always the higher median.

A *gate* asks another question of one config measured again against its stored value (``check
--measure``'s speedup): has it fallen by more than a band? :func:`held` is that one-sided rule
(a non-inferiority test): held where the whole 95 % interval of now/then lies above a fall of
the band, fell where it lies below, undecided otherwise. It has no 2× shortcut: a fall judged on
an unbounded interval is exactly a loaded runner's false alarm.

Ranking is by the median (not the robust score ``median − 1.4826·MAD``), so rank, margin and
tie never contradict each other: :func:`rank` puts the preferred config of the tie band around
the top median first, then the rest by median.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from autotune.evidence.scores import ConfigScore, combined_ci_log, median_ci_halfwidth_pct

PRACTICAL_TIE_PCT = 1.0
"""Configs whose medians lie within this percent of each other tie (vLLM PR #49163's band)."""
DECIDED_RATIO = 2.0
"""A ratio of medians at or past this (either way) is decided whatever the interval says."""

Verdict = Literal["tie", "undecided", "decided"]
VERDICTS: tuple[Verdict, ...] = ("tie", "undecided", "decided")


def margin_pct(answer_tok_s: float, other_tok_s: float) -> float:
    """``100·(answer/other − 1)``: positive when the answer is ahead; 0 when ``other`` is 0."""
    return 100.0 * (answer_tok_s / other_tok_s - 1.0) if other_tok_s > 0 else 0.0


@dataclass(frozen=True)
class Comparison:
    """The answer's median against another config's: the margin and the verdict."""

    answer: ConfigScore
    other: ConfigScore
    margin_pct: float
    """``100·(answer/other − 1)`` of the medians (positive: the answer is ahead)."""
    verdict: Verdict

    @property
    def interval_pct(self) -> float:
        """± percent of the 95 % interval of the ratio of the medians (``inf``: not stated)."""
        return self.answer.tie_pct(self.other)

    def words(self) -> str:
        """``+2.4%, decided`` — the one way a comparison is printed."""
        return f"{self.margin_pct:+.1f}%, {self.verdict}"

    def as_json(self) -> dict[str, Any]:
        """``margin_pct`` (3 decimals), ``verdict`` and the interval (null when unbounded)."""
        width = self.interval_pct
        return {
            "margin_pct": round(self.margin_pct, 3),
            "verdict": self.verdict,
            "interval_pct": round(width, 3) if math.isfinite(width) else None,
        }


def compare(
    answer: ConfigScore, other: ConfigScore, tie_pct: float = PRACTICAL_TIE_PCT
) -> Comparison:
    """The rule (module docstring) for ``answer`` against ``other``."""
    m = margin_pct(answer.median_tok_s, other.median_tok_s)
    return Comparison(
        answer=answer,
        other=other,
        margin_pct=m,
        verdict=verdict(m, answer.ties_with(other), tie_pct),
    )


def verdict(
    margin: float, interval_contains_one: bool, tie_pct: float = PRACTICAL_TIE_PCT
) -> Verdict:
    """The rule on a margin (percent, ``100·(answer/other − 1)``) and whether the 95 % interval
    of the ratio contains 1. :func:`compare` states it for two scores; the surfaces that compare
    other pairs state it here too (latencies at a request rate, :mod:`autotune.recommend.rate`;
    one config in two studies, :mod:`autotune.recommend.compare`), so none words its own."""
    ratio = 1.0 + margin / 100.0
    far = ratio >= DECIDED_RATIO or ratio <= 1.0 / DECIDED_RATIO
    if abs(margin) <= tie_pct:
        return "tie"
    if not far and interval_contains_one:
        return "undecided"
    return "decided"


Held = Literal["held", "fell", "undecided"]


def held(margin: float, interval_log: float, band_pct: float) -> Held:
    """The gate's rule (module docstring) on ``margin`` (percent, ``100·(now/then − 1)``), the
    half-width of the 95 % interval of ``log(now/then)`` (``inf``: unbounded) and the fall that
    matters, ``band_pct`` (percent, at least 0)."""
    ratio = 1.0 + margin / 100.0
    if ratio <= 0:
        return "fell"
    edge = math.log1p(-band_pct / 100.0) if band_pct < 100 else -math.inf
    at = math.log(ratio)
    if at - interval_log >= edge:
        return "held"
    if at + interval_log < edge:
        return "fell"
    return "undecided"


def verdict_of_runs(
    a: Sequence[float], b: Sequence[float], tie_pct: float = PRACTICAL_TIE_PCT
) -> Verdict:
    """The rule for two configs' runs at one level (throughputs, tok/s), as :func:`compare` says
    it for their scores: what the search asks before it answers (more repeats while
    ``undecided``)."""
    ma, mb = statistics.median(a), statistics.median(b)
    if ma <= 0 or mb <= 0:
        return "decided"
    width = combined_ci_log(_ci_log(a), len(a), _ci_log(b), len(b))
    contains_one = width > 0 and abs(math.log(ma / mb)) <= width
    return verdict(margin_pct(ma, mb), contains_one, tie_pct)


def halfwidth_log(values: Sequence[float]) -> float:
    """Half-width in log units of the 95 % interval of the median of ``values`` (``inf``: under
    two values, nothing measures their noise): what a ratio's interval combines
    (``math.hypot``) on the surfaces that state :func:`verdict` for other pairs."""
    pct = median_ci_halfwidth_pct(values)
    return math.log1p(pct / 100.0) if math.isfinite(pct) else math.inf


def _ci_log(throughputs: Sequence[float]) -> float:
    """Half-width of the 95 % interval of the median in log units (``ConfigScore.ci_log``)."""
    if len(throughputs) < 2 or any(t <= 0 for t in throughputs):
        return 0.0
    return math.log1p(median_ci_halfwidth_pct(throughputs) / 100.0)


class Preferable(Protocol):
    """What the preference inside a tie reads: a config's N and its draft model."""

    @property
    def num_speculative_tokens(self) -> int: ...

    @property
    def draft(self) -> str | None: ...


def preference(s: Preferable) -> tuple[int, int]:
    """Inside a tie: the smaller N first (off, N = 0, first of all), then no draft model."""
    return (s.num_speculative_tokens, 0 if s.draft is None else 1)


def rank(scores: Iterable[ConfigScore], tie_pct: float = PRACTICAL_TIE_PCT) -> list[ConfigScore]:
    """Best first: the configs tied with the top median (within ``tie_pct`` of it) in order of
    :func:`preference`, then the rest by median, highest first."""
    by_median = sorted(scores, key=lambda s: s.median_tok_s, reverse=True)
    if not by_median:
        return []
    top = by_median[0]
    band = [s for s in by_median if compare(s, top, tie_pct).verdict == "tie"]
    tied = sorted(band, key=preference)
    return tied + [s for s in by_median if not any(s is t for t in band)]
