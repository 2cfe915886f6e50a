"""Choosing the best engine config per (workload, concurrency) from measured repeats.

The comparison rule is :mod:`autotune.evidence.decide`'s (docs/answers.md): configs rank by
their median; those within 1 % of the top median tie and the preference picks among them (off,
then the smaller N, then no draft model); beyond 1 % the answer is the higher median, *decided*
when the 95 % interval of the ratio of the medians excludes 1 and *undecided* when it does not.
``Choice.comparison`` is the answer against the runner-up (its margin and verdict are the ones
every surface prints), ``Choice.vs_baseline`` the answer against off. A config measured once
where others were repeated (a screening run) is not ranked.

A choice is *low-confidence* (``Choice.low_confidence``) when its measurements cannot back it:

- the winner is a drafter and off was not measured at the level (a study stopped after its
  first engine: the model search starts the first method ahead of off), so no speedup is stated;

- the winner's repeats, or the baseline's, spread more than the study's
  ``measurement.max_spread_pct`` (``ConfigScore.noisy``, the same rule the report's "noisy" flag
  uses); a noisy baseline makes every speedup of the level unreliable;
- the answer is *undecided* against the runner-up, or (a drafter) against the baseline;
- the baseline *drifted*: the study ran it twice (the drift check, first and last engine of the
  study) and its median at this level moved by more than the study's ``precision_pct`` between
  the two runs (``Choice.drift_pct``). Speedups use both runs pooled.

A tie is not in itself low-confidence: tied configs are equivalent within 1 %, and the
preferred one costs least to deploy.

The scores, intervals, cells and the baseline's drift it chooses from are the evidence layer's
(:mod:`autotune.evidence`); this module holds the rules that answer from them.

A level is *degenerate* (``Choice.degenerate``) when most of its replies ended in a repeating
loop (:mod:`autotune.engine.degeneracy`): drafts are accepted on loops, so its winner was decided
on outputs that fake acceptance. The answer stands, but it carries the flag.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.evidence.cells import Evidence, Rows, baseline_runs
from autotune.evidence.decide import PRACTICAL_TIE_PCT, Comparison, compare, rank
from autotune.evidence.objectives import geometric_mean
from autotune.evidence.scores import (
    DEFAULT_PRECISION_PCT,
    ConfigScore,
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
    """The other configs within 1 % of the top median (the tie band the preference picked
    from): empty when the level is no tie."""
    comparison: Comparison | None = None
    """The answer against the runner-up (:func:`autotune.evidence.decide.compare`); None when
    nothing else was ranked at the level."""
    vs_baseline: Comparison | None = None
    """The answer against the baseline; None when the answer is off or off was not measured."""
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
    def verdict(self) -> str:
        """``tie``, ``undecided`` or ``decided`` against the runner-up; ``nothing compared``
        when nothing else was ranked at the level."""
        return "nothing compared" if self.comparison is None else self.comparison.verdict

    @property
    def tie(self) -> bool:
        return self.verdict == "tie"

    @property
    def undecided(self) -> bool:
        return self.verdict == "undecided"

    def tie_line(self) -> str:
        """The stderr note for a tie (after ``note: ``)."""
        assert self.comparison is not None
        others = (
            ", ".join(f"{o.label()} ({o.median_tok_s:,.1f} tok/s)" for o in self.tied_with)
            or self.comparison.other.label()
        )
        return (
            f"tie at concurrency {self.concurrency}: {self.best.label()} "
            f"({self.best.median_tok_s:,.1f} tok/s) is within 1% of {others} (margin "
            f"{self.comparison.margin_pct:+.1f}% over the runner-up); answering the preferred "
            f"{self.best.label()}"
        )

    @property
    def speedup(self) -> float | None:
        if self.baseline is None or self.baseline.median_tok_s <= 0:
            return None
        return self.best.median_tok_s / self.baseline.median_tok_s

    @property
    def margin_pct(self) -> float | None:
        """The answer's median over the runner-up's, ``100·(answer/other − 1)`` (the one margin
        every surface states; negative only inside a tie, at most 1 % below)."""
        return None if self.comparison is None else self.comparison.margin_pct

    def low_confidence(
        self, max_spread_pct: float, precision_pct: float = DEFAULT_PRECISION_PCT
    ) -> tuple[str, ...]:
        """Why the measurements cannot back this choice (empty: they can): the texts of
        :meth:`reasons`."""
        return tuple(text for _, text in self.reasons(max_spread_pct, precision_pct))

    def reasons(
        self, max_spread_pct: float, precision_pct: float = DEFAULT_PRECISION_PCT
    ) -> tuple[tuple[str, str], ...]:
        """(kind, text) per problem (module docstring): ``no-baseline``, ``noisy-repeats``,
        ``noisy-baseline``, ``undecided``, ``drift``. ``max_spread_pct`` and ``precision_pct`` are the study's
        ``measurement.max_spread_pct`` and ``precision_pct``.

        Meant for one level's choice (``choose``); an all-levels choice (``choose_overall``)
        carries no per-level noise, so judge its levels one by one.
        """
        best, base = self.best, self.baseline
        reasons = []
        if best.noisy(max_spread_pct):
            reasons.append(
                (
                    "noisy-repeats",
                    f"the repeats of {best.label()} spread {best.spread_pct:.1f}% "
                    f"(over the study's limit of {max_spread_pct:g}%)",
                )
            )
        if base is None and not best.is_baseline:
            reasons.append(
                (
                    "no-baseline",
                    "off (no speculation) was not measured here, so no speedup is stated and "
                    f"{best.label()} is not known to beat it",
                )
            )
        if base is not None and not best.is_baseline and base.noisy(max_spread_pct):
            speedup = f"the {self.speedup:.2f}x speedup" if self.speedup else "the speedup"
            reasons.append(
                (
                    "noisy-baseline",
                    f"the baseline's repeats spread {base.spread_pct:.1f}% (over the study's limit "
                    f"of {max_spread_pct:g}%), so {speedup} rests on a noisy baseline",
                )
            )
        compared = [self.comparison]
        if self.vs_baseline is not None and self.vs_baseline.other is not self.runner_up:
            compared.append(self.vs_baseline)
        for c in compared:
            if c is not None and c.verdict == "undecided":
                role = "the baseline" if c.other.is_baseline else f"the runner-up {c.other.label()}"
                reasons.append(
                    (
                        "undecided",
                        f"{best.label()} vs {role}: median {best.median_tok_s:,.1f} vs "
                        f"{c.other.median_tok_s:,.1f} tok/s ({c.margin_pct:+.1f}%), undecided (the "
                        f"95% interval of their ratio, ±{_pct_or_unbounded(c.interval_pct)}, "
                        "contains 1)",
                    )
                )
        if self.drift_pct is not None and abs(self.drift_pct) > precision_pct:
            first, last = self.baseline_runs[0], self.baseline_runs[-1]
            reasons.append(
                (
                    "drift",
                    f"the baseline drifted {self.drift_pct:+.1f}% during the study ({first:,.1f} "
                    f"then {last:,.1f} tok/s, over the study's precision of ±{precision_pct:g}%)",
                )
            )
        return tuple(reasons)


def _pct_or_unbounded(value: float) -> str:
    return f"{value:.1f}%" if math.isfinite(value) else "unbounded"


def _mean_of(rows: Sequence[MeasuredRow], name: str) -> float | None:
    """The mean of a guard field over the rows that have it, weighted by their requests."""
    pairs = [(value, r.num_requests) for r in rows if (value := getattr(r, name, None)) is not None]
    total = sum(n for _, n in pairs)
    return sum(v * n for v, n in pairs) / total if total else None


def screen(scores: Iterable[ConfigScore]) -> tuple[list[ConfigScore], list[ConfigScore]]:
    """Split one cell's configs into those that may be chosen and screening runs.

    A config measured once where others were repeated on one engine start is a screening run:
    the model-guided search stops repeating a config whose first run shows it cannot win there,
    and one run never wins against repeated ones. Repeats count per engine start: the drift
    check's second start of the baseline (and a confirmation start) adds runs on another engine,
    not repeats the others were denied, so in a study of ``repeats: 1`` every config stays
    choosable.
    """
    scores = list(scores)
    least = min(2, max((_runs_per_start(s) for s in scores), default=0))
    return [s for s in scores if s.repeats >= least], [s for s in scores if s.repeats < least]


def _runs_per_start(s: ConfigScore) -> int:
    """A config's runs per engine start (its trials), rounded up."""
    return -(-s.repeats // max(1, len(s.trial_ids)))


def choose(
    rows: Rows,
    workload: str,
    concurrency: int,
    tie_pct: float = PRACTICAL_TIE_PCT,
) -> Choice | None:
    """The recommendation for one cell, or None when nothing was measured there. ``rows``: a
    study's rows, or better the :class:`autotune.evidence.cells.Evidence` built from them once."""
    evidence = Evidence.of(rows)
    cell = evidence.cell(workload, concurrency)
    digest = evidence.digest(workload)
    if not cell or digest is None:
        return None
    groups: dict[str, list[MeasuredRow]] = defaultdict(list)
    for r in cell:
        groups[config_id(r.speculative_config)].append(r)
    names = labels_of(rows.rows if isinstance(rows, Evidence) else rows)
    scores, screened = screen(score(g, names) for g in groups.values())
    ranked = rank(scores, tie_pct)
    # Off measured once where a speculative config was far ahead (the model search screens its
    # repeats) is never the answer, but it still states the answer's speedup.
    off = next((s for s in (*ranked, *screened) if s.is_baseline), None)
    return choice_from_ranked(
        workload,
        digest,
        concurrency,
        ranked,
        tie_pct,
        baseline=off,
        screened=tuple(screened),
        runs=baseline_runs(cell),
        cell=cell,
    )


def choice_from_ranked(
    workload: str,
    digest: str,
    concurrency: int,
    ranked: Sequence[ConfigScore],
    tie_pct: float = PRACTICAL_TIE_PCT,
    *,
    baseline: ConfigScore | None = None,
    screened: tuple[ConfigScore, ...] = (),
    runs: tuple[float, ...] = (),
    cell: Sequence[MeasuredRow] = (),
    statistical: bool = True,
) -> Choice:
    """A :class:`Choice` from ``ranked`` (best first, :func:`autotune.evidence.decide.rank`):
    the answer's comparisons with the runner-up and the baseline, its tie band, the drift."""
    best = ranked[0]
    runner = ranked[1] if len(ranked) > 1 else None
    if baseline is None:
        baseline = next((s for s in ranked if s.is_baseline), None)

    def cmp(other: ConfigScore) -> Comparison:
        c = compare(best, other, tie_pct)
        if not statistical and c.verdict == "undecided":
            # Pooled scores (all levels at once) have no one level's interval.
            return Comparison(best, other, c.margin_pct, "decided")
        return c

    comparison = None if runner is None else cmp(runner)
    vs_base = None if baseline is None or best.is_baseline else cmp(baseline)
    top = max(s.median_tok_s for s in ranked)
    band = (
        tuple(
            s for s in ranked if s is not best and 100.0 * (1.0 - s.median_tok_s / top) <= tie_pct
        )
        if top > 0
        else ()
    )
    drift = 100.0 * (runs[-1] / runs[0] - 1.0) if len(runs) > 1 and runs[0] > 0 else None
    return Choice(
        workload=workload,
        workload_digest=digest,
        concurrency=concurrency,
        best=best,
        runner_up=runner,
        baseline=baseline,
        tied=(best, *band),
        ranked=tuple(ranked),
        screened=screened,
        tied_with=band,
        comparison=comparison,
        vs_baseline=vs_base,
        drift_pct=drift,
        baseline_runs=runs,
        loop_share=_mean_of(cell, "loop_share"),
        distinct_4gram_ratio=_mean_of(cell, "distinct_4gram_ratio"),
        loop_at_max_tokens_share=_mean_of(cell, "loop_at_max_tokens_share"),
    )


def choose_overall(
    rows: Rows,
    workload: str,
    concurrencies: Sequence[int],
    tie_pct: float = PRACTICAL_TIE_PCT,
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
    evidence = Evidence.of(rows)
    per_level = [choose(evidence, workload, c, tie_pct) for c in concurrencies]
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
        top = level.ranked[0].median_tok_s if level.ranked else 0.0
        # A screening run is a real measurement of a config that loses at this level: it counts
        # toward the config's standing over all levels.
        for s in (*level.ranked, *level.screened):
            common[config_id(s.speculative_config)].append(s)
        if top <= 0:
            return None
    groups = [g for g in common.values() if len(g) == len(levels)]
    if not groups:
        return None
    # Each proxy's median is the (weighted) geometric mean of its level medians: ranking and
    # margin by it are ranking and margin by the geometric mean of (median / level's best).
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
            score_tok_s=geo([max(s.median_tok_s, 1e-9) for s in g]),
            spread_pct=max(s.spread_pct for s in g),
            mean_acceptance_length=g[0].mean_acceptance_length,
            acceptance_per_pos=g[0].acceptance_per_pos,
            labels=g[0].labels,
        )
        for g in groups
    ]
    ranked = rank(proxies, tie_pct)
    return choice_from_ranked(
        workload, levels[0].workload_digest, 0, ranked, tie_pct, statistical=False
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
