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

A level is judged as its answer is (by goodput under ``objective: goodput``, among the configs
meeting the SLO under an ``slo:``), and its margin and the spread are in the study's objective.
A pair is atomic: it starts only when the run's budgets (``budget.max_engine_configs``,
``max_engine_hours``, ``max_wall_minutes``, ``--max-configs``) allow both its starts, counted
before the first, else it is skipped and the run summary says so; a pair whose first start has
begun is finished whatever the budget then says, by this run or by the resume after a crash.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from autotune.cluster.jobs import Cell
from autotune.engine._base import EngineConfig, Measurement
from autotune.evidence.cells import baseline_drift, cells
from autotune.evidence.objectives import measurement_value
from autotune.evidence.scores import ConfigScore
from autotune.recommend.choose import Choice
from autotune.search.space import SearchSpace
from autotune.search.strategy import Limits, can_measure, noisy_cell
from autotune.search.wall_budget import WallBudget
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
    """The study's start-to-start spread (largest |baseline drift|, in its objective); None:
    not measured."""
    close: tuple[CloseCall, ...] = ()
    kept: tuple[Pair, ...] = ()
    """The pairs to confirm (within ``confirm_max_pairs``), closest call first."""
    dropped: int = 0
    """Close pairs left unconfirmed by the bound."""
    objective: str = "throughput"
    """What the levels were judged by: ``throughput`` or ``goodput``."""

    @property
    def pairs(self) -> int:
        return len(self.kept)


@dataclass(frozen=True)
class Pair:
    """Two configs to start once more each, winner first: the close calls between them."""

    winner: str
    rival: str
    """Config ids (:func:`autotune.spec.methods.config_id`)."""
    calls: tuple[CloseCall, ...]
    """Closest first; the first call's winner is ``winner``."""

    @property
    def levels(self) -> tuple[Level, ...]:
        return tuple(sorted((c.workload, c.concurrency) for c in self.calls))

    def where(self) -> str:
        """``code c=1, code c=4``: the levels, as the run summary names them."""
        return ", ".join(f"{w} c={c}" for w, c in self.levels)


def plan(study: ResolvedStudy, space: SearchSpace, rows: Sequence[MeasurementRecord]) -> Plan:
    """The close calls and pairs the search's measurements call for (confirmation starts' rows
    are left out, so the plan is the same before, during and after them). A level is judged
    as its answer is (:func:`autotune.recommend.slo.choose_level`: by goodput under
    ``objective: goodput``, among the configs meeting the SLO under an ``slo:``), and margins
    and the start-to-start spread are in the study's objective
    (:func:`autotune.evidence.objectives.measurement_value`)."""
    from autotune.evidence.objectives import study_slo
    from autotune.recommend.slo import NoConfigMeetsSLO, answers_by_goodput, choose_level

    rows = [r for r in rows if r.purpose != CONFIRM]
    spec = study.spec
    value = measurement_value(spec)
    drifts = baseline_drift(rows, value)
    objective = "goodput" if spec.objective == "goodput" else "throughput"
    if not drifts:
        return Plan(None, objective=objective)
    noise = max(abs(d.drift_pct) for d in drifts)
    close: list[CloseCall] = []
    for workload, concurrency in cells(rows):
        slo = study_slo(spec, workload)
        try:
            choice = choose_level(rows, workload, concurrency, slo, answers_by_goodput(spec, slo))
        except NoConfigMeetsSLO:
            continue  # no answer at this level: nothing to confirm
        if choice is None:
            continue
        medians = _medians(rows, choice, value)
        w = choice.best
        for rival in (choice.runner_up, choice.baseline):
            if rival is None or _id(rival) == _id(w):
                continue
            a, b = medians.get(_id(w)), medians.get(_id(rival))
            if a is None or b is None or b <= 0:
                continue
            margin = 100.0 * abs(a / b - 1.0)
            if margin <= noise:
                close.append(CloseCall(workload, concurrency, w, rival, margin))
                break
    # One pair per two configs, whichever won: its closest level's winner goes first.
    by_two: dict[frozenset[str], list[CloseCall]] = {}
    for call in sorted(close, key=lambda c: (c.margin_pct, c.workload, c.concurrency)):
        by_two.setdefault(frozenset((_id(call.winner), _id(call.rival))), []).append(call)
    pairs = [Pair(_id(c[0].winner), _id(c[0].rival), tuple(c)) for c in by_two.values()]
    kept = pairs[: spec.measurement.confirm_max_pairs]
    return Plan(noise, tuple(close), tuple(kept), len(pairs) - len(kept), objective)


def _medians(
    rows: Sequence[MeasurementRecord],
    choice: Choice,
    value: Callable[[MeasurementRecord], float | None],
) -> dict[str, float]:
    """Config id -> the median of ``value`` over its measurements at ``choice``'s level."""
    values: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if (r.workload, r.concurrency, r.workload_digest) == (
            choice.workload,
            choice.concurrency,
            choice.workload_digest,
        ) and (v := value(r)) is not None:
            values[config_id(r.speculative_config)].append(v)
    return {k: statistics.median(v) for k, v in values.items()}


def steps(pairs: Sequence[Pair], space: SearchSpace) -> tuple[Step, ...]:
    """The starts ``pairs`` take: each config once, at the levels of all its pairs, a pair's
    rival after its winner. A pair with a config the study's space no longer holds is left
    out (nothing to start)."""
    by_id = {config_id(c.speculative_config()): c for c in space.configs()}
    levels: dict[str, list[Level]] = {}
    after: dict[str, str | None] = {}
    order: list[str] = []
    for pair in pairs:
        a, b = pair.winner, pair.rival
        if a not in by_id or b not in by_id:
            continue
        for cid, dep in ((a, None), (b, by_id[a].key())):
            if cid not in levels:
                levels[cid], after[cid] = [], dep
                order.append(cid)
            for level in pair.levels:
                if level not in levels[cid]:
                    levels[cid].append(level)
    return tuple(Step(by_id[cid], tuple(sorted(levels[cid])), after[cid]) for cid in order)


def _id(s: ConfigScore) -> str:
    return config_id(s.speculative_config)


@dataclass(frozen=True)
class Budget:
    """What the run's budgets leave when confirmation is planned (the tuner's counts), so a
    pair is started only when both its starts fit: the rules are the tuner's for one start,
    applied to the last of them."""

    started: int
    """The study's engine starts so far (``budget.max_engine_configs`` counts the study)."""
    run_started: int
    """This run's (``--max-configs`` counts the run)."""
    engine_seconds: float
    finished: int
    """The study's finished trials: their mean engine-seconds is a start's expected cost."""
    max_configs: int | None = None
    max_engine_configs: int | None = None
    max_engine_hours: float | None = None
    wall: WallBudget | None = None
    wall_status: str = "stopped: wall budget"

    def refuses(self, starts: int, rounds: int) -> tuple[str, str]:
        """(why, the study's status) when ``starts`` more engine starts, ``rounds`` of them one
        after another, would not all begin within the budgets; ("", "") when they would."""
        need = f"{self.started} started, {starts} more needed"
        cap = self.max_engine_configs
        if cap is not None and self.started + starts > cap:
            return f"{cap} engine configs: {need}", "stopped: budget"
        if self.max_configs is not None and self.run_started + starts > self.max_configs:
            return (
                f"--max-configs {self.max_configs}: {self.run_started} started this run, "
                f"{starts} more needed",
                "stopped: --max-configs",
            )
        hours = self.max_engine_hours
        if hours is not None and starts > 0:
            per = self.engine_seconds / self.finished if self.finished else 0.0
            if self.engine_seconds + (starts - 1) * per >= hours * 3600:
                return (
                    f"{hours} engine-hours: {self.engine_seconds:,.0f} engine-seconds spent, "
                    f"{starts} more starts of about {per:,.0f} s",
                    "stopped: budget",
                )
        wall = self.wall
        if wall is not None and wall.minutes is not None and rounds > 0:
            expected = wall.expected_s()
            elapsed = wall.elapsed_s
            if elapsed >= wall.minutes * 60 or (
                expected is not None and elapsed + rounds * expected > wall.minutes * 60
            ):
                about = f", {rounds} more of about {expected:,.0f} s" if expected else ""
                return (
                    f"{wall.minutes:g} wall-minutes: {elapsed:,.0f} s elapsed{about}",
                    self.wall_status,
                )
        return "", ""


def confirm_cell(
    study: ResolvedStudy,
    levels: Sequence[Level],
    measured: Sequence[Measurement],
    limits: Limits | None = None,
) -> Cell | None:
    """The next cell of a confirmation start: the protocol's planned cells at ``levels`` only
    (repeats outermost), then its sequential re-runs there, within ``limits`` (a replay's
    recorded repeats its earlier starts left)."""
    done = {(m.workload, m.concurrency, m.repeat) for m in measured}
    wanted = set(levels)
    for r in range(study.spec.repeats):
        for w in study.measured_names():
            for c in study.spec.concurrency:
                if (
                    (w, c) in wanted
                    and (w, c, r) not in done
                    and can_measure(limits, (w, c), measured)
                ):
                    return Cell(workload=w, concurrency=c, repeat=r)
    return noisy_cell(study, measured, limits)


@dataclass
class Confirmer:
    """The tuner's confirmation phase: which pairs fit the budget, which starts are due, and
    what they cost.

    A pair is atomic: it is started only when the budgets allow both its starts (counted before
    the first begins, :class:`Budget`), else it is skipped, and the run summary says so. Once a
    pair's first start has begun, its rival is owed (:meth:`owes`): the budget does not cut the
    pair, in this run or, after a crash, in the resume that finishes it."""

    study: ResolvedStudy
    space: SearchSpace
    trials: Sequence[TrialRecord] = ()
    """The study's stored trials (a resume: its finished confirmation starts are not redone)."""
    plan: Plan | None = None
    steps: tuple[Step, ...] = ()
    """The starts of the committed pairs."""
    committed: list[Pair] = field(default_factory=list)
    skipped: list[tuple[Pair, str]] = field(default_factory=list)
    """Pairs left out, with why (the budget)."""
    stop: tuple[str, str] = ("", "")
    """(The run's stop reason, the study's status) when the budget skipped a pair."""
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
    _admitted: bool = False

    def __post_init__(self) -> None:
        self.enabled: bool = confirm_enabled(self.study)
        self._key = {config_id(c.speculative_config()): c.key() for c in self.space.configs()}
        self._tried: set[str] = set()
        """Config keys with a confirmation trial of an earlier run (any state)."""
        for t in self.trials:
            if t.purpose == CONFIRM:
                self.begun = True
                self._tried.add(t.config_key)
                if t.state in FINISHED_STATES:
                    self.finished.add(t.config_key)

    def _prepare(self, rows: Sequence[MeasurementRecord]) -> None:
        """Make the plan and commit the pairs an earlier run began: the winner's confirmation
        start measured at the pair's levels (the budget counted the pair then). A pair whose
        winner's start finished elsewhere (an earlier run skipped it) cannot be made whole."""
        if self.plan is not None:
            return
        self.plan = plan(self.study, self.space, rows)
        measured: dict[str, set[Level]] = defaultdict(set)
        for r in rows:
            if r.purpose == CONFIRM:
                measured[config_id(r.speculative_config)].add((r.workload, r.concurrency))
        self._open: list[Pair] = []
        for pair in self.plan.kept:
            if pair.winner not in self._key or pair.rival not in self._key:
                continue  # a config the study's space no longer holds: nothing to start
            key = self._key[pair.winner]
            if key not in self._tried:
                self._open.append(pair)  # for the budget to decide (:meth:`due`)
            elif measured[pair.winner] & set(pair.levels):
                self.committed.append(pair)
            elif key in self.finished:
                why = "an earlier run left it out, and the winner's start has run"
                self.skipped.append((pair, f"budget ({why})"))
            else:  # interrupted before any cell of the pair: decided afresh
                self._open.append(pair)
        self.steps = steps(self.committed, self.space)

    def _admit(self, slots: int, budget: Budget | None) -> None:
        """Commit the open pairs, closest call first, while the budget allows all the starts
        they take (``slots`` engines at once, a rival after its winner)."""
        self._admitted = True
        for pair in self._open:
            trial = [*self.committed, pair]
            todo = [s for s in steps(trial, self.space) if s.config.key() not in self.finished]
            why, status = budget.refuses(len(todo), _rounds(todo, slots)) if budget else ("", "")
            if why:
                self.skipped.append((pair, f"budget ({why})"))
                if not self.stop[0]:
                    self.stop = (f"budget: {why} (confirmation of {pair.where()})", status)
                continue
            self.committed.append(pair)
        self.steps = steps(self.committed, self.space)

    def owes(self, rows: Callable[[], Sequence[MeasurementRecord]]) -> bool:
        """Whether a committed pair is half done (one of its starts ran or runs, another has not
        finished): its rival starts whatever the budget now says. ``rows``: the study's
        measurements, read once, when a resume finds confirmation begun."""
        if not self.enabled or not self.begun:
            return False
        if self.plan is None:
            self._prepare(rows())
        for pair in self.committed:
            keys = [self._key[pair.winner], self._key[pair.rival]]
            if any(k in self.finished | self.running for k in keys) and not all(
                k in self.finished for k in keys
            ):
                return True
        return False

    def due(
        self, rows: Sequence[MeasurementRecord], free: int, budget: Budget | None = None
    ) -> list[Step]:
        """Up to ``free`` confirmation starts to submit now (the search and the drift check are
        done); the plan is made, and the pairs the ``budget`` allows are committed, on the
        first call."""
        if not self.enabled:
            return []
        self._prepare(rows)
        if not self._admitted:
            self._admit(free, budget)
        ready = [
            s
            for s in self.steps
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

    def left(self) -> int:
        """Engine starts the skipped pairs would take (what a resume may still start)."""
        done = self.finished | {s.config.key() for s in self.steps}
        return len({self._key[m] for p, _ in self.skipped for m in (p.winner, p.rival)} - done)

    def done(self, key: str, engine_seconds: float) -> None:
        """A confirmation start of ``key`` finished."""
        self.running.discard(key)
        self.finished.add(key)
        self.engine_seconds += engine_seconds
        if self._t0 is not None:
            self.wall_s = time.monotonic() - self._t0

    def note(self) -> str:
        """What confirmation found and cost, for the run summary ("" when off): one line, and
        one more per pair the budget skipped."""
        if not self.enabled or self.plan is None:
            return ""
        p = self.plan
        if p.noise_pct is None:
            return (
                "confirmation: no start-to-start spread measured (measurement.drift_check off, "
                "no baseline, or its second run failed): nothing to confirm against"
            )
        by = " (judged by goodput)" if p.objective == "goodput" else ""
        if not p.close:
            return (
                f"confirmation: no level within the start-to-start spread of "
                f"±{p.noise_pct:.1f}%{by}: no extra engine starts"
            )
        levels = ", ".join(
            f"{c.workload} c={c.concurrency} ({c.winner.label(prose=False)} vs "
            f"{c.rival.label(prose=False)}, {c.margin_pct:.1f}%)"
            for c in p.close
        )
        bound = f"; {p.dropped} pair(s) over confirm_max_pairs left out" if p.dropped else ""
        lines = [
            f"confirmation: {len(p.close)} level(s) within the start-to-start spread of "
            f"±{p.noise_pct:.1f}%{by} ({levels}); {len(self.committed)} pair(s), "
            f"{self.starts} engine start(s) this run, {self.engine_seconds:,.0f} engine-seconds, "
            f"{self.wall_s:,.0f} s wall{bound}"
        ]
        lines += [f"confirmation of {pair.where()} skipped: {why}" for pair, why in self.skipped]
        return "\n".join(lines)


def _rounds(todo: Sequence[Step], slots: int) -> int:
    """How many starts follow one another when ``todo`` runs on ``slots`` engines: its longest
    chain of rivals after winners, or its starts over the slots, whichever is more."""
    after = {s.config.key(): s.after for s in todo}
    depth = 0
    for key in after:
        n, k = 0, after[key]
        while True:
            n += 1
            if k is None or k not in after:
                break
            k = after[k]
        depth = max(depth, n)
    return max(depth, -(-len(todo) // max(1, slots)))
