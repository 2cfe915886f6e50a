"""Choosing under a latency SLO: the best throughput among configs whose p99 latencies meet it.

The plain choice (:func:`autotune.recommend.choose.choose`) ranks configs by throughput alone.
Serving under an SLO ranks only the configs that meet it: each config's p99 TPOT / TTFT / ITL is
the median over its repeats of the per-measurement p99 (robust to one noisy repeat, like the
throughput score), and a config meets the SLO when every limited metric is at or under its
limit. A config with no recorded value for a limited metric does not meet it (nothing says it
does). Among those that meet it, the usual ranking, tie rule and screening apply. When none
meets it, :class:`NoConfigMeetsSLO` names the closest config: the one whose worst
``value / limit`` ratio is smallest.

:func:`pareto_front` gives, per level, the configs no other config beats on both median
throughput and p99 TPOT: the trade-off the report plots. :func:`choose_goodput` ranks a level
by median goodput (``objective: goodput``; vLLM's goodput per measurement is
:mod:`autotune.evidence.objectives`'s).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.errors import NoResultError
from autotune.evidence.cells import Evidence, Rows
from autotune.evidence.decide import PRACTICAL_TIE_PCT, Comparison, margin_pct, preference, rank
from autotune.evidence.objectives import METRICS, median_goodput
from autotune.evidence.scores import ConfigScore
from autotune.recommend.choose import Choice, choice_from_ranked, choose, choose_overall
from autotune.spec.methods import config_id
from autotune.spec.slo import SLO

if TYPE_CHECKING:
    from autotune.spec.study import StudySpec


@dataclass(frozen=True)
class LatencyScore:
    """One config's throughput score with its p99 latencies (medians over repeats)."""

    config: ConfigScore
    p99_ms: dict[str, float | None]
    """``p99_tpot_ms``, ``p99_ttft_ms``, ``p99_itl_ms``: median over repeats, None if unrecorded."""

    def ratio(self, slo: SLO) -> float:
        """The worst ``value / limit`` over the SLO's limits (<= 1 meets it; inf: unrecorded)."""
        worst = 0.0
        for metric, limit in slo.limits().items():
            value = self.p99_ms.get(metric)
            worst = max(worst, float("inf") if value is None else value / limit)
        return worst

    def meets(self, slo: SLO) -> bool:
        return self.ratio(slo) <= 1.0

    def describe(self, slo: SLO) -> str:
        """``ngram N=2: p99 TPOT 61.2 ms`` over the SLO's metrics."""
        names = {"p99_tpot_ms": "TPOT", "p99_ttft_ms": "TTFT", "p99_itl_ms": "ITL"}
        parts = []
        for metric in slo.limits() or {"p99_tpot_ms": 0.0}:
            value = self.p99_ms.get(metric)
            shown = "not recorded" if value is None else f"{value:.1f} ms"
            parts.append(f"p99 {names[metric]} {shown}")
        return f"{self.config.label()}: {', '.join(parts)}"


@dataclass(frozen=True)
class SLOChoice:
    """The recommendation for one (workload, concurrency) under an SLO."""

    slo: SLO
    plain: Choice
    """The choice by throughput alone (what is recommended without an SLO)."""
    meeting: tuple[LatencyScore, ...]
    """Configs that meet the SLO, ranked best first (screening runs excluded)."""
    scores: tuple[LatencyScore, ...]
    """Every rankable config of the cell with its latencies, in the plain ranking's order."""

    @property
    def best(self) -> LatencyScore | None:
        return self.meeting[0] if self.meeting else None

    @property
    def closest(self) -> LatencyScore | None:
        """The config nearest to meeting the SLO (smallest worst ratio to a limit)."""
        return min(self.scores, key=lambda s: s.ratio(self.slo), default=None)

    @property
    def changed(self) -> bool:
        """True when the SLO moves the recommendation away from the plain choice."""
        best = self.best
        return best is None or best.config.speculative_config != (
            self.plain.best.speculative_config
        )

    def as_choice(self) -> Choice:
        """The choice among the configs that meet the SLO, shaped like the plain one (so
        rendering and ``check`` take it as is); raises :class:`NoConfigMeetsSLO` when none do."""
        if not self.meeting:
            raise NoConfigMeetsSLO(self, self.plain.workload, self.plain.concurrency)
        plain = self.plain
        return choice_from_ranked(
            plain.workload,
            plain.workload_digest,
            plain.concurrency,
            [s.config for s in self.meeting],
            # Speedups stay relative to the baseline as measured, whether or not it meets the SLO.
            baseline=plain.baseline,
            screened=plain.screened,
            runs=plain.baseline_runs,
        )


class NoConfigMeetsSLO(NoResultError):
    """No measured config meets the SLO at this level (exit code 1); names the closest."""

    def __init__(self, choice: SLOChoice, workload: str, concurrency: int):
        self.choice = choice
        closest = choice.closest
        near = f"; closest: {closest.describe(choice.slo)}" if closest else ""
        super().__init__(
            f"no config meets the SLO ({choice.slo.describe()}) for {workload} at concurrency "
            f"{concurrency}{near}"
        )


def _latencies(rows: Rows, workload: str, concurrency: int) -> dict[str, dict[str, float | None]]:
    """Per config (by speculative_config), the median over repeats of each p99 metric."""
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in Evidence.of(rows).cell(workload, concurrency):
        for metric in METRICS:
            v = getattr(r, metric)
            if v is not None:
                values[config_id(r.speculative_config)][metric].append(float(v))
    return {
        key: {m: statistics.median(by[m]) if by.get(m) else None for m in METRICS}
        for key, by in values.items()
    }


def choose_slo(
    rows: Rows,
    workload: str,
    concurrency: int,
    slo: SLO,
    tie_pct: float = PRACTICAL_TIE_PCT,
) -> SLOChoice | None:
    """The SLO-aware choice for one cell; None when nothing was measured there.

    With an empty SLO it agrees with the plain choice. Check ``best`` (None: nothing meets the
    SLO) or call :func:`require_slo` to raise :class:`NoConfigMeetsSLO` instead.
    """
    evidence = Evidence.of(rows)
    plain = choose(evidence, workload, concurrency, tie_pct)
    if plain is None:
        return None
    lat = _latencies(evidence, workload, concurrency)
    empty: dict[str, float | None] = dict.fromkeys(METRICS)
    scores = tuple(
        LatencyScore(s, lat.get(config_id(s.speculative_config), empty)) for s in plain.ranked
    )
    # Those that meet it, ranked exactly as choose() ranks a cell (autotune.evidence.decide).
    by_config = {id(s.config): s for s in scores if s.meets(slo)}
    ranked = rank([s.config for s in by_config.values()], tie_pct)
    meeting = [by_config[id(c)] for c in ranked]
    return SLOChoice(slo=slo, plain=plain, meeting=tuple(meeting), scores=scores)


def require_slo(choice: SLOChoice, workload: str, concurrency: int) -> LatencyScore:
    """The SLO-meeting best of ``choice``, or :class:`NoConfigMeetsSLO` (exit 1)."""
    if choice.best is None:
        raise NoConfigMeetsSLO(choice, workload, concurrency)
    return choice.best


def pareto_front(scores: Sequence[LatencyScore], metric: str = "p99_tpot_ms") -> list[LatencyScore]:
    """Configs not dominated on (higher median throughput, lower p99 ``metric``), fastest first.

    Configs without a recorded ``metric`` are left out: they have no place on the trade-off.
    """
    known = [s for s in scores if s.p99_ms.get(metric) is not None]

    def dominated(a: LatencyScore) -> bool:
        ta, la = a.config.median_tok_s, a.p99_ms[metric]
        assert la is not None
        for b in known:
            tb, lb = b.config.median_tok_s, b.p99_ms[metric]
            assert lb is not None
            if tb >= ta and lb <= la and (tb > ta or lb < la):
                return True
        return False

    return sorted(
        (s for s in known if not dominated(s)), key=lambda s: s.config.median_tok_s, reverse=True
    )


def trade_off_rows(choice: SLOChoice, metric: str = "p99_tpot_ms") -> list[dict[str, Any]]:
    """One row per config of the cell for the report's throughput-vs-latency table and plot:
    its label, median tok/s, p99 latencies, whether it meets the SLO, is on the Pareto front,
    and is the recommendation under the SLO."""
    front = {id(s) for s in pareto_front(choice.scores, metric)}
    best = choice.best
    return [
        {
            "concurrency": choice.plain.concurrency,
            "config": s.config.label(prose=False),
            "speculative_config": s.config.speculative_config,
            "median_tok_s": s.config.median_tok_s,
            **s.p99_ms,
            "meets_slo": s.meets(choice.slo),
            "on_front": id(s) in front,
            "recommended": best is not None and s is best,
        }
        for s in choice.scores
    ]


def choose_overall_slo(
    rows: Rows,
    workload: str,
    concurrencies: Sequence[int],
    slo: SLO,
    tie_pct: float = PRACTICAL_TIE_PCT,
    weights: Mapping[int, float] | None = None,
) -> Choice | None:
    """One config for every level under the SLO: :func:`choose_overall` (with its ``weights``)
    over the configs that meet the SLO at every measured level. Raises :class:`NoConfigMeetsSLO` (naming the level
    where the fewest configs meet it) when no config meets it everywhere."""
    if weights is not None:
        concurrencies = [c for c in concurrencies if weights.get(c, 0.0) > 0]
    allowed: set[str] | None = None
    hardest: SLOChoice | None = None
    for level in concurrencies:
        c = choose_slo(rows, workload, level, slo, tie_pct)
        if c is None:
            continue
        keys = {config_id(s.config.speculative_config) for s in c.meeting}
        allowed = keys if allowed is None else allowed & keys
        if hardest is None or len(c.meeting) < len(hardest.meeting):
            hardest = c
    if hardest is None:
        return None
    if not allowed:
        raise NoConfigMeetsSLO(hardest, workload, hardest.plain.concurrency)
    kept = [r for r in Evidence.of(rows).rows if config_id(r.speculative_config) in allowed]
    return choose_overall(kept, workload, concurrencies, tie_pct, weights)


def choose_goodput(
    rows: Rows,
    workload: str,
    concurrency: int,
    slo: SLO,
    tie_pct: float = PRACTICAL_TIE_PCT,
) -> Choice | None:
    """The choice at one level under ``objective: goodput``: configs ranked by median goodput
    (requests/s meeting ``slo``) instead of throughput; ties (within ``tie_pct`` of the best
    goodput) go to the smaller N, then to no draft model, as in :func:`choose`. Configs without
    per-request data are not ranked. Raises :class:`NoConfigMeetsSLO` when no request of any
    config met the SLO; None when nothing was measured here."""
    under = choose_slo(rows, workload, concurrency, slo, tie_pct)
    if under is None:
        return None
    good = median_goodput(rows, workload, concurrency, slo)
    scored = [
        (good[config_id(s.config.speculative_config)], s)
        for s in under.scores
        if config_id(s.config.speculative_config) in good
    ]
    top = max((g for g, _ in scored), default=0.0)
    if top <= 0:
        raise NoConfigMeetsSLO(under, workload, concurrency)
    value = {id(s.config): g for g, s in scored}
    by_goodput = sorted((s.config for _, s in scored), key=lambda c: -value[id(c)])
    band = [c for c in by_goodput if margin_pct(value[id(c)], top) >= -tie_pct]
    tied = sorted(band, key=preference)
    ranked = (*tied, *(c for c in by_goodput if not any(c is t for t in band)))
    plain = under.plain
    best, runner = ranked[0], (ranked[1] if len(ranked) > 1 else None)
    comparison = None
    if runner is not None:
        # Goodput's margin: no per-level interval of a goodput ratio, so tie or decided.
        m = margin_pct(value[id(best)], value[id(runner)])
        comparison = Comparison(best, runner, m, "tie" if abs(m) <= tie_pct else "decided")
    return Choice(
        workload=plain.workload,
        workload_digest=plain.workload_digest,
        concurrency=plain.concurrency,
        best=best,
        runner_up=runner,
        baseline=plain.baseline,
        tied=tuple(tied),
        ranked=ranked,
        screened=plain.screened,
        tied_with=tuple(tied[1:]) if best is tied[0] else (),
        comparison=comparison,
        baseline_runs=plain.baseline_runs,
        drift_pct=plain.drift_pct,
    )


def answers_by_goodput(spec: StudySpec, slo: SLO) -> bool:
    """Whether a level of the study is answered by goodput: ``objective: goodput`` under an SLO
    that vLLM's goodput judges (TTFT or TPOT; an ITL-only SLO is chosen by :func:`choose_slo`)."""
    return spec.objective == "goodput" and (
        slo.p99_tpot_ms is not None or slo.p99_ttft_ms is not None
    )


def choose_level(
    rows: Rows, workload: str, concurrency: int, slo: SLO, goodput: bool
) -> Choice | None:
    """The answer at one level, as ``recommend`` gives it (and confirmation judges it): by
    goodput (``goodput``, :func:`answers_by_goodput`), else the best throughput among the configs
    meeting ``slo``, else (an empty SLO) the plain choice. Raises :class:`NoConfigMeetsSLO` when
    no config meets the SLO; None when nothing was measured there."""
    if goodput:
        return choose_goodput(rows, workload, concurrency, slo)
    if not slo:
        return choose(rows, workload, concurrency)
    under = choose_slo(rows, workload, concurrency, slo)
    return None if under is None else under.as_choice()
