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

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence

from autotune.cluster.jobs import Cell
from autotune.engine._base import EngineConfig, Measurement
from autotune.search.model_bounds import Candidate, lost_to_off, rank_candidates
from autotune.search.model_points import (
    Level,
    _by_level,
    _cells,
    _current_rows,
    _levels_of,
    _option_of,
    _speculative,
    _tpot_ratios,
    close_calls_taken,
)
from autotune.search.model_propose import ModelProposer, prior_anchor_n
from autotune.search.model_state import STATE_PREFIX, OptunaState, StrategyState
from autotune.search.strategy import (
    Limits,
    SearchState,
    can_measure,
    noisy_cell,
    plan_cells,
    repeat_limits,
    undecided_cell,
)
from autotune.spec.methods import config_id

__all__ = [
    "STATE_PREFIX",
    "Candidate",
    "ModelStrategy",
    "OptunaState",
    "StrategyState",
    "close_calls_taken",
    "prior_anchor_n",
    "rank_candidates",
]


class ModelStrategy(ModelProposer):
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

    Order: the first method at its largest allowed N (the largest that did not fail; the
    published curve's N first where it has one), the baseline, every other method so, then
    (once the baseline has run: the model is fitted from it) the candidates of
    :meth:`candidates`, highest predicted gain first as :func:`rank_candidates` orders them
    (a convexity-guard neighbour of a measured best that the model predicts to lose goes ahead
    of a leader it may match). Stops (returns None) when no candidate is left.
    """

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
        never chosen, see :func:`autotune.recommend.choose.screen`). The baseline is screened
        so too (the first anchor runs before it): where a speculative config already beats its
        first run beyond the screen, off is not the answer there and more of its repeats only
        narrow a speedup that is decided (its one run still states it, see
        :func:`autotune.recommend.choose.choose`). A config still in reach of
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
                if cell.repeat == 0 or not mine.get(level):
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
        the level's measured best (levels nothing predicts for count as reachable), leaving out
        the levels :func:`~autotune.search.model_bounds.lost_to_off` closes above ``config``'s N."""
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
        closed = lost_to_off(mine, base_cells, noise)
        n = config.num_speculative_tokens
        out = set()
        for w, c in levels:
            if n > closed.get((w, c), n):
                continue  # every measured N loses to off decisively here
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
