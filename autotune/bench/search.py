"""The search benchmark: run a strategy on a landscape through the replay engine, the real tuner
loop and a real store, and score it by the engine-seconds it spent to reach the true optimum.

The truth of a landscape is the mean over its recorded repeats of every (config, workload,
concurrency), a repeat slowed by a transient left out; a run reaches the target once the recommendation the choosing rule makes from what
was measured so far is within ``tolerance`` percent of the truth's best at every level, and stays
there to the end of the run. ``tolerance`` is one percent for every level or one per concurrency
(:data:`Tolerance`), for a landscape whose noise differs by load.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.engine.readers.landscape import Config as LandscapeConfig
from autotune.engine.readers.landscape import LandscapePoint, read_landscape
from autotune.errors import SpecError
from autotune.search.landscape_study import study_from_landscape
from autotune.search.samplers import SAMPLERS
from autotune.spec.knobs import knob_params, params_key

RESULT_KEYS = (
    "strategy",
    "seed",
    "engine_seconds",
    "engine_starts",
    "engine_seconds_to_target",
    "final_regret_pct",
    "grid_engine_seconds",
)
"""The keys of one :func:`run_strategy` result, in order (``--json`` prints exactly these)."""

DEFAULT_TOLERANCE_PCT = 1.0

Tolerance = float | Mapping[int, float]
"""The target, in percent below a level's true best: one for every level, or one per concurrency
(a landscape whose repeat noise differs by load is held to each level's own band)."""


def tolerance_at(tolerance: Tolerance, concurrency: int) -> float:
    """The target at ``concurrency``; a per-concurrency tolerance must name every level's."""
    if isinstance(tolerance, Mapping):
        if concurrency not in tolerance:
            raise ValueError(f"the tolerance names no target for concurrency {concurrency}")
        return float(tolerance[concurrency])
    return float(tolerance)


Config = LandscapeConfig
"""(method, draft, num_speculative_tokens, knobs JSON), as a landscape names an engine config."""
Level = tuple[str, int]
"""(workload, concurrency)."""


@dataclass(frozen=True)
class Truth:
    """What a landscape says is best, and what measuring all of it once costs."""

    levels: tuple[Level, ...]
    throughput: dict[Level, dict[Config, float]]
    """Mean over recorded repeats, per level and config."""
    config_seconds: dict[Config, float]
    """What measuring one config costs: its engine start and every cell's repeats."""
    knobs: bool = False
    """Whether the landscape names configs by their knobs too (it has the ``params`` column)."""

    @property
    def grid_engine_seconds(self) -> float:
        return sum(self.config_seconds.values())

    @property
    def oracle_engine_seconds(self) -> float:
        """The cost of a search that knew the answer: the baseline, each method at its largest N
        (what the model-guided search starts from) and every level's true best config."""
        largest: dict[tuple[str, str | None, str], int] = {}
        for method, draft, n, knobs in self.config_seconds:
            largest[(method, draft, knobs)] = max(n, largest.get((method, draft, knobs), 0))
        picked = {(m, d, n, k) for (m, d, k), n in largest.items()}
        picked |= {max(per, key=per.__getitem__) for per in self.throughput.values()}
        return sum(self.config_seconds[c] for c in picked)

    def best(self, level: Level) -> float:
        return max(self.throughput[level].values())

    def regret_pct(self, level: Level, config: Config | None) -> float:
        """How far below the level's best ``config`` truly is, in percent (100 if unknown)."""
        best = self.best(level)
        value = self.throughput[level].get(config) if config is not None else None
        if value is None or best <= 0:
            return 100.0
        return 100.0 * (best - value) / best


def landscape_truth(points: Sequence[LandscapePoint], repeats: int) -> Truth:
    """The landscape's truth, and the grid's cost with ``repeats`` repeats per cell.

    A cell's truth is the mean of its repeats, leaving out a repeat a transient slowed (more
    than :data:`TRANSIENT_SPREADS` times the landscape's median repeat spread below the cell's
    median). A config costs one engine start (the median of its rows, as the replay engine
    charges) and, per cell, ``repeats`` measurements of the mean recorded ``measure_s``.
    """
    cells: dict[tuple[Config, Level], list[LandscapePoint]] = defaultdict(list)
    for p in points:
        cells[(p.config, (p.workload, p.concurrency))].append(p)
    throughput: dict[Level, dict[Config, float]] = defaultdict(dict)
    measure: dict[Config, float] = defaultdict(float)
    floor = _transient_floor([[p.output_throughput_tok_s for p in g] for g in cells.values()])
    for (config, level), group in cells.items():
        tputs = [p.output_throughput_tok_s for p in group]
        med = statistics.median(tputs)
        kept = [t for t in tputs if (med - t) / med <= floor] if med > 0 else tputs
        throughput[level][config] = statistics.fmean(kept)
        measure[config] += repeats * statistics.fmean(p.measure_s for p in group)
    starts: dict[Config, list[float]] = defaultdict(list)
    for p in points:
        starts[p.config].append(p.engine_start_s)
    seconds = {c: statistics.median(s) + measure[c] for c, s in starts.items()}
    knobs = any(p.params for p in points)
    return Truth(tuple(sorted(throughput)), dict(throughput), seconds, knobs)


TRANSIENT_SPREADS = 4.0
"""A repeat slower than its cell's median by more than this many times the landscape's median
repeat spread was slowed by a transient (another process on the machine), not by its config:
the truth leaves it out. No repeat of the landscapes in bench/landscapes is that far (the worst
is 2.7 times, on cpu-tiny-llama); bench/stress.py's outlier family cuts repeats by 20-40 %."""


def _transient_floor(cells: Sequence[Sequence[float]]) -> float:
    """The relative slowdown below a cell's median past which a repeat is a transient."""
    spreads = [(max(v) - min(v)) / statistics.fmean(v) for v in cells if len(v) > 1 and min(v) > 0]
    return TRANSIENT_SPREADS * statistics.median(spreads) if spreads else float("inf")


def grid_and_oracle(landscape: Path | str, repeats: int | None = None) -> tuple[float, float]:
    """(grid_engine_seconds, oracle_engine_seconds) of a landscape; see :class:`Truth`."""
    points = read_landscape(Path(landscape))
    truth = landscape_truth(points, repeats or len({p.repeat for p in points}))
    return truth.grid_engine_seconds, truth.oracle_engine_seconds


def run_strategy(
    landscape: Path | str,
    strategy: str,
    seed: int = 0,
    tolerance: Tolerance = DEFAULT_TOLERANCE_PCT,
    repeats: int | None = None,
) -> dict[str, Any]:
    """Run one strategy once on a landscape (a fresh SQLite store in a temp dir) and score it.

    Returns a dict with :data:`RESULT_KEYS`. ``engine_seconds_to_target`` is None when the
    target is never reached (or not held to the end of the run).
    """
    from autotune.recommend.choose import choose

    truth, trials, rows = _replayed(landscape, strategy, seed, repeats)
    spent, worst, reached_at = _scored(truth, trials, rows, tolerance, choose)
    return {
        "strategy": strategy,
        "seed": seed,
        "engine_seconds": round(spent[-1] if spent else 0.0, 3),
        "engine_starts": len(trials),
        "engine_seconds_to_target": None if reached_at is None else round(reached_at, 3),
        "final_regret_pct": round(worst[-1], 4) if worst else 100.0,
        "grid_engine_seconds": round(truth.grid_engine_seconds, 3),
    }


def _scored(
    truth: Truth, trials: Sequence[Any], rows: Sequence[Any], tolerance: Tolerance, choose: Any
) -> tuple[list[float], list[float], float | None]:
    """(engine-seconds spent through each trial, the worst level's regret after it, the
    engine-seconds to target or None) of one replayed run."""
    by_trial: dict[int, list[Any]] = defaultdict(list)
    for r in rows:
        by_trial[r.trial_id].append(r)
    seen: list[Any] = []
    spent = 0.0
    worst: list[float] = []
    over: list[float] = []  # per trial: the most any level is beyond its target (<= 0: on target)
    cumulative: list[float] = []
    # Trials are numbered in start order; with the one-slot replay pool they finish in order,
    # so after trial k the store held exactly the rows of trials 0..k.
    # A recommendation counts once it can say how the answer compares with off: until the
    # baseline is measured (a landscape that has one), no answer is on target, whatever it is.
    has_off = any(c[2] == 0 for c in truth.config_seconds)
    for t in trials:
        spent += t.engine_seconds or 0.0
        seen.extend(by_trial.get(t.id, ()))
        cumulative.append(spent)
        off_seen = not has_off or any(r.num_speculative_tokens == 0 for r in seen)
        regrets = _regrets(truth, seen, choose) if off_seen else dict.fromkeys(truth.levels, 100.0)
        worst.append(max(regrets.values(), default=0.0))
        over.append(
            max((r - tolerance_at(tolerance, lv[1]) for lv, r in regrets.items()), default=0.0)
        )
    return cumulative, worst, time_to_target(cumulative, over, 0.0)


ROLES = ("off", "anchor, answers", "anchor, never", "later, answers", "later, never", "failed")
"""What an engine was to the search, as :func:`spend_by_role` splits engine-seconds: the baseline;
a method's first engine (its anchor) or a later N of a method already measured; "answers" when
the config is within the target tolerance of the true best at some level (it could be that
level's answer), "never" when it is not at any level; a trial that measured nothing."""


def spend_by_role(
    landscape: Path | str,
    strategy: str,
    seed: int = 0,
    tolerance: Tolerance = DEFAULT_TOLERANCE_PCT,
    repeats: int | None = None,
) -> tuple[dict[str, float], float | None]:
    """Where one run's engine-seconds to target went: per :data:`ROLES`, the engine-seconds of
    the trials up to the one that reached the target, over the grid's (the landscape's every
    config measured); and the cost to target over the grid's (None, and an empty split, when
    the run never reached it). The parts sum to the cost to target."""
    from autotune.recommend.choose import choose

    truth, trials, rows = _replayed(landscape, strategy, seed, repeats)
    cumulative, _, reached_at = _scored(truth, trials, rows, tolerance, choose)
    if reached_at is None:
        return {}, None
    answers = {
        config
        for level in truth.levels
        for config in truth.throughput[level]
        if truth.regret_pct(level, config) <= tolerance_at(tolerance, level[1]) + 1e-9
    }
    grid = truth.grid_engine_seconds
    by_trial: dict[int, list[Any]] = defaultdict(list)
    for r in rows:
        by_trial[r.trial_id].append(r)
    split = dict.fromkeys(ROLES, 0.0)
    methods: set[tuple[str, str | None, str]] = set()
    for t, spent in zip(trials, cumulative, strict=True):
        if spent > reached_at + 1e-9:
            break
        mine = by_trial.get(t.id, [])
        if not mine:
            role = "failed"
        else:
            r = mine[0]
            knobs = params_key(knob_params(r.speculative_config)) if truth.knobs else ""
            config = (r.method, r.draft, r.num_speculative_tokens, knobs)
            option = (r.method, r.draft, knobs)
            if r.num_speculative_tokens == 0:
                role = "off"
            else:
                kind = "later" if option in methods else "anchor"
                role = f"{kind}, {'answers' if config in answers else 'never'}"
                methods.add(option)
        split[role] += (t.engine_seconds or 0.0) / grid
    return split, reached_at / grid


def _replayed(
    landscape: Path | str, strategy: str, seed: int, repeats: int | None
) -> tuple[Truth, list[Any], list[Any]]:
    """Run ``strategy`` once on ``landscape`` (a fresh SQLite store in a temp dir): the
    landscape's truth, the finished trials in start order and every stored measurement."""
    from autotune import api
    from autotune.store import FINISHED_STATES, Store

    if strategy not in SAMPLERS:
        raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(SAMPLERS)}")
    if strategy not in available_strategies():
        raise SpecError("Optuna's GP sampler needs scipy (pip install scipy)", source="gp")
    path = Path(landscape).resolve()
    points = read_landscape(path)
    data = study_from_landscape(path, f"bench-{strategy}-{seed}", strategy, seed, repeats)
    truth = landscape_truth(points, data["repeats"])
    with tempfile.TemporaryDirectory(prefix="autotune-bench-", dir=_scratch_dir()) as tmp:
        # A file, not :memory:: Optuna's RDBStorage opens connections of its own.
        store = Store(f"sqlite:///{Path(tmp) / 'bench.db'}")
        try:
            api.create_study(store, data=data, source=str(path))
            api.run_study(store, data["name"])
            record = store.get_study(data["name"])
            trials = [t for t in store.trials(record) if t.state in FINISHED_STATES]
            rows = store.measurements(study=data["name"])
        finally:
            store.dispose()
    return truth, trials, rows


@dataclass(frozen=True)
class LevelAnswer:
    """One level's final answer under the margin rule (:func:`autotune.evidence.decide.verdict_of_runs`), scored
    against the landscape's truth."""

    workload: str
    concurrency: int
    answer: Config | None
    verdict: str
    """``tie``, ``undecided`` or ``decided`` between the level's two best medians; ``alone``
    when one config was measured there."""
    shortfall_pct: float
    """How far below the level's true best the answer is, in percent."""
    repeats: int
    """The answer's repeats at the level."""
    chosen_shortfall_pct: float = 100.0
    """The shortfall of what ``autotune.recommend.choose`` answers there (its tie rule)."""


def final_answers(
    landscape: Path | str, strategy: str, seed: int = 0, repeats: int | None = None
) -> list[LevelAnswer]:
    """Run ``strategy`` once and answer every level as the margin rule does: the two best
    configs by median (a screening run, measured once where others were repeated, is none);
    within 1 % the smaller N, else the higher median, called *undecided* where the 95 %
    interval of the ratio of their medians still contains 1."""
    from autotune.evidence.decide import verdict_of_runs as verdict
    from autotune.recommend.choose import choose

    truth, _, rows = _replayed(landscape, strategy, seed, repeats)
    cells: dict[Level, dict[Config, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        knobs = params_key(knob_params(r.speculative_config)) if truth.knobs else ""
        config = (r.method, r.draft, r.num_speculative_tokens, knobs)
        cells[(r.workload, r.concurrency)][config].append(r.output_throughput_tok_s)
    out = []
    for level in truth.levels:
        runs = cells.get(level, {})
        most = max((len(v) for v in runs.values()), default=0)
        ranked = sorted(
            (c for c, v in runs.items() if len(v) >= min(2, most)),
            key=lambda c: statistics.median(runs[c]),
            reverse=True,
        )
        answer: Config | None = ranked[0] if ranked else None
        said = "alone"
        if len(ranked) > 1:
            a, b = ranked[0], ranked[1]
            said = verdict(runs[a], runs[b])
            if said == "tie":  # the smaller N, then no draft model
                answer = min((a, b), key=lambda c: (c[2], c[1] is not None))
        out.append(
            LevelAnswer(
                level[0],
                level[1],
                answer,
                said,
                truth.regret_pct(level, answer),
                len(runs.get(answer, ())) if answer is not None else 0,
                _regret_of(truth, level, choose(rows, *level) if rows else None),
            )
        )
    return out


def _regret_of(truth: Truth, level: Level, choice: Any) -> float:
    """The truth's regret of a :class:`autotune.recommend.choose.Choice`'s best config."""
    if choice is None:
        return 100.0
    best = choice.best
    knobs = params_key(knob_params(best.speculative_config)) if truth.knobs else ""
    return truth.regret_pct(level, (best.method, best.draft, best.num_speculative_tokens, knobs))


def _scratch_dir() -> str | None:
    # Every measurement is one committed transaction; on tmpfs a commit costs no fsync.
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def time_to_target(
    cumulative_s: Sequence[float], worst_regret_pct: Sequence[float], tolerance: float
) -> float | None:
    """The engine-seconds after which the worst regret stayed within ``tolerance`` to the end.

    ``cumulative_s[k]`` is the engine-seconds spent through trial k and ``worst_regret_pct[k]``
    the worst level's regret of the recommendation after it. None if the last one is outside.
    """
    reached = None
    for spent, regret in zip(reversed(cumulative_s), reversed(worst_regret_pct), strict=True):
        if regret > tolerance + 1e-9:
            break
        reached = spent
    return reached


def _regrets(truth: Truth, rows: Sequence[Any], choose: Any) -> dict[Level, float]:
    """Per level, how far below its true best the recommendation from ``rows`` is, in percent."""
    regrets = {}
    for level in truth.levels:
        # The search's quality: the answer recommend gives (autotune.evidence.decide).
        choice = choose(rows, *level) if rows else None
        config = None
        if choice is not None:
            best = choice.best
            config = (
                best.method,
                best.draft,
                best.num_speculative_tokens,
                params_key(knob_params(best.speculative_config)) if truth.knobs else "",
            )
        regrets[level] = truth.regret_pct(level, config)
    return regrets


def available_strategies() -> list[str]:
    """Every strategy whose dependencies are installed (Optuna's GP sampler needs scipy)."""
    import importlib.util

    return [s for s in SAMPLERS if s != "gp" or importlib.util.find_spec("scipy") is not None]


def run_bench(
    landscape: Path | str,
    strategies: Iterable[str],
    seeds: int,
    tolerance: Tolerance = DEFAULT_TOLERANCE_PCT,
    jobs: int | None = None,
) -> list[dict[str, Any]]:
    """:func:`run_strategy` for every strategy and seed 0..seeds-1, in that order.

    Runs are independent (each has its own store), so ``jobs`` > 1 runs them in that many
    processes; the default is the number of CPUs, at most 4.
    """
    tasks = [(str(landscape), s, seed, tolerance) for s in strategies for seed in range(seeds)]
    workers = min(jobs or min(os.cpu_count() or 1, 4), len(tasks))
    if workers <= 1:
        return [run_strategy(*t) for t in tasks]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_run_task, tasks))


def _run_task(task: tuple[str, str, int, Tolerance]) -> dict[str, Any]:
    return run_strategy(*task)


@dataclass(frozen=True)
class StrategySummary:
    """One strategy's results over seeds."""

    strategy: str
    runs: int
    reached: int
    """Runs that reached the target."""
    median_to_target_ratio: float | None
    """Median over runs of engine_seconds_to_target / grid_engine_seconds; a run that never
    reached the target counts as infinitely expensive (None when most never did)."""
    median_spent_ratio: float
    """Median over runs of engine_seconds / grid_engine_seconds."""
    median_engine_starts: float
    worst_final_regret_pct: float


def summarize(results: Sequence[dict[str, Any]]) -> list[StrategySummary]:
    """Per strategy, in first-seen order."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        groups[r["strategy"]].append(r)
    out = []
    for strategy, runs in groups.items():
        ratios = [
            float("inf")
            if r["engine_seconds_to_target"] is None
            else r["engine_seconds_to_target"] / r["grid_engine_seconds"]
            for r in runs
        ]
        med = statistics.median(ratios)
        out.append(
            StrategySummary(
                strategy=strategy,
                runs=len(runs),
                reached=sum(r["engine_seconds_to_target"] is not None for r in runs),
                median_to_target_ratio=med if med != float("inf") else None,
                median_spent_ratio=statistics.median(
                    r["engine_seconds"] / r["grid_engine_seconds"] for r in runs
                ),
                median_engine_starts=statistics.median(r["engine_starts"] for r in runs),
                worst_final_regret_pct=max(r["final_regret_pct"] for r in runs),
            )
        )
    return out


@dataclass(frozen=True)
class BenchResult:
    """``autotune bench search``: every run, the per-strategy summaries, and the landscape's
    grid and oracle engine-seconds."""

    runs: list[dict[str, Any]]
    summaries: list[StrategySummary]
    grid_engine_seconds: float
    oracle_engine_seconds: float


def bench_search(
    landscape: Path,
    strategies: Sequence[str] = (),
    seeds: int = 3,
    tolerance: float = 1.0,
    jobs: int | None = None,
) -> BenchResult:
    """Replay ``landscape`` through the real tuner loop with each strategy (default: every
    installed one) over ``seeds`` and score the engine-seconds each needed to reach
    ``tolerance`` percent of every level's true best."""
    chosen = list(strategies) or available_strategies()
    runs = run_bench(landscape, chosen, seeds, tolerance, jobs=jobs)
    grid_s, oracle_s = grid_and_oracle(landscape)
    return BenchResult(runs, summarize(runs), grid_s, oracle_s)
