"""Choosing the best engine config per (workload, concurrency) from measured repeats.

Rank by a robust lower estimate of throughput — median − 1.4826·MAD over repeats, so one lucky
run never wins — and treat configs within ``tie_pct`` of the best as tied, preferring the smaller
N, then no draft model over one. A config measured once where others were repeated (a screening
run) is not ranked. The baseline (N = 0) competes too: when nothing beats it by more than the tie
margin, the answer is "off".

A choice is *low-confidence* (``Choice.low_confidence``) when its measurements cannot back it:

- the winner's repeats, or the baseline's, spread more than the study's
  ``measurement.max_spread_pct`` (``ConfigScore.noisy``, the same rule the report's "noisy" flag
  uses); a noisy baseline makes every speedup of the level unreliable;
- the winner's margin over the runner-up, or over the baseline when the winner is a drafter, is
  inside their noise: each config's noise interval is median ± 1.4826·MAD over its repeats (the
  MAD term of the ranking score, so the winner's interval starts at its score), and the two
  intervals overlap. Configs with no measured noise (MAD 0 on both sides, e.g. one repeat each)
  are never "inside the noise": nothing says they are;
- the baseline *drifted*: the study ran it twice (the drift check, first and last engine of the
  study) and its median at this level moved by more than the study's ``precision_pct`` between
  the two runs (``Choice.drift_pct``). Speedups use both runs pooled.

A level is a *tie* (``Choice.tie``, ``Choice.tied_with``) when the top-scored config's margin over
the runner-up, or over the baseline, is inside their combined measured uncertainty: each config's
median carries a 95% confidence interval (Student t on log throughput, the sequential-stopping
rule's, :func:`autotune.evidence.scores.median_ci_halfwidth_pct`) and the log ratio of the two
medians is within ``sqrt(h1² + h2²)`` of 0, i.e. the ratio's 95% interval contains 1. Inside a tie
the usual preference picks the answer (no speculation first, then the smaller N, then no draft
model), so a drafter that ties with the baseline answers "off": its speedup is not established, and
off costs nothing to deploy. A tie is not in itself low-confidence (the answer is the preferred one
of equivalent configs); its own line says so. Configs without measured noise (a single run, or
identical runs, on both sides) never tie. An interval wider than ±100%
(:data:`autotune.evidence.scores.STATABLE_PCT`; two very noisy runs a side) is not printed as a
number: the tie is stated *undecided*, with the repeats and spread that made it so
(:class:`autotune.evidence.scores.RatioInterval`).

The scores, intervals, cells and the baseline's drift it chooses from are the evidence layer's
(:mod:`autotune.evidence`); this module holds the rules that answer from them.

A level is *degenerate* (``Choice.degenerate``) when most of its replies ended in a repeating
loop (:mod:`autotune.engine.degeneracy`): drafts are accepted on loops, so its winner was decided
on outputs that fake acceptance. The answer stands, but it carries the flag, and `recommend`
says so on stderr and in --json.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.evidence.cells import baseline_runs, latest_digest
from autotune.evidence.objectives import geometric_mean
from autotune.evidence.scores import (
    DEFAULT_PRECISION_PCT,
    DEFAULT_TIE_PCT,
    ConfigScore,
    RatioInterval,
    labels_of,
    score,
)
from autotune.spec.methods import config_id

if TYPE_CHECKING:
    # What choosing reads: the store's measurement record (a report frame's rows are turned
    # back into such records, see autotune.report.frames).
    from autotune.store.records import MeasurementRecord as MeasuredRow


@dataclass(frozen=True)
class Choice:
    """The recommendation for one (workload, concurrency)."""

    workload: str
    workload_digest: str
    concurrency: int
    best: ConfigScore
    runner_up: ConfigScore | None
    baseline: ConfigScore | None
    tied: tuple[ConfigScore, ...]
    ranked: tuple[ConfigScore, ...]
    screened: tuple[ConfigScore, ...] = ()
    """Screening runs (measured once where others were repeated): never chosen here."""
    tied_with: tuple[ConfigScore, ...] = ()
    """The configs the answer is statistically tied with (module docstring): empty when the
    level is no tie."""
    drift_pct: float | None = None
    """The baseline's drift at this level: (second run's median - first's) / first's, in
    percent; None unless the baseline ran twice (the drift check)."""
    baseline_runs: tuple[float, ...] = ()
    """The baseline's median at this level in each of its runs (trials), oldest first."""
    loop_share: float | None = None
    """The share of the level's replies (every config's, pooled over measurements) that ended
    in a repeating loop; None where no measurement was checked (the guard,
    :mod:`autotune.engine.degeneracy`)."""
    distinct_4gram_ratio: float | None = None
    loop_at_max_tokens_share: float | None = None

    @property
    def degenerate(self) -> bool:
        """Whether the level is flagged: most replies were loops, so its winner was decided on
        outputs that fake acceptance."""
        from autotune.engine.degeneracy import LOOP_SHARE_LIMIT

        return self.loop_share is not None and self.loop_share > LOOP_SHARE_LIMIT

    def degenerate_line(self) -> str:
        """The stderr note for a degenerate level (after ``note: ``)."""
        from autotune.engine.degeneracy import flag_line

        line = flag_line(
            self.loop_share or 0.0,
            self.distinct_4gram_ratio,
            f"{self.workload} concurrency {self.concurrency}",
        )
        return f"{line}; {self.best.label()} was chosen on them"

    @property
    def tie(self) -> bool:
        return bool(self.tied_with)

    def tie_line(self) -> str:
        """The stderr note for a tie (after ``note: ``)."""
        others = ", ".join(
            f"{o.label()} (margin {_diff(self.best.median_tok_s, o.median_tok_s)}, "
            f"{_tie_words(self.best.tie_interval(o))})"
            for o in self.tied_with
        )
        return (
            f"tie at concurrency {self.concurrency}: {self.best.label()} "
            f"({self.best.median_tok_s:,.1f} tok/s) vs {others}, 95% intervals of the median "
            f"ratio; answering the preferred {self.best.label()}"
        )

    def tie_cell(self) -> str:
        """`--explain`'s ``tie ±%`` cell: the widest interval the answer is tied within, or
        ``undecided`` (:class:`RatioInterval`); ``-`` when the level is no tie."""
        widest = max(
            (self.best.tie_interval(o) for o in self.tied_with),
            key=lambda i: i.halfwidth_pct,
            default=None,
        )
        return "-" if widest is None else widest.cell()

    @property
    def speedup(self) -> float | None:
        if self.baseline is None or self.baseline.median_tok_s <= 0:
            return None
        return self.best.median_tok_s / self.baseline.median_tok_s

    @property
    def margin_pct(self) -> float | None:
        """How far the best's median is above the runner-up's, in percent: the one margin
        `--explain`'s ``margin %``, the tie note and the low-confidence note all state (negative
        when a tie answers the preferred config with the lower median)."""
        if self.runner_up is None or self.runner_up.median_tok_s <= 0:
            return None
        return 100.0 * (self.best.median_tok_s / self.runner_up.median_tok_s - 1.0)

    def low_confidence(
        self, max_spread_pct: float, precision_pct: float = DEFAULT_PRECISION_PCT
    ) -> tuple[str, ...]:
        """Why the measurements cannot back this choice (empty: they can), one reason per
        problem; see the module docstring for the rule. ``max_spread_pct`` and
        ``precision_pct`` are the study's ``measurement.max_spread_pct`` and ``precision_pct``.

        Meant for one level's choice (``choose``); an all-levels choice (``choose_overall``)
        carries no per-level noise, so judge its levels one by one.
        """
        best, base = self.best, self.baseline
        reasons = []
        if best.noisy(max_spread_pct):
            reasons.append(
                f"the repeats of {best.label()} spread {best.spread_pct:.1f}% "
                f"(over the study's limit of {max_spread_pct:g}%)"
            )
        if base is not None and not best.is_baseline and base.noisy(max_spread_pct):
            speedup = f"the {self.speedup:.2f}x speedup" if self.speedup else "the speedup"
            reasons.append(
                f"the baseline's repeats spread {base.spread_pct:.1f}% (over the study's limit "
                f"of {max_spread_pct:g}%), so {speedup} rests on a noisy baseline"
            )
        others = [self.runner_up]
        if not best.is_baseline and not (self.runner_up and self.runner_up.is_baseline):
            others.append(base)
        for other in others:
            if other is not None and best.within_noise(other):
                reasons.append(self._inside_noise(other))
        if self.drift_pct is not None and abs(self.drift_pct) > precision_pct:
            first, last = self.baseline_runs[0], self.baseline_runs[-1]
            reasons.append(
                f"the baseline drifted {self.drift_pct:+.1f}% during the study ({first:,.1f} "
                f"then {last:,.1f} tok/s, over the study's precision of ±{precision_pct:g}%)"
            )
        return tuple(reasons)

    def _inside_noise(self, other: ConfigScore) -> str:
        best = self.best
        role = "the baseline" if other.is_baseline else f"the runner-up {other.label()}"
        diff = (
            f"{100.0 * (best.median_tok_s / other.median_tok_s - 1.0):+.1f}%"
            if other.median_tok_s > 0
            else "-"
        )
        return (
            f"{best.label()} vs {role}: median {best.median_tok_s:,.1f} vs "
            f"{other.median_tok_s:,.1f} tok/s ({diff}), inside their noise "
            f"(± {_pct(best.noise_tok_s, best.median_tok_s)} and "
            f"± {_pct(other.noise_tok_s, other.median_tok_s)}, 1.4826·MAD over repeats)"
        )


def _tie_words(interval: RatioInterval) -> str:
    return f"undecided: {interval.why}" if interval.undecided else interval.text()


def _diff(value: float, reference: float) -> str:
    return f"{100.0 * (value / reference - 1.0):+.1f}%" if reference > 0 else "-"


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole > 0 else "-"


def _mean_of(rows: Sequence[MeasuredRow], name: str) -> float | None:
    """The mean of a guard field over the rows that have it, weighted by their requests."""
    pairs = [(value, r.num_requests) for r in rows if (value := getattr(r, name, None)) is not None]
    total = sum(n for _, n in pairs)
    return sum(v * n for v, n in pairs) / total if total else None


def _preference(s: ConfigScore) -> tuple[int, int]:
    # Among tied configs: smaller N first (baseline N=0 first of all), then no draft model.
    return (s.num_speculative_tokens, 0 if s.draft is None else 1)


def rank(
    scores: Iterable[ConfigScore], tie_pct: float = DEFAULT_TIE_PCT, statistical: bool = True
) -> list[ConfigScore]:
    """Best first: the tie group of the top score ordered by preference, then the rest.

    The tie group holds the configs within ``tie_pct`` of the top score and, with
    ``statistical``, the runner-up and the baseline where the top-scored config's median is
    statistically tied with theirs (``ConfigScore.ties_with``; off for scores that are not one
    level's repeats). Only those two: a config that is merely very noisy elsewhere in the
    ranking does not capture the answer."""
    by_score = sorted(scores, key=lambda s: s.score_tok_s, reverse=True)
    if not by_score:
        return []
    top = by_score[0]
    threshold = top.score_tok_s * (1.0 - tie_pct / 100.0)
    contenders = [*by_score[1:2], *(s for s in by_score[1:] if s.is_baseline)]
    stat = [s for s in contenders if statistical and top.ties_with(s)]

    def in_group(s: ConfigScore) -> bool:
        return s.score_tok_s >= threshold or any(s is t for t in stat)

    tied = sorted((s for s in by_score if in_group(s)), key=_preference)
    rest = [s for s in by_score if not in_group(s)]
    return tied + rest


def screen(scores: Iterable[ConfigScore]) -> tuple[list[ConfigScore], list[ConfigScore]]:
    """Split one cell's configs into those that may be chosen and screening runs.

    A config measured once where others were repeated is a screening run: the model-guided
    search stops repeating a config whose first run shows it cannot win there, and one run
    never wins against repeated ones.
    """
    scores = list(scores)
    least = min(2, max((s.repeats for s in scores), default=0))
    return [s for s in scores if s.repeats >= least], [s for s in scores if s.repeats < least]


def choose(
    rows: Sequence[MeasuredRow],
    workload: str,
    concurrency: int,
    tie_pct: float = DEFAULT_TIE_PCT,
    statistical: bool = True,
) -> Choice | None:
    """The recommendation for one cell, or None when nothing was measured there.
    ``statistical=False`` ranks by the 1% tie rule alone (no statistical ties: the search
    benchmarks judge the search, not the tie policy)."""
    digest = latest_digest(rows, workload)
    cell = [
        r
        for r in rows
        if r.workload == workload and r.concurrency == concurrency and r.workload_digest == digest
    ]
    if not cell or digest is None:
        return None
    groups: dict[str, list[MeasuredRow]] = defaultdict(list)
    for r in cell:
        groups[config_id(r.speculative_config)].append(r)
    names = labels_of(rows)
    scores, screened = screen(score(g, names) for g in groups.values())
    # A statistical tie with the top-scored config joins the 1% tie group: the preference
    # (off, then smaller N) picks among them.
    ranked = rank(scores, tie_pct, statistical)
    best = ranked[0]
    top = max(scores, key=lambda s: s.score_tok_s)
    threshold = top.score_tok_s * (1.0 - tie_pct / 100.0)
    runner = sorted(scores, key=lambda s: s.score_tok_s, reverse=True)[1:2]
    contenders = [*runner, *(s for s in scores if s.is_baseline and s is not top)]
    group = [
        s
        for s in ranked
        if s.score_tok_s >= threshold
        or (statistical and any(s is c and top.ties_with(c) for c in contenders))
    ]
    # The answer's tie: the configs of its group it is statistically tied with (a config
    # inside the 1% rule alone is no statistical tie).
    tied_with = tuple(s for s in group if statistical and s is not best and best.ties_with(s))
    baseline = next((s for s in scores if s.is_baseline), None)
    runs = baseline_runs(cell)
    drift = 100.0 * (runs[-1] / runs[0] - 1.0) if len(runs) > 1 and runs[0] > 0 else None
    return Choice(
        workload=workload,
        workload_digest=digest,
        concurrency=concurrency,
        best=best,
        runner_up=ranked[1] if len(ranked) > 1 else None,
        baseline=baseline,
        tied=tuple(group),
        ranked=tuple(ranked),
        screened=tuple(screened),
        tied_with=tied_with,
        drift_pct=drift,
        baseline_runs=runs,
        loop_share=_mean_of(cell, "loop_share"),
        distinct_4gram_ratio=_mean_of(cell, "distinct_4gram_ratio"),
        loop_at_max_tokens_share=_mean_of(cell, "loop_at_max_tokens_share"),
    )


def choose_overall(
    rows: Sequence[MeasuredRow],
    workload: str,
    concurrencies: Sequence[int],
    tie_pct: float = DEFAULT_TIE_PCT,
    weights: Mapping[int, float] | None = None,
) -> Choice | None:
    """One config for every concurrency level at once: the config measured at all levels (a
    screening run counts: it is a real measurement of a config that loses there) whose
    geometric mean of (score / that level's best score) is highest, with the same tie rule.

    ``weights`` (level -> weight > 0; the levels not in it are left out) makes it a weighted
    geometric mean: a traffic mix's shares of time, or the log-concurrency interpolation
    between two measured neighbours (:func:`neighbour_weights`)."""
    if weights is not None:
        concurrencies = [c for c in concurrencies if weights.get(c, 0.0) > 0]
    per_level = [choose(rows, workload, c, tie_pct) for c in concurrencies]
    levels = [c for c in per_level if c is not None]
    if not levels:
        return None
    if len(levels) == 1:
        return levels[0]
    w = [1.0 if weights is None else weights[lv.concurrency] for lv in levels]

    def geo(values: Sequence[float]) -> float:
        return geometric_mean(values, w)

    common: dict[str, list[ConfigScore]] = defaultdict(list)
    for level in levels:
        top = level.ranked[0].score_tok_s if level.ranked else 0.0
        # A screening run is a real measurement of a config that loses at this level: it counts
        # toward the config's standing over all levels.
        for s in (*level.ranked, *level.screened):
            common[config_id(s.speculative_config)].append(s)
        if top <= 0:
            return None
    candidates = []
    for group in common.values():
        if len(group) != len(levels):
            continue
        ratios = [
            max(s.score_tok_s, 1e-9) / max(level.ranked[0].score_tok_s, 1e-9)
            for s, level in zip(group, levels, strict=True)
        ]
        # Carry the geomean as the score so rank() applies the tie rule to it.
        candidates.append((group, geo(ratios)))
    if not candidates:
        return None
    proxies = [
        ConfigScore(
            method=g[0].method,
            draft=g[0].draft,
            num_speculative_tokens=g[0].num_speculative_tokens,
            speculative_config=g[0].speculative_config,
            trial_ids=tuple(sorted({t for s in g for t in s.trial_ids})),
            throughputs=tuple(t for s in g for t in s.throughputs),
            median_tok_s=geo([max(s.median_tok_s, 1e-9) for s in g]),
            mad_tok_s=0.0,
            score_tok_s=g_score,
            spread_pct=max(s.spread_pct for s in g),
            mean_acceptance_length=g[0].mean_acceptance_length,
            acceptance_per_pos=g[0].acceptance_per_pos,
            labels=g[0].labels,
        )
        for g, g_score in candidates
    ]
    # The proxies pool every level's repeats: no statistical tie between them.
    ranked = rank(proxies, tie_pct, statistical=False)
    threshold = max(s.score_tok_s for s in proxies) * (1.0 - tie_pct / 100.0)
    baseline = next((s for s in proxies if s.is_baseline), None)
    return Choice(
        workload=workload,
        workload_digest=levels[0].workload_digest,
        concurrency=0,
        best=ranked[0],
        runner_up=ranked[1] if len(ranked) > 1 else None,
        baseline=baseline,
        tied=tuple(s for s in ranked if s.score_tok_s >= threshold),
        ranked=tuple(ranked),
    )


def neighbour_weights(concurrency: int, levels: Sequence[int]) -> dict[int, float] | None:
    """How an unmeasured ``concurrency`` between two measured ``levels`` is answered: its two
    neighbours, weighted by distance in log-concurrency (2 between 1 and 4: 0.5 each; 3: 0.21
    and 0.79). The measured level itself when it is one; None outside the measured range (no
    extrapolation)."""
    ordered = sorted(set(levels))
    if concurrency in ordered:
        return {concurrency: 1.0}
    lower = [c for c in ordered if c < concurrency]
    upper = [c for c in ordered if c > concurrency]
    if not lower or not upper:
        return None
    lo, hi = lower[-1], upper[0]
    w_hi = (math.log(concurrency) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return {lo: 1.0 - w_hi, hi: w_hi}


def traffic_weights(mix: Mapping[int, float], levels: Sequence[int]) -> dict[int, float]:
    """A traffic mix (concurrency -> share of time) as weights on the measured ``levels``: a
    measured level keeps its share, an unmeasured one between two measured levels splits its
    share over them (:func:`neighbour_weights`). Raises ValueError naming a level outside the
    measured range."""
    out: dict[int, float] = defaultdict(float)
    for concurrency, share in sorted(mix.items()):
        split = neighbour_weights(concurrency, levels)
        if split is None:
            raise ValueError(
                f"concurrency {concurrency} lies outside the measured levels "
                f"({', '.join(map(str, sorted(set(levels))))}); autotune does not extrapolate"
            )
        for level, w in split.items():
            out[level] += share * w
    return dict(out)
