"""What the model strategy starts next (:mod:`autotune.search.model_strategy`): the first
method's first engine (its anchor: the largest N, or the N a published acceptance curve points
to, :func:`prior_anchor_n`), the baseline, every other method's anchor, then (once the baseline
has run) the candidates that could still beat the measured best, and the configs that fill slots
the model does not need yet.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from autotune.engine._base import EngineConfig
from autotune.search.model_bounds import Candidate, ModelBounds, lost_to_off, rank_candidates
from autotune.search.model_points import (
    Level,
    _cells,
    _current_rows,
    _levels_of,
    _speculative,
    _tpot_ratios,
)
from autotune.search.strategy import SearchState
from autotune.spec.catalog import AcceptanceCurve
from autotune.spec.methods import METHODS, config_id

PRIOR_MIN_GAIN = 0.1
"""Mean acceptance length a published curve must still gain per added draft token for the
prior to keep growing N: past that a draft token is accepted less than one step in ten, and
verifying it costs on every step."""


class ModelProposer(ModelBounds):
    """The proposing half of :class:`autotune.search.model_strategy.ModelStrategy`."""

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
            [] if self._baseline_pending(state) else self.candidates(state, believe=False),
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
        anchor = self._next_anchor(state)
        # The first method's anchor goes ahead of the baseline, so that the baseline's repeats
        # can be screened like any config's (:meth:`ModelStrategy.next_cell`): at a level where
        # the anchor's runs already lie beyond the screen above the baseline's first run, its
        # further repeats there buy nothing (the slowest cells of a study are off at c=1).
        # (A failed anchor measured nothing: the next N of its method goes first instead.)
        measuring = any(
            c.num_speculative_tokens
            and (state.done.get(c.key()) is not None or c.key() in state.in_flight)
            for c in state.space.configs()
        )
        if baseline is not None and baseline.key() not in taken and (measuring or anchor is None):
            self._decide_levels(baseline, _levels_of(state.study))
            return baseline
        if anchor is not None:
            self._decide_levels(anchor, _levels_of(state.study))  # the model is fitted from it
            return anchor
        if self._baseline_pending(state):
            return None  # the model is fitted from the baseline too: wait for its run
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

    @staticmethod
    def _baseline_pending(state: SearchState) -> bool:
        """Whether the study's baseline has not finished yet (running or not started): the
        model's candidates are fitted from it, so none is proposed before it ran (a failed
        baseline is finished: the model then fits without it)."""
        baseline = state.space.baseline()
        return baseline is not None and baseline.key() not in state.done

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
            ids = {config_id(c.speculative_config()) for c in configs.values()}
            own = [r for r in rows if config_id(r.speculative_config) in ids]
            fits = self._prior_fits(option.method, own, workloads)
            fitted.append((option, configs, mine, models, fits))
        # Configs still running count as measured at their predicted throughput ("believer"
        # batching, as batch Bayesian optimization proposes several points at once): a second
        # proposal made while they run must beat what they are expected to reach, so parallel
        # slots are not spent on configs that only matter if a running one disappoints.
        for option, configs, _, models, _ in fitted if believe else ():
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
        for option, configs, mine, models, fits in fitted:
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
            # Where every measured N of the option loses to off decisively, a larger N is not
            # measured (:func:`lost_to_off`).
            closed = lost_to_off(mine, base_cells, noise)

            def open_at(n: int, closed: Mapping[Level, int] = closed) -> list[Level]:
                return [lv for lv in levels if n <= closed.get(lv, n)]

            for n in open_n:
                cand = self._by_model(
                    configs[n],
                    option,
                    n,
                    open_at(n),
                    models,
                    incumbent,
                    slack,
                    ratios=ratios,
                    priors=fits,
                )
                if cand is not None:
                    found[cand.config.key()] = cand
            for level in levels:
                near = self._neighbors(
                    option, mine, base_cells, level, incumbent, models, noise, ratios
                )
                for n in near:
                    if n not in open_n or n > closed.get(level, n):
                        continue
                    key = configs[n].key()
                    cand = found.get(key) or self._by_model(
                        configs[n],
                        option,
                        n,
                        open_at(n),
                        models,
                        incumbent,
                        slack,
                        force=True,
                        ratios=ratios,
                        priors=fits,
                    )
                    assert cand is not None
                    found[key] = dataclasses.replace(
                        cand,
                        levels=cand.levels | {level},
                        beside_best=cand.beside_best | ({level} if measured_guard else set()),
                    )
        # Most promising first, the guard's neighbours as rank_candidates says.
        return rank_candidates(found.values())


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
