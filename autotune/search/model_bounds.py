"""The model strategy's bounds (:mod:`autotune.search.model_strategy`): what an unmeasured config
could reach at each level, by the fitted acceptance × cost model (:class:`autotune.perf.PerfModel`)
and by the model-free convexity guard (t_step never falls as N grows and is convex in N), against
each level's measured best (under an SLO: the best among configs that meet it); and the order
the candidates found so start in (:func:`rank_candidates`).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.engine._base import EngineConfig
from autotune.evidence.decide import PRACTICAL_TIE_PCT
from autotune.evidence.objectives import METRICS, study_slo
from autotune.perf import PerfModel, Point
from autotune.search.acceptance_prior import (
    AcceptancePrior,
    PriorFit,
    best_fit,
    measured_accepted,
    priors_for,
    ranked_throughput,
)
from autotune.search.model_points import Level, _as_method
from autotune.search.model_state import StrategyState
from autotune.search.space import Option
from autotune.spec.catalog import AcceptanceCurve, acceptance_curves
from autotune.spec.loader import ResolvedStudy
from autotune.spec.methods import METHODS, config_id
from autotune.store import MeasurementRecord


@dataclass(frozen=True)
class Candidate:
    """An unmeasured config that could still beat the measured best somewhere."""

    config: EngineConfig
    gain: float
    """Best predicted throughput / measured best, over levels (inf when nothing predicts it)."""
    upside: float
    """Best upper bound / measured best, over levels."""
    level: Level | None
    """Where ``gain`` is reached."""
    reason: str
    """'model' (the model's range) or 'neighbor' (the convexity guard)."""
    levels: frozenset[Level] = frozenset()
    """The levels where it could beat the measured best: the only ones its engine measures."""
    beside_best: frozenset[Level] = frozenset()
    """The levels where the convexity guard (:meth:`ModelStrategy._neighbors`) found it next to
    its method's best measured N on measurements alone: two or more N of a prefix-consistent
    drafter measured (see :func:`rank_candidates`)."""


@dataclass(frozen=True)
class _Run:
    """One measured (N, level) of an option, as a step time with its noise band."""

    step_s: float
    half_width: float

    @property
    def low(self) -> float:
        return self.step_s / (1 + self.half_width)

    @property
    def high(self) -> float:
        return self.step_s / max(1 - self.half_width, 0.1)


class ModelBounds:
    """The strategy's settings, its stored per-config decisions and its bounds; the proposing and
    the per-engine cell plan build on it (:class:`autotune.search.model_strategy.ModelStrategy`
    documents the settings)."""

    def __init__(
        self,
        study: ResolvedStudy,
        *,
        margin_pct: float = PRACTICAL_TIE_PCT / 2,
        noise_floor_pct: float = 0.25,
        prior_slack_pct: float = 15.0,
        screen_sigmas: float = 3.0,
        close_call_cells: int | None = None,
        curves: Mapping[str, Sequence[AcceptanceCurve]] | None = None,
        priors: Mapping[str, Sequence[AcceptancePrior]] | None = None,
    ) -> None:
        if min(margin_pct, noise_floor_pct, prior_slack_pct, screen_sigmas) < 0:
            raise ValueError(
                "margin_pct, noise_floor_pct, prior_slack_pct and screen_sigmas must be >= 0"
            )
        self.study = study
        self.reason = ""
        self.screen_sigmas = screen_sigmas
        self.close_call_cells = close_call_cells
        """Extra repeats for close calls per study (None: one per level); the ones taken are
        counted from the stored measurements (:func:`close_calls_taken`), not by this instance,
        so a resumed study, a takeover or another driver spends the allowance once."""
        self._levels: dict[str, frozenset[Level]] = {}
        """Config key -> the levels its engine measures: decided once, when it is first
        proposed (or, for a config with no decision stored, at its first cell), and widened
        while it runs; stored (:meth:`keep_state_in`)."""
        self._state: StrategyState | None = None
        """Where :attr:`_levels` and :attr:`_judged_at` are stored (None: this instance only)."""
        self.margin_pct = margin_pct
        self.noise_floor = noise_floor_pct / 100.0
        self.prior_slack = prior_slack_pct / 100.0
        self.curves = (
            acceptance_curves(study.model, study.model_alias) if curves is None else dict(curves)
        )
        """Published acceptance curves by method: the order of the first batch only."""
        self._priors: dict[str, list[AcceptancePrior]] = (
            {} if priors is None else {m: list(p) for m, p in priors.items()}
        )
        self._own_priors = priors is None
        """Per-position acceptance priors by method (:mod:`autotune.search.acceptance_prior`;
        None: the catalog's and published.yaml's for the study's model, read when first asked)."""
        self._cancelled: dict[str, str] = {}
        """Config key -> why its running engine was stopped early: handed to the tuner, which
        asks :meth:`cancel_reason` as soon as :meth:`next_cell` returned None and stores the
        reason with the trial (a resumed driver reads it there: the trial is finished)."""
        self._judged_at: dict[str, tuple[int, int]] = {}
        """Config key -> (finished configs, rows) when its engine was last judged for a cancel;
        stored (:meth:`keep_state_in`), so a resumed engine is judged on the same trigger."""

    def keep_state_in(self, state: StrategyState) -> None:
        """Store the per-config decisions in ``state`` from now on, starting from what it holds
        (a resumed study, a takeover or another driver continues with the decisions taken)."""
        self._state = state
        self._levels, self._judged_at = {}, {}
        for key, entry in state.load().items():
            levels = entry.get("levels")
            if isinstance(levels, list):
                self._levels[key] = frozenset((str(w), int(c)) for w, c in levels)
            judged = entry.get("judged_at")
            if isinstance(judged, list) and len(judged) == 2:
                self._judged_at[key] = (int(judged[0]), int(judged[1]))

    def _store(self, key: str) -> None:
        if self._state is None:
            return
        entry: dict[str, Any] = {}
        if key in self._levels:
            entry["levels"] = [[w, c] for w, c in sorted(self._levels[key])]
        if key in self._judged_at:
            entry["judged_at"] = list(self._judged_at[key])
        self._state.save(key, entry)

    def _set_levels(self, key: str, levels: frozenset[Level]) -> None:
        if self._levels.get(key) != levels:
            self._levels[key] = levels
            self._store(key)

    def _decide_levels(self, config: EngineConfig, levels: frozenset[Level]) -> None:
        """A proposed config's levels: the first decision stands (a config proposed again,
        its interrupted trial reopened, keeps the levels its engine was measuring)."""
        if config.key() not in self._levels:
            self._set_levels(config.key(), levels)

    def _set_judged(self, key: str, evidence: tuple[int, int]) -> None:
        if self._judged_at.get(key) != evidence:
            self._judged_at[key] = evidence
            self._store(key)

    def _by_model(
        self,
        config: EngineConfig,
        option: Option,
        n: int,
        levels: Sequence[Level],
        models: Mapping[str, PerfModel],
        incumbent: Mapping[Level, float],
        slack: float = 1.0,
        force: bool = False,
        ratios: Mapping[Level, float] | None = None,
        priors: Mapping[str, PriorFit] | None = None,
    ) -> Candidate | None:
        """A candidate when the model's upper bound beats some level's best (or ``force``);
        levels where the bound cannot meet the SLO's p99 TPOT are not counted. Where the
        model extrapolates the config's acceptance and a workload has a prior (``priors``),
        the centre its gain is ranked by takes the prior's E(n) instead
        (:func:`~autotune.search.acceptance_prior.ranked_throughput`); its bounds stay the model's."""
        best_gain, best_upside, where = -math.inf, -math.inf, None
        winning: set[Level] = set()
        for level in levels:
            w, c = level
            inc = incumbent.get(level)
            pred = models[w].predict(option.method, n, c)
            if pred.known and self._cannot_meet(level, pred.high * slack, ratios or {}, 0.0):
                continue  # even at its upper bound its p99 TPOT misses the SLO here
            if inc is None or not pred.known:
                # Nothing to compare with, or nothing to predict from: only a run can tell.
                winning.add(level)
                gain = upside = math.inf
            else:
                centre = ranked_throughput(option.method, n, pred, (priors or {}).get(w))
                gain, upside = centre / inc, pred.high * slack / inc
                if upside > 1 + self.margin_pct / 100:
                    winning.add(level)
            if gain > best_gain:
                best_gain, where = gain, level
            best_upside = max(best_upside, upside)
        if not (winning or force):
            return None
        return Candidate(
            config,
            best_gain,
            best_upside,
            where,
            "model" if winning else "neighbor",
            frozenset(winning),
        )

    def _prior_fits(
        self, method: str, rows: Sequence[MeasurementRecord], workloads: Iterable[str]
    ) -> dict[str, PriorFit]:
        """Per workload, the best prior of ``method`` fitted to ``rows`` (one option's rows)."""
        if self._own_priors and method not in self._priors:
            self._priors[method] = priors_for(self.study.model, self.study.model_alias, method)
        priors = self._priors.get(method, [])
        if not priors:
            return {}
        out = {}
        for w in workloads:
            fit = best_fit(priors, measured_accepted(r for r in rows if r.workload == w))
            if fit is not None:
                out[w] = fit
        return out

    def _incumbent(
        self,
        cells: Mapping[str, Mapping[Level, Point]],
        noise: float,
        rows: Sequence[MeasurementRecord] = (),
    ) -> dict[Level, float]:
        """Each level's measured best, taken at the low end of its noise band: the highest of
        several noisy medians overstates the truth, and pruning against it would be too eager.
        Under an SLO only configs whose measured p99s (``rows``) meet it count: a level where
        none does has no best yet."""
        meeting = self._meeting(rows) if self.study.spec.slo is not None else None
        out: dict[Level, float] = {}
        for key, per_level in cells.items():
            for level, p in per_level.items():
                if meeting is not None and key not in meeting.get(level, ()):
                    continue
                value = p.output_throughput_tok_s / (1 + max(p.spread / 2, noise))
                out[level] = max(out.get(level, 0.0), value)
        return out

    def _meeting(self, rows: Sequence[MeasurementRecord]) -> dict[Level, set[str]]:
        """Per level, the configs whose p99 latencies (median over repeats) meet the study's
        SLO there, judged as :func:`autotune.recommend.slo.choose_slo` judges them."""
        values: dict[tuple[str, Level], dict[str, list[float]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for r in rows:
            by = values[(config_id(r.speculative_config), (r.workload, r.concurrency))]
            for metric in METRICS:
                v = getattr(r, metric)
                if v is not None:
                    by[metric].append(float(v))
        out: dict[Level, set[str]] = defaultdict(set)
        for (key, level), by in values.items():
            limits = study_slo(self.study.spec, level[0]).limits()
            if all(by.get(m) and statistics.median(by[m]) <= lim for m, lim in limits.items()):
                out[level].add(key)
        return out

    def _cannot_meet(
        self, level: Level, high_tok_s: float, ratios: Mapping[Level, float], noise: float
    ) -> bool:
        """Whether a config whose throughput at ``level`` is at most ``high_tok_s`` must miss
        the SLO's p99 TPOT there: its p99 TPOT is at least the level's smallest measured ratio
        of p99 TPOT to c / throughput times c / ``high_tok_s`` (see the module docstring)."""
        if self.study.spec.slo is None or high_tok_s <= 0:
            return False
        limit = study_slo(self.study.spec, level[0]).p99_tpot_ms
        ratio = ratios.get(level)
        if limit is None or ratio is None:
            return False
        floor_ms = ratio * level[1] * 1000.0 / high_tok_s
        return floor_ms > limit * (1 + noise)

    def _neighbors(
        self,
        option: Option,
        mine: Mapping[int, Mapping[Level, Point]],
        base_cells: Mapping[Level, Point],
        level: Level,
        incumbent: Mapping[Level, float],
        models: Mapping[str, PerfModel],
        noise: float,
        ratios: Mapping[Level, float] | None = None,
    ) -> list[int]:
        """The unmeasured N next to the option's best measured N at ``level`` that could beat the
        level's best under the convexity guard (no linearity assumed), and could meet the SLO's
        p99 TPOT at that bound."""
        at = {n: cells[level] for n, cells in mine.items() if level in cells}
        inc = incumbent.get(level)
        if not at or inc is None:
            return []
        w, c = level
        best_n = max(at, key=lambda n: at[n].output_throughput_tok_s)
        runs = {n: _run(p, noise) for n, p in at.items()}
        base = _run(base_cells[level], noise) if level in base_cells else None
        curve = [float(a) for a in models[w].acceptance_curve(option.method, c)]
        out = []
        for n in (best_n - 1, best_n + 1):
            if n not in option.n_values or n in at:
                continue
            floor = _step_floor(n, runs, base)
            accepted = _max_accepted(option.method, curve, n)
            high = c * (1 + accepted) / floor if floor > 0 else math.inf
            if math.isfinite(high) and self._cannot_meet(level, high, ratios or {}, noise):
                continue
            if high > inc * (1 + self.margin_pct / 100):
                out.append(n)
        return out

    def _noise(self, cells: Mapping[str, Mapping[Level, Point]]) -> float:
        """The relative half-width every measured throughput is trusted to at best: the study's
        median over cells of half the repeats' spread, and never below ``noise_floor_pct``.

        One cell's repeats can agree by luck (three repeats that happen to match), so a cell is
        never trusted beyond what the study's repeats show in general.
        """
        spreads = [
            p.spread / 2
            for per_level in cells.values()
            for p in per_level.values()
            if p.num_repeats > 1
        ]
        typical = statistics.median(spreads) if spreads else 0.0
        return max(typical, self.noise_floor)

    def _fit(
        self,
        option: Option,
        mine: Mapping[int, Mapping[Level, Point]],
        base_cells: Mapping[Level, Point],
        workload: str,
        noise: float,
    ) -> PerfModel:
        """The model of one option on one workload: its own points and the baseline's."""
        points = [p for (w, _), p in base_cells.items() if w == workload]
        points += [
            _as_method(p, option.method)
            for cells in mine.values()
            for (w, _), p in cells.items()
            if w == workload
        ]
        return PerfModel.fit(points, noise_floor=noise)


def rank_candidates(cands: Iterable[Candidate]) -> list[Candidate]:
    """Candidates in the order their engines start: highest predicted gain (centre) first,
    except where the model and the model-free convexity guard disagree about one level.

    The centre of a prediction for an unmeasured N rests on the step-cost line through the
    measured N of its method, which misses a knee between them (verification turning
    compute-bound); its upper bound, widened by the method's fitted prefix ratio, is the
    prediction's own uncertainty. So, repeatedly, of the candidates left, with ``top`` the one of
    highest centre: a config of ``top``'s option that the guard found next to that option's best
    measured N at ``top``'s level (``beside_best``), whose centre is below the measured best
    (gain < 1) but whose upper bound reaches ``top``'s centre, goes first. At that level the
    line moves the option's best N to ``top``'s while measurements alone (t_step monotone and
    convex in N) say it may move by one, and the model cannot rank ``top`` above it: one engine
    at the neighbour settles which, where a knee the line misses puts the optimum. Highest
    centre first among such. A neighbour the model predicts to win keeps its place by its
    centre (model and guard agree), and one beside the best of another level or option does
    not delay ``top`` (there they do not compete). When no candidate is predicted to beat the
    measured best (``top``'s gain < 1) and ``top`` itself rests on the line alone (the guard
    put it next to no measured best), the first guard-backed candidate of any level or option
    goes first instead: the line already failed to predict a win, and a measured best's
    neighbour is where a knee it misses would sit (session 18: stress-29 went from 1.58x to
    1.10x its oracle floor, no other of the 90 stress rows moved).

    Candidates nothing predicts (infinite gain) keep their place at the front; otherwise ties
    go by (-upside, N), the smaller N first (cheaper to verify, and the choosing rule prefers
    it on a tie)."""
    rest = sorted(cands, key=lambda c: (-c.gain, -c.upside, c.config.num_speculative_tokens))
    out: list[Candidate] = []
    while rest:
        top = pick = rest[0]
        if math.isfinite(top.gain) and top.level is not None:
            rivals = (
                c
                for c in rest
                if top.level in c.beside_best
                and _option_key(c.config) == _option_key(top.config)
                and c.gain < 1
                and c.upside >= top.gain
            )
            pick = next(rivals, top)
            if pick is top and top.gain < 1 and not top.beside_best:
                # Nothing is predicted to win and top rests on the line alone: a neighbour the
                # guard found next to a measured best is the likelier place of a missed knee.
                pick = next((c for c in rest if c.beside_best and math.isfinite(c.gain)), top)
        out.append(pick)
        rest.remove(pick)
    return out


def lost_to_off(
    mine: Mapping[int, Mapping[Level, Point]], base_cells: Mapping[Level, Point], noise: float
) -> dict[Level, int]:
    """The levels where every measured N of an option loses to off decisively and verification
    is compute-bound, each with the largest measured N: no larger N is measured there.

    Decisively: the N's throughput at the top of its noise band is below the baseline's at the
    bottom of its band. Compute-bound: t_step / (N + 1) does not fall from the second-largest
    measured N to the largest (bands at their least favourable ends); past that a longer draft
    costs no less per verified token and accepts no more per position. Below the knee a longer
    draft amortizes the step's fixed costs (:func:`_step_floor`), so one measured N never closes
    a level, and the N between measured ones are left to the bounds."""
    out: dict[Level, int] = {}
    for level, base in base_cells.items():
        at = {n: cells[level] for n, cells in mine.items() if level in cells}
        if len(at) < 2:
            continue
        floor = base.output_throughput_tok_s / (1 + max(base.spread / 2, noise))
        if not all(
            p.output_throughput_tok_s * (1 + max(p.spread / 2, noise)) < floor for p in at.values()
        ):
            continue
        small, large = sorted(at)[-2:]
        if _run(at[large], noise).low / (large + 1) >= _run(at[small], noise).high / (small + 1):
            out[level] = large
    return out


def _option_key(config: EngineConfig) -> tuple[str, str | None, tuple[tuple[str, str], ...]]:
    """What the configs of one option share: method, draft and knobs (all but N)."""
    params = tuple(sorted((k, repr(v)) for k, v in config.method_params.items()))
    return config.method, config.draft, params


def _run(p: Point, noise: float) -> _Run:
    """A measured cell as a step time, c · (1 + E) / throughput, with its noise band."""
    step = p.concurrency * (1 + sum(p.acceptance_per_pos)) / p.output_throughput_tok_s
    return _Run(step, max(p.spread / 2, noise))


def _step_floor(n: int, runs: Mapping[int, _Run], base: _Run | None) -> float:
    """The smallest t_step(n) that a non-decreasing, convex t_step through the runs allows,
    whose cost per verified token never rises with N.

    Below the knee a longer draft costs little, past it verification grows with every token:
    t_step is convex in N, so it lies above every chord's extension outside the chord, and it
    never falls as N grows. A step's fixed costs (weights read, launch, scheduling) amortize
    over the N + 1 tokens it verifies and nothing in it grows faster than they do, so
    t_step(n) / (n + 1) never rises with n: a shorter draft saves at most its share of tokens.
    Bands are taken at their most permissive ends.
    """
    floor = base.low if base is not None else 0.0
    left = sorted(m for m in runs if m < n)
    right = sorted(m for m in runs if m > n)
    if right:
        floor = max(floor, runs[right[0]].low * (n + 1) / (right[0] + 1))
    if left:
        a = runs[left[-1]]
        floor = max(floor, a.low)
        if len(left) >= 2:
            b = runs[left[-2]]
            slope = (a.low - b.high) / (left[-1] - left[-2])
            floor = max(floor, a.low + slope * (n - left[-1]))
    if len(right) >= 2:
        a, b = runs[right[0]], runs[right[1]]
        slope = (b.high - a.low) / (right[1] - right[0])
        floor = max(floor, a.low - slope * (right[0] - n))
    return floor


def _max_accepted(method: str, curve: Sequence[float], n: int) -> float:
    """The largest E(n) the measured acceptance allows: for a prefix-consistent drafter the
    pooled curve raised by the method's fitted ``prefix_ratio`` (another N follows another
    trajectory), each a_i at most 1, and the last a_i repeated past it (a_i never rises); n
    otherwise."""
    rule = METHODS.get(method)
    if rule is None or not rule.prefix_consistent or len(curve) == 0:
        return float(n)
    high = max(rule.prefix_ratio[1], 1.0 / rule.prefix_ratio[0])
    raised = [min(1.0, float(a) * high) for a in curve[:n]]
    return sum(raised) + max(n - len(curve), 0) * raised[-1]
