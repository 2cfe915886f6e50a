"""One config's measured repeats as robust statistics: the score every answer ranks by.

A config's repeats at one (workload, concurrency) become a :class:`ConfigScore`: the median
output throughput and its MAD, the robust lower estimate ``median - 1.4826·MAD`` (so one lucky
run never wins), the spread over repeats (the "noisy" rule), the pooled acceptance and the loop
share. Two configs' medians compare through the 95% confidence interval of their ratio: each
median carries a Student-t interval on log throughput (:func:`median_ci_halfwidth_pct`, the
sequential-stopping rule's) and the ratio's interval is their combination
(:meth:`ConfigScore.tie_interval`, stated or *undecided* past :data:`STATABLE_PCT`); the noise
interval ``median ± 1.4826·MAD`` is the search's. How two scores compare (margin, tie,
undecided) is :mod:`autotune.evidence.decide`'s; what is chosen from them,
:mod:`autotune.recommend.choose`'s.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.spec.labels import PLAIN, Labels
from autotune.spec.methods import config_id

if TYPE_CHECKING:
    # What scoring reads: the store's measurement record (a report frame's rows are turned
    # back into such records, see autotune.report.frames).
    from autotune.store.records import MeasurementRecord as MeasuredRow

MAD_SCALE = 1.4826  # makes the MAD a consistent estimator of sigma under normal noise
DEFAULT_PRECISION_PCT = 3.0
"""The study's ``measurement.precision_pct`` when it sets none (the sequential rule's target
and the drift limit)."""
CONFIDENCE = 0.95
"""Level of the confidence intervals of a median (sequential stopping, ties)."""


@dataclass(frozen=True)
class ConfigScore:
    """One engine config's repeats at one (workload, concurrency)."""

    method: str
    draft: str | None
    num_speculative_tokens: int
    speculative_config: dict[str, Any] | None
    trial_ids: tuple[int, ...]
    throughputs: tuple[float, ...]
    median_tok_s: float
    mad_tok_s: float
    score_tok_s: float
    spread_pct: float
    """(max - min) / median over repeats, in percent."""
    mean_acceptance_length: float | None
    acceptance_per_pos: tuple[float, ...]
    loop_share: float | None = None
    """Mean over its repeats of the share of replies that ended in a repeating loop (the
    degeneracy guard, :mod:`autotune.engine.degeneracy`); None: not checked."""
    labels: Labels = field(default=PLAIN, compare=False, repr=False)
    """The names of the configs this one is shown with (autotune.spec.labels)."""

    @property
    def is_baseline(self) -> bool:
        return self.speculative_config is None

    @property
    def degenerate(self) -> bool:
        """Whether most of this config's replies were loops (drafts are accepted on loops)."""
        from autotune.engine.degeneracy import LOOP_SHARE_LIMIT

        return self.loop_share is not None and self.loop_share > LOOP_SHARE_LIMIT

    @property
    def repeats(self) -> int:
        return len(self.throughputs)

    def label(self, prose: bool = True) -> str:
        """The config's name (autotune.spec.labels): ``off (no speculation)`` in prose,
        ``off`` in tables (``prose=False``)."""
        return self.labels(self.speculative_config, prose=prose)

    def noisy(self, max_spread_pct: float) -> bool:
        """Whether the repeats spread more than ``max_spread_pct`` (the study's
        ``measurement.max_spread_pct``): the report's "noisy" flag and a low-confidence reason."""
        return self.spread_pct > max_spread_pct

    @property
    def noise_tok_s(self) -> float:
        """Half-width of the noise interval, 1.4826·MAD (a sigma under normal noise)."""
        return MAD_SCALE * self.mad_tok_s

    @property
    def ci_log(self) -> float:
        """Half-width of the 95% confidence interval of the median, in log units (0: no
        measured noise, a single run or identical runs)."""
        if self.repeats < 2 or any(t <= 0 for t in self.throughputs):
            return 0.0
        return math.log1p(median_ci_halfwidth_pct(self.throughputs) / 100.0)

    def pair_ci_log(self, other: ConfigScore) -> float:
        """Half-width of the 95% interval of the log ratio of the two medians: the two
        intervals combined. A side measured once (a screening run: the model search stops
        repeating a config, the baseline too, where it is far from the best) has no noise of its
        own to show and is taken as noisy as the other side, so one run never narrows the
        interval; with both sides measured once it is 0 (nothing measured)."""
        return combined_ci_log(self.ci_log, self.repeats, other.ci_log, other.repeats)

    def ties_with(self, other: ConfigScore) -> bool:
        """Whether the 95% interval of the ratio of the two medians contains 1 (see the module
        docstring); False when neither has measured noise."""
        width = self.pair_ci_log(other)
        if width <= 0 or self.median_tok_s <= 0 or other.median_tok_s <= 0:
            return False
        return abs(math.log(self.median_tok_s / other.median_tok_s)) <= width

    def tie_pct(self, other: ConfigScore) -> float:
        """The combined uncertainty of the two medians' ratio, ± percent."""
        return 100.0 * (math.exp(self.pair_ci_log(other)) - 1.0)

    def tie_interval(self, other: ConfigScore) -> RatioInterval:
        """:meth:`tie_pct` with what it rests on (repeats, spreads), stated or undecided."""
        noisier = 0 if self.ci_log >= other.ci_log else 1
        return RatioInterval(
            halfwidth_pct=self.tie_pct(other),
            repeats=(self.repeats, other.repeats),
            spread_pct=(self.spread_pct, other.spread_pct),
            noisier=noisier,
        )

    def within_noise(self, other: ConfigScore) -> bool:
        """Whether the noise intervals (median ± 1.4826·MAD) of ``self`` and ``other`` overlap,
        so their order is not established by the repeats; False when neither has measured
        noise."""
        if self.noise_tok_s <= 0 and other.noise_tok_s <= 0:
            return False
        lo, hi = (self, other) if self.median_tok_s <= other.median_tok_s else (other, self)
        return lo.median_tok_s + lo.noise_tok_s >= hi.median_tok_s - hi.noise_tok_s


STATABLE_PCT = 100.0
"""The widest half-width, in percent of the value, at which the 95% interval of a ratio of
medians is printed as a number. Past it the interval spans more than halving to doubling, which
bounds nothing a choice between two configs can use (two runs spreading 104% give ±308,880%:
the t quantile is 12.7 at two runs, so two runs spreading more than about 11% are past it), and
the comparison is reported *undecided* with what made it so, the repeats and their spread."""


@dataclass(frozen=True)
class RatioInterval:
    """The 95% interval of the ratio of two configs' medians (:meth:`ConfigScore.tie_interval`)."""

    halfwidth_pct: float
    """± percent (``ConfigScore.tie_pct``); ``inf`` when a side has no usable interval."""
    repeats: tuple[int, int]
    spread_pct: tuple[float, float]
    """Each side's (max - min) / median over its repeats, in percent."""
    noisier: int
    """The side (0 or 1) whose own interval is the wider: the one the undecided text names."""

    @property
    def undecided(self) -> bool:
        """Whether the interval is too wide to state (over :data:`STATABLE_PCT`)."""
        return not math.isfinite(self.halfwidth_pct) or self.halfwidth_pct > STATABLE_PCT

    @property
    def why(self) -> str:
        """What makes it undecided: the noisier side's ``n=2, repeats spread 104.4%``."""
        i = self.noisier
        return f"n={self.repeats[i]}, repeats spread {self.spread_pct[i]:.1f}%"

    def text(self) -> str:
        """``within ±4.2%``, or ``undecided (n=2, repeats spread 104.4%)``."""
        if not self.undecided:
            return f"within ±{self.halfwidth_pct:.1f}%"
        return f"undecided ({self.why})"

    def cell(self) -> str:
        """The table cell: the half-width, or ``undecided``."""
        return "undecided" if self.undecided else f"{self.halfwidth_pct:.1f}"

    def as_json(self) -> dict[str, Any]:
        """``within_pct`` (null when undecided), ``undecided`` and the raw numbers."""
        raw = self.halfwidth_pct
        return {
            "within_pct": None if self.undecided else round(raw, 3),
            "undecided": self.undecided,
            "halfwidth_pct": round(raw, 3) if math.isfinite(raw) else None,
            "repeats": list(self.repeats),
            "spread_pct": [round(s, 3) for s in self.spread_pct],
        }


def combined_ci_log(ci_a: float, runs_a: int, ci_b: float, runs_b: int) -> float:
    """Half-width of the 95% interval of the log ratio of two medians, from each median's own
    (``ci_a``, ``ci_b``, log units) and its number of runs: a side measured once is taken as
    noisy as the other (:meth:`ConfigScore.pair_ci_log`)."""
    if runs_a < 2 <= runs_b:
        ci_a = ci_b
    elif runs_b < 2 <= runs_a:
        ci_b = ci_a
    return math.hypot(ci_a, ci_b)


def median_ci_halfwidth_pct(throughputs: Sequence[float]) -> float:
    """Half-width, in percent of the median, of the 95% confidence interval of the median
    throughput of ``throughputs`` (one level's runs on one engine); ``inf`` below two runs.

    A Student-t interval on log throughput: throughput noise is multiplicative (a slowed core
    slows every request by a factor), and on the log scale the mean estimates the log median
    under any symmetric noise, so ``exp(mean ± t·s/√n)`` bounds the median. A distribution-free
    order-statistic interval would need at least 6 runs to reach 95% at all (its widest,
    ``[min, max]``, covers 1 - 2/2^n), so it cannot stop at 3; the t-interval can, and it widens
    honestly for few runs (t = 12.7 at 2 runs, 4.3 at 3). The quantile comes from
    ``scipy.special.stdtrit`` (what ``scipy.stats.t.ppf`` calls, without the second it takes
    to import ``scipy.stats``; scipy is installed with autotune for Optuna's GP sampler).
    """
    from scipy.special import stdtrit  # imported here: `import autotune` stays light

    values = [math.log(t) for t in throughputs if t > 0]
    n = len(values)
    if n < 2 or n < len(throughputs):
        return math.inf
    sd = statistics.stdev(values)
    half = float(stdtrit(n - 1, 0.5 + CONFIDENCE / 2)) * sd / math.sqrt(n)
    # The interval is asymmetric on the linear scale; report its wider side.
    return 100.0 * (math.exp(half) - 1.0)


def labels_of(rows: Iterable[MeasuredRow]) -> Labels:
    """The names of the configs measured in ``rows`` (knob variants told apart)."""
    configs = {config_id(r.speculative_config): r.speculative_config for r in rows}
    return Labels(configs.values())


def score(rows: Sequence[MeasuredRow], labels: Labels = PLAIN) -> ConfigScore:
    """Robust statistics of one config's repeats (``rows`` share a config and cell), named by
    ``labels``."""
    tput = [r.output_throughput_tok_s for r in rows]
    med = statistics.median(tput)
    mad = statistics.median(abs(t - med) for t in tput)
    drafts = sum(r.num_drafts for r in rows)
    accepted = sum(r.num_accepted_tokens for r in rows)
    width = max((len(r.accepted_per_pos) for r in rows), default=0)
    per_pos = [0] * width
    for r in rows:
        for i, a in enumerate(r.accepted_per_pos):
            per_pos[i] += a
    first = rows[0]
    # Rows without the guard's fields (a recorded sweep's) count as not checked.
    loops = [x for r in rows if (x := getattr(r, "loop_share", None)) is not None]
    return ConfigScore(
        method=first.method,
        draft=first.draft,
        num_speculative_tokens=first.num_speculative_tokens,
        speculative_config=first.speculative_config,
        trial_ids=tuple(sorted({r.trial_id for r in rows})),
        throughputs=tuple(tput),
        median_tok_s=med,
        mad_tok_s=mad,
        score_tok_s=med - MAD_SCALE * mad,
        spread_pct=100.0 * (max(tput) - min(tput)) / med if med > 0 else 0.0,
        mean_acceptance_length=(1.0 + accepted / drafts) if drafts else None,
        acceptance_per_pos=tuple(a / drafts for a in per_pos) if drafts else (),
        loop_share=statistics.fmean(loops) if loops else None,
        labels=labels,
    )
