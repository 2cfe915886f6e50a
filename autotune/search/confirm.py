"""Confirmation across engine starts: a finished search's close calls get one more engine start of
the winner, then of the rival, before the answer is stored (``measurement.confirm_starts``).

One engine start is one sample of a quantity that moves between starts (the drift check measures
by how much: the baseline's largest drift between its two starts, the study's start-to-start
spread). A level whose winner and runner-up (or baseline) differ by no more than that spread
rests on one start each, so its order is not established. Once the search and the drift check are
done, every such level is found from the search's own measurements (never from confirmation
starts, so a resume finds the same plan), the (winner, rival) pairs are ranked closest call
first and at most ``measurement.confirm_max_pairs`` of them are kept, and each config of a kept
pair is started once more (winner first, its rival after it finished: A-B order), measuring the
full protocol at its close levels only. A config in several pairs gets one start for all its
levels. The starts are trials tagged ``purpose = "confirm"``; their measurements are stored like
any other and the answer (``autotune.recommend.choose``) pools every start of a config.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from autotune.cluster.jobs import Cell
from autotune.engine._base import EngineConfig, Measurement
from autotune.recommend.choose import ConfigScore, baseline_drift, cells, choose
from autotune.search.space import SearchSpace
from autotune.search.strategy import noisy_cell
from autotune.spec.loader import ResolvedStudy
from autotune.spec.methods import config_id
from autotune.store import FINISHED_STATES, MeasurementRecord, TrialRecord

CONFIRM = "confirm"
"""The ``purpose`` of a confirmation start's trial."""

Level = tuple[str, int]
"""(workload, concurrency)."""


def confirm_enabled(study: ResolvedStudy) -> bool:
    """``measurement.confirm_starts``; unset: on for real engines, off for replays (a replay's
    starts differ only by which recorded repeats they draw, and the recorded search benchmarks
    ran without it)."""
    c = study.spec.measurement.confirm_starts
    return study.spec.engine.kind != "replay" if c is None else c


@dataclass(frozen=True)
class CloseCall:
    """A level whose winner and rival lie within the study's start-to-start spread."""

    workload: str
    concurrency: int
    winner: ConfigScore
    rival: ConfigScore
    margin_pct: float
    """|winner's median / rival's - 1|, in percent."""


@dataclass(frozen=True)
class Step:
    """One confirmation start: ``config`` measured at ``levels``, once ``after`` (the config key
    of its pair's winner; None: none) finished."""

    config: EngineConfig
    levels: tuple[Level, ...]
    after: str | None = None


@dataclass(frozen=True)
class Plan:
    noise_pct: float | None
    """The study's start-to-start spread (largest |baseline drift|); None: not measured."""
    close: tuple[CloseCall, ...] = ()
    steps: tuple[Step, ...] = ()
    pairs: int = 0
    """Pairs confirmed (within ``confirm_max_pairs``)."""
    dropped: int = 0
    """Close pairs left unconfirmed by the bound."""


def plan(study: ResolvedStudy, space: SearchSpace, rows: Sequence[MeasurementRecord]) -> Plan:
    """The confirmation starts the search's measurements call for (confirmation starts' rows are
    left out, so the plan is the same before, during and after them)."""
    rows = [r for r in rows if r.purpose != CONFIRM]
    drifts = baseline_drift(rows)
    if not drifts:
        return Plan(None)
    noise = max(abs(d.drift_pct) for d in drifts)
    by_id = {config_id(c.speculative_config()): c for c in space.configs()}
    close: list[CloseCall] = []
    for workload, concurrency in cells(rows):
        choice = choose(rows, workload, concurrency)
        if choice is None:
            continue
        w = choice.best
        for rival in (choice.runner_up, choice.baseline):
            if rival is None or _id(rival) == _id(w) or rival.median_tok_s <= 0:
                continue
            margin = 100.0 * abs(w.median_tok_s / rival.median_tok_s - 1.0)
            if margin <= noise:
                close.append(CloseCall(workload, concurrency, w, rival, margin))
                break
    # One pair per two configs, whichever won: its closest level's winner goes first.
    pairs: dict[frozenset[str], list[CloseCall]] = {}
    for call in sorted(close, key=lambda c: (c.margin_pct, c.workload, c.concurrency)):
        pairs.setdefault(frozenset((_id(call.winner), _id(call.rival))), []).append(call)
    kept = list(pairs.values())[: study.spec.measurement.confirm_max_pairs]
    levels: dict[str, list[Level]] = {}
    after: dict[str, str | None] = {}
    order: list[str] = []
    for calls in kept:
        first = calls[0]
        a, b = _id(first.winner), _id(first.rival)
        if a not in by_id or b not in by_id:
            continue  # a config the study's space no longer holds: nothing to start
        for cid, dep in ((a, None), (b, by_id[a].key())):
            if cid not in levels:
                levels[cid], after[cid] = [], dep
                order.append(cid)
            for call in calls:
                if (call.workload, call.concurrency) not in levels[cid]:
                    levels[cid].append((call.workload, call.concurrency))
    steps = tuple(Step(by_id[cid], tuple(sorted(levels[cid])), after[cid]) for cid in order)
    return Plan(noise, tuple(close), steps, len(kept), len(pairs) - len(kept))


def _id(s: ConfigScore) -> str:
    return config_id(s.speculative_config)


def confirm_cell(
    study: ResolvedStudy, levels: Sequence[Level], measured: Sequence[Measurement]
) -> Cell | None:
    """The next cell of a confirmation start: the protocol's planned cells at ``levels`` only
    (repeats outermost), then its sequential re-runs there."""
    done = {(m.workload, m.concurrency, m.repeat) for m in measured}
    wanted = set(levels)
    for r in range(study.spec.repeats):
        for w in study.measured_names():
            for c in study.spec.concurrency:
                if (w, c) in wanted and (w, c, r) not in done:
                    return Cell(workload=w, concurrency=c, repeat=r)
    return noisy_cell(study, measured)


@dataclass
class Confirmer:
    """The tuner's confirmation phase: which starts are due, and what they cost."""

    study: ResolvedStudy
    space: SearchSpace
    trials: Sequence[TrialRecord] = ()
    """The study's stored trials (a resume: its finished confirmation starts are not redone)."""
    plan: Plan | None = None
    finished: set[str] = field(default_factory=set)
    """Config keys whose confirmation start finished (complete or failed: not retried)."""
    running: set[str] = field(default_factory=set)
    begun: bool = False
    """A confirmation start ran or runs: the search is over, its strategy is not asked again."""
    starts: int = 0
    engine_seconds: float = 0.0
    """This run's confirmation starts and their engine-seconds."""
    _t0: float | None = None
    wall_s: float = 0.0

    def __post_init__(self) -> None:
        self.enabled: bool = confirm_enabled(self.study)
        for t in self.trials:
            if t.purpose == CONFIRM:
                self.begun = True
                if t.state in FINISHED_STATES:
                    self.finished.add(t.config_key)

    def due(self, rows: Sequence[MeasurementRecord], free: int) -> list[Step]:
        """Up to ``free`` confirmation starts to submit now (the search and the drift check are
        done); the plan is made on the first call."""
        if not self.enabled:
            return []
        if self.plan is None:
            self.plan = plan(self.study, self.space, rows)
        ready = [
            s
            for s in self.plan.steps
            if s.config.key() not in self.finished | self.running
            and (s.after is None or s.after in self.finished)
        ][:free]
        for s in ready:
            self.running.add(s.config.key())
            self.begun = True
            self.starts += 1
            if self._t0 is None:
                self._t0 = time.monotonic()
        return ready

    def done(self, key: str, engine_seconds: float) -> None:
        """A confirmation start of ``key`` finished."""
        self.running.discard(key)
        self.finished.add(key)
        self.engine_seconds += engine_seconds
        if self._t0 is not None:
            self.wall_s = time.monotonic() - self._t0

    def note(self) -> str:
        """One line for the run summary: what confirmation found and cost ("" when off)."""
        if not self.enabled or self.plan is None:
            return ""
        p = self.plan
        if p.noise_pct is None:
            return (
                "confirmation: no start-to-start spread measured (measurement.drift_check off, "
                "no baseline, or its second run failed): nothing to confirm against"
            )
        if not p.close:
            return (
                f"confirmation: no level within the start-to-start spread of "
                f"±{p.noise_pct:.1f}%: no extra engine starts"
            )
        levels = ", ".join(
            f"{c.workload} c={c.concurrency} ({c.winner.label(prose=False)} vs "
            f"{c.rival.label(prose=False)}, {c.margin_pct:.1f}%)"
            for c in p.close
        )
        bound = f"; {p.dropped} pair(s) over confirm_max_pairs left out" if p.dropped else ""
        return (
            f"confirmation: {len(p.close)} level(s) within the start-to-start spread of "
            f"±{p.noise_pct:.1f}% ({levels}); {p.pairs} pair(s), {self.starts} engine start(s) "
            f"this run, {self.engine_seconds:,.0f} engine-seconds, {self.wall_s:,.0f} s wall"
            f"{bound}"
        )
