"""The model-guided search (sampler ``model``, the default): measure each method at its largest N,
fit the acceptance × cost model, and start only the engine configs that could still beat the
measured best at some (workload, concurrency) level, most promising first, until none can.
Each such engine measures only the levels where it could win, and repeats a level only while
its first run there leaves it in reach of the best: engine time goes where the optimum can be.

A prefix-consistent drafter's run at N_max measures a_1..a_Nmax, so with the baseline it pins the
model down enough to rank every other N; each further run narrows the step-cost line. The model
assumes t_step linear in N, which fails where verification turns from memory- to compute-bound
(see ``autotune.perf``), so a second, model-free guard checks the N next to each method's best
measured N with nothing but "t_step never falls as N grows, and is convex in N". Nothing is
recommended from a prediction: the choosing rule (``autotune.recommend.choose``) picks from
measured repeats.

Where the catalog holds a published acceptance curve for the study's model and a method
(``acceptance_curves`` in ``autotune/catalog/models.yaml``), the method's first engine starts at
the N where the published curve stops growing materially instead of at its largest N (see
:func:`prior_anchor_n`). That is the only use of a publication here: it orders the first batch,
it is never a measurement, nothing is stored or predicted from it.

Under a latency SLO (the study's ``slo:``) a config can win a level only if it meets the SLO
there, as ``autotune.recommend.slo.choose_slo`` decides: each level's measured best is the best
among the configs whose measured p99s meet the SLO (a level where none does has no best yet, so
anything could still win it), and an unmeasured config is not proposed for a level where even
its upper-bound throughput cannot bring its p99 TPOT under the limit. In a closed loop each of
the c streams gets throughput / c tokens per second, so TPOT scales with c / throughput; the
smallest ratio of measured p99 TPOT to c / throughput among the level's measured configs turns
an upper bound on throughput into a lower bound on p99 TPOT. TTFT and ITL limits have no such
bound: they only decide which measured configs count.

What the strategy decides about a config that its later steps rely on is stored, not kept in
the driver (:class:`StrategyState`, the Optuna study's user attributes through the tuner): the
levels a config's engine measures (decided when it is proposed, widened while it runs) and the
evidence its running engine was last judged on. A resumed study, a takeover or another driver
continues an engine with the decisions the first driver took; a cancel is stored with its trial
at once (``autotune.search.tuner``). Everything else is taken afresh from the stored
measurements.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from autotune.cluster.jobs import Cell
from autotune.engine._base import EngineConfig, Measurement
from autotune.evidence.cells import Evidence
from autotune.evidence.decide import PRACTICAL_TIE_PCT
from autotune.evidence.objectives import METRICS, study_slo
from autotune.evidence.points import point
from autotune.perf import PerfModel, Point
from autotune.search.space import Option, SearchSpace
from autotune.search.strategy import (
    Limits,
    SearchState,
    can_measure,
    noisy_cell,
    plan_cells,
    repeat_limits,
    undecided_cell,
    wants_more,
)
from autotune.spec.catalog import AcceptanceCurve, acceptance_curves
from autotune.spec.loader import ResolvedStudy
from autotune.spec.methods import BASELINE, METHODS, config_id
from autotune.store import MeasurementRecord

Level = tuple[str, int]
"""A (workload, concurrency) cell: every config is measured at all of them on one engine."""

PRIOR_MIN_GAIN = 0.1
"""Mean acceptance length a published curve must still gain per added draft token for the
prior to keep growing N: past that a draft token is accepted less than one step in ten, and
verifying it costs on every step."""


STATE_PREFIX = "autotune:model:"
"""Prefix of the Optuna study user attributes that hold the model strategy's per-config state
(:class:`OptunaState`): ``autotune:model:<config key>``."""


class StrategyState(Protocol):
    """Where the model strategy keeps what it decided per config: config key -> a JSON object
    (``levels``: the [workload, concurrency] its engine measures; ``judged_at``: [finished
    configs, rows] when its running engine was last judged for a cancel)."""

    def load(self) -> dict[str, dict[str, Any]]:
        """Every config's stored entry."""
        ...

    def save(self, key: str, entry: Mapping[str, Any]) -> None:
        """Store one config's entry (replacing the one stored)."""
        ...


class OptunaState:
    """:class:`StrategyState` as user attributes of the study's Optuna study (the study store's
    database; every write there is fenced by the study's lease, as the tuner's are)."""

    def __init__(self, study: Any) -> None:
        self._study = study

    def load(self) -> dict[str, dict[str, Any]]:
        attrs: dict[str, Any] = self._study.user_attrs
        return {
            k[len(STATE_PREFIX) :]: dict(v)
            for k, v in attrs.items()
            if k.startswith(STATE_PREFIX) and isinstance(v, dict)
        }

    def save(self, key: str, entry: Mapping[str, Any]) -> None:
        self._study.set_user_attr(STATE_PREFIX + key, dict(entry))


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


class ModelStrategy:
    """Proposes engine configs for the tuner (the :class:`autotune.search.strategy.Strategy` interface).

    ``margin_pct``: a config is worth an engine start only if an upper bound of its throughput
    beats the measured best of some level (at the low end of its noise band) by more than this;
    half the choosing rule's tie margin by default, so a config that could at most tie is not
    started. ``noise_floor_pct``: the smallest relative half-width a measured throughput is
    trusted to, whatever its repeats say. ``prior_slack_pct``: while a method has one N
    measured, the split of its extra step cost into fixed and per-token parts is a prior, so
    the model's upper bounds for it are raised by this much (in practice: every method that
    could come within this of the best gets a second N measured). ``screen_sigmas``: how many
    times the study's noise a config measured once at a level may still gain on its repeats
    before its further repeats there are skipped (:meth:`next_cell`). ``close_call_cells``: how
    many extra repeats a run may spend on levels whose top two configs lie within twice the
    study's noise of each other (None: as many as the study has levels).

    ``curves``: published acceptance curves by method (None: the catalog's for the study's
    model; see :func:`prior_anchor_n`).

    Order: the baseline, then each method at its largest allowed N (the largest that did not
    fail; the published curve's N first where it has one), then the candidates of
    :meth:`candidates`, highest predicted gain first as :func:`rank_candidates` orders them
    (a convexity-guard neighbour of a measured best that the model predicts to lose goes ahead
    of a leader it may match). Stops (returns None) when no candidate is left.
    """

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

    def propose(self, state: SearchState, slots: int, fill: bool = True) -> list[EngineConfig]:
        """Up to ``slots`` configs: each next one is chosen as if the ones before it were
        running (their options' anchors are, so the model waits for their curves).

        With ``fill``, slots the model does not need yet (it waits for running configs) are not
        left idle while an unmeasured config could still win: they take the configs of
        :meth:`could_win`, highest upper bound first. On one slot nothing else is running when
        the tuner asks, so this never adds a config there."""
        out: list[EngineConfig] = []
        while len(out) < slots:
            config = self._propose_one(state)
            if config is None:
                break
            out.append(config)
            state = dataclasses.replace(state, in_flight=state.in_flight | {config.key()})
        if fill and len(out) < slots and (out or state.in_flight):
            for config in self.could_win(state, slots - len(out)):
                out.append(config)
                state = dataclasses.replace(state, in_flight=state.in_flight | {config.key()})
        if not out:
            self.reason = "no unmeasured config can beat the measured best"
        return out

    def could_win(self, state: SearchState, count: int) -> list[EngineConfig]:
        """Up to ``count`` configs for slots the model does not need now, none of them taken.

        First the model's candidates judged on measurements alone (running configs are not
        counted at their predicted throughput, and several N of one method may run), highest
        upper bound first. Then, for a method whose first engine is still running and so has
        nothing measured, the N that split its range: the middle N first, then the middles of
        the halves (nothing is known of them, so each could win; a second N of a method also
        settles its step-cost split, the model's prior, when its first run finishes). Each is
        cancelled once the evidence rules it out (:meth:`cancel_reason`)."""
        taken = state.taken()
        out: list[EngineConfig] = []
        ranked = sorted(
            self.candidates(state, believe=False),
            key=lambda c: (-c.upside, -c.gain, c.config.num_speculative_tokens),
        )
        for cand in ranked:
            if len(out) >= count:
                return out
            if cand.config.key() in taken:
                continue
            self._decide_levels(cand.config, cand.levels)
            out.append(cand.config)
            taken.add(cand.config.key())
        blind: list[list[EngineConfig]] = []
        for option in _speculative(state.space):
            configs = [state.space.config(option, n) for n in option.n_values]
            keys = [c.key() for c in configs]
            if any(state.done.get(k) is not None for k in keys):
                continue  # measured: the model's candidates above cover it
            if not any(k in state.in_flight for k in keys):
                continue  # its anchor is not started yet: the model starts it first
            order = [configs[i] for i in _bisection_order(len(configs))]
            blind.append([c for c in order if c.key() not in taken and c.key() not in state.done])
        while len(out) < count and any(blind):
            for queue in blind:
                if queue and len(out) < count:
                    config = queue.pop(0)
                    self._decide_levels(config, _levels_of(state.study))
                    out.append(config)
        return out

    def cancel_reason(self, config: EngineConfig) -> str | None:
        """Why ``config``'s engine was stopped before its cells were done (None: it was not):
        the evidence ruled it out while it ran (see :meth:`next_cell`)."""
        return self._cancelled.get(config.key())

    def observe(self, config: EngineConfig, value: float | None) -> None:
        """Nothing to keep: every decision is taken afresh from the stored measurements."""

    def planned(self, state: SearchState) -> int:
        """Finished and running configs, the anchors not yet started, and the candidates that
        could still win now."""
        anchors = [
            o
            for o in _speculative(state.space)
            if not any(state.space.config(o, n).key() in state.taken() for n in o.n_values)
        ]
        baseline = state.space.baseline()
        missing_base = baseline is not None and baseline.key() not in state.taken()
        return len(state.taken()) + len(anchors) + int(missing_base) + len(self.candidates(state))

    def _propose_one(self, state: SearchState) -> EngineConfig | None:
        taken = set(state.done) | state.in_flight
        baseline = state.space.baseline()
        if baseline is not None and baseline.key() not in taken:
            self._decide_levels(baseline, _levels_of(state.study))
            return baseline
        anchor = self._next_anchor(state)
        if anchor is not None:
            self._decide_levels(anchor, _levels_of(state.study))  # the model is fitted from it
            return anchor
        ranked = self.candidates(state)
        # Several N of one method are strongly tied: one run refits that method's model and
        # usually rules the others out. While one of its configs runs, another is started
        # alongside only when the model expects it (not merely allows it) to win.
        running = {(c.method, c.draft) for c in state.space.configs() if c.key() in state.in_flight}
        sure = 1 + self.margin_pct / 100
        pick = next(
            (
                c
                for c in ranked
                if (c.config.method, c.config.draft) not in running or c.gain > sure
            ),
            None,
        )
        if pick is None:
            return None
        self._decide_levels(pick.config, pick.levels)
        return pick.config

    # --- what each engine measures ------------------------------------------------------------

    def next_cell(
        self, state: SearchState, config: EngineConfig, measured: Sequence[Measurement]
    ) -> Cell | None:
        """The next cell on ``config``'s warm engine: repeats outermost, as the tuner plans them,
        but only where the config can matter.

        The baseline and each method's first engine (its anchor) take every level: they are the
        reference and what the model is fitted from. Any other config takes only the levels
        where it was proposed (its upper bound beats the measured best there). After the first
        repeat of a level, the next repeats are taken only while the config's median there,
        raised by ``screen_sigmas`` times the study's noise, still reaches the level's measured
        best: a config clearly beaten once is not measured again (and, measured once, it is
        never chosen, see :func:`autotune.recommend.choose.screen`). A config still in reach of
        the best after its repeats somewhere is then measured at every other level too (same
        screen), so the one config for all levels is chosen among the contenders.
        """
        key = config.key()
        if key in self._cancelled:
            return None
        if key not in self._levels:
            self._set_levels(key, self._levels_for(state, config))
        evidence = (len(state.done), len(state.rows))
        if key not in self._judged_at:
            self._set_judged(key, evidence)
        elif self._judged_at[key] != evidence:
            # A config finished or measured more since this engine was last judged.
            self._set_judged(key, evidence)
            why = self._ruled_out(state, config, measured)
            if why is not None:
                self._cancelled[key] = why
                return None
        everywhere = _levels_of(state.study)
        taken = {(m.workload, m.concurrency, m.repeat) for m in measured}
        mine: dict[Level, list[float]] = defaultdict(list)
        for m in measured:
            mine[(m.workload, m.concurrency)].append(m.output_throughput_tok_s)
        judged: dict[Level, float] | None = None
        noise: dict[Level, float] = {}

        def in_reach(level: Level) -> bool:
            """Whether the config's median at ``level``, raised by the screen, reaches the
            level's best among the other configs. The screen is the study's noise, or the
            level's own where its repeats spread wider (one level can be noisier than the rest)."""
            nonlocal judged
            if judged is None:
                rows = _current_rows(state.rows)
                cells = _cells(rows)
                typical = self._noise(cells)
                judged = self._incumbent(cells, typical, rows)
                for lv, points in _by_level(cells).items():
                    spreads = [p.spread / 2 for p in points if p.num_repeats > 1]
                    noise[lv] = max([typical, statistics.median(spreads)] if spreads else [typical])
            best = judged.get(level)
            screen = 1 + self.screen_sigmas * noise.get(level, self.noise_floor)
            return best is None or statistics.median(mine[level]) * screen >= best

        limits = repeat_limits(state.study, config, state.rows)
        while True:
            wanted = self._levels[key]
            for cell in plan_cells(state.study):
                level = (cell.workload, cell.concurrency)
                if (cell.workload, cell.concurrency, cell.repeat) in taken or level not in wanted:
                    continue
                if not can_measure(limits, level, measured):
                    continue  # a replay's recorded repeats are all drawn here
                if cell.repeat == 0 or config.num_speculative_tokens == 0 or not mine.get(level):
                    return cell
                if in_reach(level):
                    return cell
            # Every wanted cell is done. A config that wins (or ties) where it was measured may
            # be the one config to deploy at every level (``choose_overall``): while its engine
            # is warm, it is measured everywhere else too, under the same screen.
            full = state.study.spec.repeats
            contender = any(len(mine[lv]) >= full and in_reach(lv) for lv in wanted if lv in mine)
            rest = everywhere - wanted
            # While its engine is warm a level costs one measurement and no start: a contender
            # is measured everywhere, any other config where it could still come within the
            # noise of the level's best.
            extra = rest if contender else self._within_noise(state, config, rest)
            if not extra:
                return (
                    noisy_cell(state.study, measured, limits)
                    or undecided_cell(state.study, config, state.rows, measured, limits)
                    or self._close_call(state, mine, measured, limits)
                )
            self._set_levels(key, wanted | extra)

    def _close_call(
        self,
        state: SearchState,
        mine: Mapping[Level, list[float]],
        measured: Sequence[Measurement],
        limits: Limits | None,
    ) -> Cell | None:
        """One more repeat where this engine's config and the level's best other config lie
        within the noise of each other (the top two), while the study's allowance of such
        cells lasts: the choice between them should not rest on the luck of a few repeats.
        Only a warm engine is repeated; the other config's engine is not started again."""
        full = state.study.spec.repeats
        allowance = self.close_call_cells
        if allowance is None:
            allowance = len(_levels_of(state.study))
        if close_calls_taken(state.study, state.rows, measured) >= allowance:
            return None
        cells = _cells(_current_rows(state.rows))
        noise = self._noise(cells)
        others = _by_level(cells)
        for level, tputs in sorted(mine.items()):
            if not full <= len(tputs) < 2 * full or not can_measure(limits, level, measured):
                continue
            rivals = sorted(
                (p.output_throughput_tok_s for p in others.get(level, ())), reverse=True
            )
            median = statistics.median(tputs)
            if not rivals or (len(rivals) > 1 and median < rivals[1]):
                continue  # not one of the top two
            if abs(median / rivals[0] - 1) <= 2 * noise:
                return Cell(workload=level[0], concurrency=level[1], repeat=len(tputs))
        return None

    def _within_noise(
        self, state: SearchState, config: EngineConfig, levels: frozenset[Level]
    ) -> frozenset[Level]:
        """The ``levels`` where ``config``'s upper bound, raised by the study's noise, reaches
        the level's measured best (levels nothing predicts for count as reachable)."""
        option = next(
            (
                o
                for o in _speculative(state.space)
                if (o.method, o.draft, dict(o.params))
                == (config.method, config.draft, dict(config.method_params))
            ),
            None,
        )
        if option is None or not levels:
            return frozenset()
        rows = _current_rows(state.rows)
        cells = _cells(rows)
        noise = self._noise(cells)
        incumbent = self._incumbent(cells, noise, rows)
        ratios = _tpot_ratios(rows)
        mine = {
            n: cells.get(config_id(state.space.config(option, n).speculative_config()), {})
            for n in option.n_values
        }
        base_cells = cells.get(config_id(None), {})
        out = set()
        for w, c in levels:
            inc = incumbent.get((w, c))
            pred = self._fit(option, mine, base_cells, w, noise).predict(
                option.method, config.num_speculative_tokens, c
            )
            if pred.known and self._cannot_meet((w, c), pred.high * (1 + noise), ratios, noise):
                continue
            if inc is None or not pred.known or pred.high * (1 + noise) >= inc:
                out.add((w, c))
        return frozenset(out)

    def _ruled_out(
        self, state: SearchState, config: EngineConfig, measured: Sequence[Measurement]
    ) -> str | None:
        """Why a running config can no longer win anywhere, or None while it could.

        Never the baseline, nor a method's only config with a value or running (its model is
        fitted from it). Ruled out: the model, fitted on the finished configs alone (no
        running config counted at its prediction), no longer lists it as a candidate, and at
        no level it has measured does its median, raised by the screen of :meth:`next_cell`,
        reach the level's measured best."""
        if config.num_speculative_tokens == 0:
            return None
        option = _option_of(state.space, config)
        if option is None:
            return None
        others = [
            state.space.config(option, n).key()
            for n in option.n_values
            if n != config.num_speculative_tokens
        ]
        if not any(state.done.get(k) is not None for k in others):
            return None  # nothing else of its method is measured: the model needs this run
        found = self.candidates(state, include=config, believe=False)
        if any(c.config.key() == config.key() for c in found):
            return None
        rows = _current_rows(state.rows)
        cells = _cells(rows)
        noise = self._noise(cells)
        incumbent = self._incumbent(cells, noise, rows)
        mine: dict[Level, list[float]] = defaultdict(list)
        for m in measured:
            mine[(m.workload, m.concurrency)].append(m.output_throughput_tok_s)
        screen = 1 + self.screen_sigmas * noise
        for level, tputs in mine.items():
            best = incumbent.get(level)
            if best is None or statistics.median(tputs) * screen >= best:
                return None
        return (
            f"cancelled: ruled out after {len([v for v in state.done.values() if v is not None])}"
            " configs measured (its upper bound beats no level's measured best, and none of its "
            "measured levels comes within the noise of it)"
        )

    def _levels_for(self, state: SearchState, config: EngineConfig) -> frozenset[Level]:
        """Where a config with no decision stored is measured (one proposed before the
        decisions were stored): as if it were proposed now."""
        everywhere = _levels_of(state.study)
        if config.num_speculative_tokens == 0:
            return everywhere
        found = {c.config.key(): c for c in self.candidates(state, include=config)}
        cand = found.get(config.key())
        if cand is None:
            return everywhere
        return cand.levels

    # --- phase 1: every method at its largest N ---------------------------------------------

    def _next_anchor(self, state: SearchState) -> EngineConfig | None:
        """The largest not-failed N of the first option with nothing measured or in flight;
        where the method has a published curve, its :func:`prior_anchor_n` first."""
        for option in _speculative(state.space):
            configs = [state.space.config(option, n) for n in option.n_values]
            keys = [c.key() for c in configs]
            if any(state.done.get(k) is not None for k in keys):
                continue  # measured: the model takes over
            if any(k in state.in_flight for k in keys):
                continue  # its anchor is running
            order = list(reversed(configs))
            first = prior_anchor_n(self.curves.get(option.method, ()), option.n_values)
            if first is not None:  # a stable sort: the rest stay largest first
                order.sort(key=lambda c: c.num_speculative_tokens != first)
            for config in order:
                if config.key() not in state.done:  # not failed (nor measured, see above)
                    return config
        return None

    # --- phase 2: what could still win -------------------------------------------------------

    def candidates(
        self, state: SearchState, include: EngineConfig | None = None, believe: bool = True
    ) -> list[Candidate]:
        """Unmeasured configs that could beat the measured best at some level, best first
        (``include``: judge this config too, even if it is taken; ``believe``: count running
        configs at their predicted throughput).

        Options whose anchor has not finished are left out: nothing is known of them yet and
        their anchor is proposed (or running) first.
        """
        space = state.space
        taken = set(state.done) | state.in_flight
        if include is not None:
            taken.discard(include.key())
        rows = _current_rows(state.rows)
        cells = _cells(rows)
        noise = self._noise(cells)
        levels = sorted({(r.workload, r.concurrency) for r in rows})
        workloads = sorted({w for w, _ in levels})
        incumbent = self._incumbent(cells, noise, rows)
        ratios = _tpot_ratios(rows)
        baseline = space.baseline()
        base_cells = cells.get(config_id(None), {}) if baseline is not None else {}
        fitted = []
        for option in _speculative(space):
            configs = {n: space.config(option, n) for n in option.n_values}
            if not any(state.done.get(c.key()) is not None for c in configs.values()):
                continue
            mine = {n: cells.get(config_id(c.speculative_config()), {}) for n, c in configs.items()}
            models = {w: self._fit(option, mine, base_cells, w, noise) for w in workloads}
            fitted.append((option, configs, mine, models))
        # Configs still running count as measured at their predicted throughput ("believer"
        # batching, as batch Bayesian optimization proposes several points at once): a second
        # proposal made while they run must beat what they are expected to reach, so parallel
        # slots are not spent on configs that only matter if a running one disappoints.
        for option, configs, _, models in fitted if believe else ():
            for n, config in configs.items():
                if config.key() not in state.in_flight or config.key() == (
                    include.key() if include else None
                ):
                    continue
                for w, c in self._levels.get(config.key(), frozenset(levels)):
                    pred = models[w].predict(option.method, n, c) if w in models else None
                    if pred is not None and pred.known and (w, c) in incumbent:
                        incumbent[(w, c)] = max(incumbent[(w, c)], pred.throughput_tok_s)
        found: dict[str, Candidate] = {}
        for option, configs, mine, models in fitted:
            open_n = [n for n, c in configs.items() if c.key() not in taken]
            # With one N measured, the split of the step cost into fixed and per-token parts
            # (and any knee) is a prior: its range is widened by prior_slack.
            two_n = sum(bool(c) for c in mine.values()) >= 2
            slack = 1.0 + (0.0 if two_n else self.prior_slack)
            # The guard's bound rests on measurements alone only with two or more N measured
            # (one point leaves no convexity to lean on; the model's prior is widened instead)
            # and for a prefix-consistent drafter (another's acceptance is bounded by N only).
            rule = METHODS.get(option.method)
            measured_guard = two_n and rule is not None and rule.prefix_consistent
            for n in open_n:
                cand = self._by_model(
                    configs[n], option, n, levels, models, incumbent, slack, ratios=ratios
                )
                if cand is not None:
                    found[cand.config.key()] = cand
            for level in levels:
                near = self._neighbors(
                    option, mine, base_cells, level, incumbent, models, noise, ratios
                )
                for n in near:
                    if n not in open_n:
                        continue
                    key = configs[n].key()
                    cand = found.get(key) or self._by_model(
                        configs[n],
                        option,
                        n,
                        levels,
                        models,
                        incumbent,
                        slack,
                        force=True,
                        ratios=ratios,
                    )
                    assert cand is not None
                    found[key] = dataclasses.replace(
                        cand,
                        levels=cand.levels | {level},
                        beside_best=cand.beside_best | ({level} if measured_guard else set()),
                    )
        # Most promising first, the guard's neighbours as rank_candidates says.
        return rank_candidates(found.values())

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
    ) -> Candidate | None:
        """A candidate when the model's upper bound beats some level's best (or ``force``);
        levels where the bound cannot meet the SLO's p99 TPOT are not counted."""
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
                gain, upside = pred.throughput_tok_s / inc, pred.high * slack / inc
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


def close_calls_taken(
    study: ResolvedStudy, rows: Sequence[MeasurementRecord], measured: Sequence[Measurement]
) -> int:
    """The close-call repeats the study took so far (:meth:`ModelStrategy._close_call`), read
    from the measurements themselves: the stored ``rows`` (per trial) and a running engine's
    ``measured``. A level's repeat beyond the study's ``repeats`` was a close call exactly when
    the re-run rule (:func:`autotune.search.strategy.wants_more`) did not ask for it: an engine
    takes a close call only once no level of it wants a re-run. The repeats an undecided level
    took (:func:`autotune.search.strategy.undecided_cell`) count too: both are extra repeats
    spent on the choice between a level's two best."""
    runs: dict[tuple[int | None, Level], list[Measurement]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r.trial_id, r.repeat)):
        runs[(r.trial_id, (r.workload, r.concurrency))].append(r)
    for m in sorted(measured, key=lambda m: m.repeat):
        runs[(None, (m.workload, m.concurrency))].append(m)
    full = study.spec.repeats
    return sum(
        not wants_more(study, level_runs[:k])
        for level_runs in runs.values()
        for k in range(full, len(level_runs))
    )


def prior_anchor_n(curves: Sequence[AcceptanceCurve], n_values: Sequence[int]) -> int | None:
    """The N to start a method at from its published curves, or None (its largest N).

    On each curve (its points at the option's N), walking up from (0, 1.0): a point is kept
    when it gains at least :data:`PRIOR_MIN_GAIN` of acceptance length per added draft token
    over the last kept one; the curve's answer is the last kept point. A curve still growing at
    its last point while the option goes further says nothing about the larger N, and neither
    does an option with no N on the curve: None. Over several curves (thinking on and off,
    workloads) the largest answer, None when any says None: the prior only moves the first N
    down where every curve shows the acceptance levelling off.
    """
    if not curves or not n_values:
        return None
    picks = []
    for curve in curves:
        points = sorted((n, al) for n, al in curve.acceptance_length_by_n.items() if n in n_values)
        if not points:
            return None
        kept_n, kept_al = 0, 1.0
        for n, al in points:
            if (al - kept_al) / (n - kept_n) >= PRIOR_MIN_GAIN:
                kept_n, kept_al = n, al
        if kept_n == 0:
            kept_n = points[0][0]  # not even the shortest draft pays: start there
        if kept_n == points[-1][0] and max(n_values) > kept_n:
            return None
        picks.append(kept_n)
    return max(picks)


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
    not delay ``top`` (there they do not compete).

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
        out.append(pick)
        rest.remove(pick)
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


def _tpot_ratios(rows: Sequence[MeasurementRecord]) -> dict[Level, float]:
    """Per level, the smallest ratio over measured configs of their p99 TPOT (median over
    repeats) to c / throughput (median), the mean time per token of one of c streams."""
    groups: dict[tuple[str, Level], list[MeasurementRecord]] = defaultdict(list)
    for r in rows:
        if r.p99_tpot_ms is not None and r.output_throughput_tok_s > 0:
            groups[(config_id(r.speculative_config), (r.workload, r.concurrency))].append(r)
    out: dict[Level, float] = {}
    for (_, level), group in groups.items():
        tpot = statistics.median(float(r.p99_tpot_ms or 0.0) for r in group)
        stream_ms = level[1] * 1000.0 / statistics.median(r.output_throughput_tok_s for r in group)
        out[level] = min(out.get(level, math.inf), tpot / stream_ms)
    return out


def _bisection_order(count: int) -> list[int]:
    """Indices 0..count-1, each next one the middle of the widest gap left (the last index,
    a method's largest N and its anchor, counts as taken, and comes last): N = 1..15 give
    N = 7, 11, 3, 5, 9, 13, 1, ..."""
    if count <= 1:
        return list(range(count))
    out: list[int] = []
    spans = [(0, count - 1)]  # half-open on the right: the anchor at count - 1 is taken
    while spans:
        spans.sort(key=lambda s: (-(s[1] - s[0]), s[0]))
        lo, hi = spans.pop(0)
        if hi <= lo:
            continue
        mid = (lo + hi - 1) // 2
        out.append(mid)
        spans += [(lo, mid), (mid + 1, hi)]
    return [*out, count - 1]


def _option_of(space: SearchSpace, config: EngineConfig) -> Option | None:
    """The search space's option ``config`` is an N of."""
    return next(
        (
            o
            for o in _speculative(space)
            if (o.method, o.draft, dict(o.params))
            == (config.method, config.draft, dict(config.method_params))
        ),
        None,
    )


def _levels_of(study: ResolvedStudy) -> frozenset[Level]:
    return frozenset((w, c) for w in study.measured_names() for c in study.spec.concurrency)


def _speculative(space: SearchSpace) -> list[Option]:
    return [o for o in space.options if o.method != BASELINE]


def _current_rows(rows: Sequence[MeasurementRecord]) -> list[MeasurementRecord]:
    """Rows of each workload's newest prompt set only (older prompt sets never mix in)."""
    return list(Evidence.of(rows).rows)


def _cells(rows: Sequence[MeasurementRecord]) -> dict[str, dict[Level, Point]]:
    """speculative config -> (workload, concurrency) -> its repeats as one point."""
    groups: dict[str, dict[Level, list[MeasurementRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.output_throughput_tok_s > 0:
            groups[config_id(r.speculative_config)][(r.workload, r.concurrency)].append(r)
    return {
        key: {level: _point(group) for level, group in cells.items()}
        for key, cells in groups.items()
    }


def _by_level(cells: Mapping[str, Mapping[Level, Point]]) -> dict[Level, list[Point]]:
    out: dict[Level, list[Point]] = defaultdict(list)
    for per_level in cells.values():
        for level, p in per_level.items():
            out[level].append(p)
    return out


def _point(group: Sequence[MeasurementRecord]) -> Point:
    """One cell's repeats as a model point (:func:`autotune.evidence.points.point`)."""
    return point(group, group[0].method, group[0].num_speculative_tokens)


def _as_method(p: Point, method: str) -> Point:
    # Points are keyed by method in the model; an option's rows already carry it.
    return (
        p
        if p.method == method
        else Point(
            method,
            p.num_speculative_tokens,
            p.concurrency,
            p.output_throughput_tok_s,
            p.acceptance_per_pos,
            p.num_repeats,
            p.spread,
        )
    )
