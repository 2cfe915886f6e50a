"""``check --measure``'s speedup gate: the deployed config's speedup over the baseline measured
again in interleaved pairs and judged against the study's by a one-sided rule (pure arithmetic;
``autotune.verify.remeasure`` measures, :mod:`autotune.recommend.measured` judges acceptance
and renders).

A gate asks one question: *has the speedup fallen by more than the band?* The band is the fall
that matters (``--speedup-tolerance``, default :data:`DEFAULT_SPEEDUP_TOLERANCE_PCT`); it is
not widened by noise. Noise goes into the 95 % interval of now / study instead, and
:func:`autotune.evidence.decide.held` decides: *held* when the whole interval lies above a fall
of the band, *fell* when it lies below, *undecided* otherwise. Noise therefore never passes a
level: a runner too loaded to measure the speedup gets "undecided (noisy runner): rerun", not a
tie inside a band it widened.

The interval (:func:`judge_level`) combines, in quadrature:

- the pairs' own: a t-interval of the log ratios of the interleaved (target, baseline) pairs,
  which shrinks with pairs (a load that comes and goes slows both halves of a pair alike);
- the study's own runs: its target's and baseline's intervals where it repeated each, else the
  noise of one unpaired run of each as this check measured it;
- the start-to-start noise: the study's speedup is one ratio of two engine starts and this
  check's is another, so their ratio carries four starts' noise, √2 times that of a drift (two
  starts of the baseline). The drift is the study's own where its drift check measured it
  (its largest baseline drift), else this check's baseline against the study's at the level (one
  more start of the same config, on this runner: a load on the runner shows there, which is
  right, as the study's speedup is then not known to hold here).

Pairs shrink only the first part: a level where the other two alone (the study's runs' at its
quantile's limit) span the band's edge is undecided at once, with that reason ("starts"), rather
than after ``--max-pairs`` pairs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Z95 = 1.959964
"""The normal quantile of a two-sided 95 % interval."""
DEFAULT_SPEEDUP_TOLERANCE_PCT = 10.0
"""The fall a speedup may show before the gate fails when none is given (``autotune verify``'s
CPU default for a server-path speedup against the study's)."""


@dataclass(frozen=True)
class LevelSpeedup:
    concurrency: int
    study: float | None
    measured: float | None
    study_tok_s: float | None = None
    measured_tok_s: float | None = None
    pairs: int = 0
    """Interleaved (target, baseline) pairs measured at this level (0: not paired)."""
    verdict: str | None = None
    """:func:`autotune.evidence.decide.held` of now against the study (paired levels)."""
    interval_pct: float | None = None
    """± percent of the 95 % interval of now / study (None: unbounded)."""
    outcome: str = ""
    """``ok``, ``fell`` or ``undecided`` (paired levels; "" judged by the band alone)."""
    band_pct: float | None = None
    """The fall this level was judged against (paired levels)."""
    baseline_drift_pct: float | None = None
    """This check's baseline against the study's at this level, ``100·(now/study − 1)``: one
    more start-to-start drift of the same config (paired levels)."""
    start_noise_pct: float | None = None
    """± percent of the start-to-start part of the interval (paired levels)."""
    undecided_by: str = ""
    """Why an undecided level stayed so: ``pairs`` (more pairs could decide) or ``starts`` (the
    noise of the engine starts alone, the study's runs and the start-to-start drift, spans the
    band's edge: more pairs cannot narrow it)."""

    @property
    def change(self) -> float | None:
        """measured / study - 1."""
        if not self.study or self.measured is None:
            return None
        return self.measured / self.study - 1.0


@dataclass(frozen=True)
class SpeedupCheck:
    levels: tuple[LevelSpeedup, ...]
    tolerance: float | None
    """The band a speedup may fall by (fraction), None: not judged."""
    noise: float | None
    """The study's start-to-start noise (largest baseline drift), None: not measured."""
    noise_source: str
    """What the band and the noise are, in words, for the output."""

    max_pairs: int = 0
    """The cap on interleaved pairs per level (0: not paired)."""

    def fell(self) -> tuple[int, ...]:
        if self.tolerance is None:
            return ()
        tol = self.tolerance
        return tuple(
            lv.concurrency
            for lv in self.levels
            if (lv.outcome == "fell")
            or (not lv.outcome and lv.change is not None and lv.change < -tol)
        )

    def undecided(self) -> tuple[int, ...]:
        """Levels left undecided: the runner (or the study) was too noisy to tell."""
        return tuple(lv.concurrency for lv in self.levels if lv.outcome == "undecided")

    def undecided_by_starts(self) -> tuple[int, ...]:
        """The undecided levels more pairs could not decide (start-to-start noise)."""
        return tuple(
            lv.concurrency
            for lv in self.levels
            if lv.outcome == "undecided" and lv.undecided_by == "starts"
        )

    @property
    def passed(self) -> bool:
        return not self.fell() and not self.undecided()


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def speedups(
    study_config: Sequence[Any],
    study_baseline: Sequence[Any],
    now_config: Sequence[Any],
    now_baseline: Sequence[Any],
) -> tuple[LevelSpeedup, ...]:
    """Per concurrency level: median tok/s of the config over the baseline's (pooled over the
    baseline's runs), in the study and now."""
    levels = sorted({r.concurrency for r in now_config})
    out = []
    for c in levels:

        def med(runs: Sequence[Any], level: int = c) -> float | None:
            return _median([r.output_throughput_tok_s for r in runs if r.concurrency == level])

        sc, sb, mc, mb = med(study_config), med(study_baseline), med(now_config), med(now_baseline)
        out.append(
            LevelSpeedup(
                c,
                sc / sb if sc and sb else None,
                mc / mb if mc and mb else None,
                sc,
                mc,
            )
        )
    return tuple(out)


def speedup_band(
    drift_pcts: Sequence[float], user_pct: float | None, default_pct: float | None = None
) -> tuple[float | None, float | None, str]:
    """(band, noise, words): the band is the fall that matters, the user's tolerance or
    ``default_pct`` (None with neither: the speedup is not judged); the noise is the study's
    start-to-start noise (the largest |drift| of its baseline between two engine starts, the
    drift check), None where it measured none. The noise never widens the band: it widens the
    interval (:func:`judge_level`)."""
    noise = max((abs(d) for d in drift_pcts), default=None)
    pct = user_pct if user_pct is not None else default_pct
    if pct is None:
        return (
            None,
            None if noise is None else noise / 100,
            "nothing: no band given (--speedup-tolerance judges it)",
        )
    given = (
        f"a fall of {pct:g}% (--speedup-tolerance)"
        if user_pct is not None
        else f"a fall of {pct:g}% (the default; --speedup-tolerance sets it)"
    )
    if noise is None:
        where = (
            "this check's baseline against the study's (the study measured no start-to-start "
            "noise: measurement.drift_check off, or it stopped before it)"
        )
    else:
        where = f"the study's drift check ({noise:.1f}%, its baseline's largest drift)"
    return (
        pct / 100,
        None if noise is None else noise / 100,
        f"{given}; start-to-start noise from {where}",
    )


@dataclass(frozen=True)
class LevelJudgment:
    """One level's paired ratios judged against the study's speedup."""

    margin_pct: float
    """``100·(median ratio now / study speedup − 1)``."""
    interval_log: float
    """Half-width of the 95 % interval of that ratio, in log units (``inf``: unbounded)."""
    verdict: str
    """:func:`autotune.evidence.decide.held`: ``held``, ``fell`` or ``undecided``."""
    outcome: str
    """``ok`` (held), ``fell`` (a decided fall beyond the band) or ``undecided``."""
    start_log: float = 0.0
    """The start-to-start part of ``interval_log`` (log units)."""
    undecided_by: str = ""
    """``pairs`` or ``starts`` for an undecided level (:attr:`LevelSpeedup.undecided_by`)."""


def _t95(dof: int) -> float:
    from scipy.special import stdtrit  # as autotune.evidence.scores: no scipy.stats import

    return float(stdtrit(dof, 0.975))


def judge_level(
    ratios: Sequence[float],
    study_speedup: float,
    study_config: Sequence[float],
    study_baseline: Sequence[float],
    band_pct: float,
    now_config: Sequence[float] = (),
    now_baseline: Sequence[float] = (),
    *,
    drift: float = 0.0,
) -> LevelJudgment:
    """The paired ratios (target/baseline tok/s of each interleaved pair) against the study's
    speedup by :func:`autotune.evidence.decide.held`, a fall of ``band_pct`` the edge.

    The interval (module docstring) combines the ratios' own t-interval of their log mean; the
    study's runs' (its target's and baseline's intervals where it ran each at least twice,
    otherwise the noise one unpaired run of each carries as this check measured it, the spread
    of ``now_config`` and ``now_baseline``, ``t·√(s_a² + s_b²)``, the paired ratios' spread
    when those are not given); and the start-to-start noise, ``√2·|log(1 + drift)|`` for a
    ``drift`` (fraction) between two starts of one config.
    """
    from autotune.evidence.decide import halfwidth_log, held, margin_pct

    logs = [math.log(r) for r in ratios if r > 0]
    n = len(logs)
    median = statistics.median(ratios)
    margin = margin_pct(median, study_speedup)
    start_w = math.sqrt(2.0) * abs(math.log1p(drift)) if drift > -1 else math.inf
    if n < 2:
        width = math.inf
        rest = math.inf
    else:
        sd = statistics.stdev(logs)
        t = _t95(n - 1)
        k = min(len(study_config), len(study_baseline))
        if k >= 2:
            study_w = math.hypot(halfwidth_log(study_config), halfwidth_log(study_baseline))
            rest = study_w
        else:
            unpaired = [
                statistics.stdev([math.log(x) for x in xs])
                for xs in (now_config, now_baseline)
                if len(xs) >= 2 and all(x > 0 for x in xs)
            ]
            one_run = math.hypot(*unpaired) if len(unpaired) == 2 else sd
            study_w = t * one_run
            rest = Z95 * one_run  # its quantile's limit: more pairs narrow t, not the spread
        width = math.sqrt((t * sd / math.sqrt(n)) ** 2 + study_w**2 + start_w**2)
    v = held(margin, width, band_pct)
    outcome = {"held": "ok", "fell": "fell"}.get(v, "undecided")
    why = ""
    if outcome == "undecided":
        # Could endless pairs decide? The pairs' part of the interval vanishes; the study's
        # runs' part (its quantile at its limit) and the start-to-start part stay.
        floor_only = math.hypot(rest, start_w) if math.isfinite(rest) else math.inf
        why = "starts" if held(margin, floor_only, band_pct) == "undecided" else "pairs"
    return LevelJudgment(margin, width, v, outcome, start_w, why)


def paired_level(
    concurrency: int,
    study_config: Sequence[Any],
    study_baseline: Sequence[Any],
    pairs: Sequence[tuple[Any, Any]],
    band_pct: float,
    *,
    study_noise: float | None = None,
) -> LevelSpeedup:
    """A level's :class:`LevelSpeedup` from its interleaved (target, baseline) measurements.

    ``study_noise`` (fraction): the study's start-to-start noise (its drift check's largest
    baseline drift); None, where it measured none: this check's baseline against the study's at
    this level stands in for it (the baseline started here is a second engine start of the
    study's baseline, what the drift check compares)."""

    def tok(runs: Sequence[Any]) -> list[float]:
        return [r.output_throughput_tok_s for r in runs if r.concurrency == concurrency]

    st, sb = tok(study_config), tok(study_baseline)
    ratios = [
        a.output_throughput_tok_s / b.output_throughput_tok_s
        for a, b in pairs
        if b.output_throughput_tok_s > 0
    ]
    study = statistics.median(st) / statistics.median(sb) if st and sb else None
    now = statistics.median(ratios) if ratios else None
    now_base = _median([b.output_throughput_tok_s for _, b in pairs])
    drift = 100.0 * (now_base / statistics.median(sb) - 1.0) if sb and now_base else None
    common = dict(
        band_pct=band_pct,
        baseline_drift_pct=drift,
        concurrency=concurrency,
        study=study,
        measured=now,
        study_tok_s=statistics.median(st) if st else None,
        measured_tok_s=_median([a.output_throughput_tok_s for a, _ in pairs]),
        pairs=len(pairs),
    )
    if study is None or not ratios:
        return LevelSpeedup(**common)  # type: ignore[arg-type]
    start = study_noise if study_noise is not None else (drift or 0.0) / 100.0
    j = judge_level(
        ratios,
        study,
        st,
        sb,
        band_pct,
        [a.output_throughput_tok_s for a, _ in pairs],
        [b.output_throughput_tok_s for _, b in pairs],
        drift=start,
    )

    def pct(w: float) -> float | None:
        return 100.0 * math.expm1(w) if math.isfinite(w) else None

    return LevelSpeedup(
        **common,  # type: ignore[arg-type]
        verdict=j.verdict,
        interval_pct=pct(j.interval_log),
        outcome=j.outcome,
        start_noise_pct=pct(j.start_log),
        undecided_by=j.undecided_by,
    )
