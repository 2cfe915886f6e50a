"""The model-guided strategy on small replayed landscapes built here from a known acceptance
curve and a known step cost, t_step(N, c) = t0(c) + d · N, so the right answer is known."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from autotune import api
from autotune.engine.readers.landscape import LandscapePoint, read_landscape, write_landscape
from autotune.search.landscape_study import study_from_landscape
from autotune.search.model_bounds import _Run, _step_floor
from autotune.search.model_propose import prior_anchor_n
from autotune.spec.catalog import AcceptanceCurve, acceptance_curves
from autotune.spec.methods import METHODS
from autotune.store import Store

DRAFT = "org/toy-eagle3"
T0 = {1: 0.010, 4: 0.012}  # baseline step per concurrency, seconds


def toy_landscape(
    path: Path,
    acceptance: Sequence[float],
    per_token_s: float | Mapping[int, float],
    skip_n: Sequence[int] = (),
    repeats: int = 2,
    trajectory: float = 0.0,
    model: str = "org/toy",
) -> Path:
    """eagle3 N = 1..len(acceptance) at c = 1 and 4, identical repeats, 30 s starts.

    ``per_token_s``: the step cost of one draft token, or per concurrency level. ``trajectory``:
    a run at N accepts a_i x (1 + trajectory x (N_max - N) / (N_max - 1)) (capped at 1), a
    smaller N accepting more than the largest N's prefix, as the recorded sweeps show."""
    cost = per_token_s if isinstance(per_token_s, Mapping) else dict.fromkeys(T0, per_token_s)
    points = []
    for n in range(len(acceptance) + 1):
        if n in skip_n:
            continue
        lift = 1 + trajectory * (len(acceptance) - n) / max(len(acceptance) - 1, 1)
        acc = tuple(min(1.0, a * lift) for a in acceptance[:n])
        for c, t0 in T0.items():
            tput = c * (1 + sum(acc)) / (t0 + cost[c] * n)
            for r in range(repeats):
                points.append(
                    LandscapePoint(
                        model=model,
                        workload="code",
                        method="eagle3" if n else "none",
                        draft=DRAFT if n else None,
                        num_speculative_tokens=n,
                        concurrency=c,
                        repeat=r,
                        output_throughput_tok_s=tput,
                        mean_acceptance_length=1 + sum(acc) if n else None,
                        acceptance_per_pos=acc,
                        engine_start_s=30.0,
                        measure_s=5.0,
                    )
                )
    write_landscape(path, points)
    return path


def run(tmp_path: Path, landscape: Path, **data_over) -> tuple[Store, object]:
    store = Store(str(tmp_path / "s.db"))
    data = study_from_landscape(landscape, "toy", sampler="model", seed=0)
    data.update(data_over)
    api.create_study(store, data=data, source=str(landscape))
    return store, api.run_study(store, "toy")


def test_stops_early_when_the_largest_n_clearly_wins(tmp_path: Path):
    # High acceptance everywhere and a cheap draft token: N=7 beats every smaller N by far.
    land = toy_landscape(tmp_path / "l.csv", [0.95] * 7, per_token_s=0.0002)
    store, summary = run(tmp_path, land)
    trials = store.trials(store.get_study("toy"))
    assert [t.num_speculative_tokens for t in trials][:2] == [7, 0]  # N_max, then the baseline
    # The grid has 8 configs; the model checks N_max's neighbor at most and stops.
    assert len(trials) <= 4
    assert summary.stop_reason == "no unmeasured config can beat the measured best"
    assert summary.trials_skipped == 0
    for c in T0:
        assert api.recommend(store, "org/toy", "code", c).choice.best.num_speculative_tokens == 7


def test_finds_the_known_best_n(tmp_path: Path):
    # (1 + E(N)) / (1 + 15 N) per 10 ms is largest at N = 3 (by ~4%) at both levels.
    acceptance = [0.9, 0.8, 0.5, 0.2, 0.1, 0.05, 0.02]
    land = toy_landscape(tmp_path / "l.csv", acceptance, per_token_s=0.0015)
    store, _ = run(tmp_path, land)
    trials = store.trials(store.get_study("toy"))
    assert len(trials) < 8
    assert len({t.config_key for t in trials}) == len(trials)
    assert api.recommend(store, "org/toy", "code", 1).choice.best.num_speculative_tokens == 3
    assert api.recommend(store, "org/toy", "code", 4).choice.best.num_speculative_tokens == 3


def test_engines_measure_only_where_they_could_win(tmp_path: Path):
    # At c = 4 a draft token costs more than the whole baseline step: speculation loses there
    # at every N (the baseline wins by 30 % and more), while at c = 1 N = 3 wins as above.
    acceptance = [0.9, 0.8, 0.5, 0.2, 0.1, 0.05, 0.02]
    land = toy_landscape(tmp_path / "l.csv", acceptance, {1: 0.0015, 4: 0.02}, repeats=3)
    store, _ = run(tmp_path, land)
    trials = store.trials(store.get_study("toy"))
    rows = store.measurements(study="toy")
    repeats: dict[tuple[int, int], int] = defaultdict(int)  # (N, c) -> rows
    for r in rows:
        repeats[(r.num_speculative_tokens, r.concurrency)] += 1
    assert [t.num_speculative_tokens for t in trials][:2] == [7, 0]
    # The anchor ran first, with nothing to compare with: every level, every repeat.
    assert repeats[(7, 1)] == repeats[(7, 4)] == 3
    # The baseline takes every level; at c = 1 its first run is far below the anchor's: no
    # repeats (off is not the answer there); at c = 4, where it wins, every repeat.
    assert repeats[(0, 1)] == 1 and repeats[(0, 4)] == 3
    # Every later engine measures c = 1, the one level where it could win; the winner there
    # then runs once at c = 4 (a contender for the one config of all levels), the rest never.
    later = {t.num_speculative_tokens for t in trials[2:]}
    assert 3 in later and len(later) > 1
    assert repeats[(3, 1)] == 3 and repeats[(3, 4)] == 1
    assert all(repeats[(n, 4)] == 0 for n in later - {3})
    at_1 = api.recommend(store, "org/toy", "code", 1).choice
    assert at_1.best.num_speculative_tokens == 3
    # Off's one run there is a screening run: never ranked, but it states the speedup, decided.
    assert all(not s.is_baseline for s in at_1.ranked)
    assert at_1.vs_baseline is not None and at_1.vs_baseline.verdict == "decided"
    assert at_1.baseline is not None and at_1.baseline.repeats == 1
    off = api.recommend(store, "org/toy", "code", 4).choice
    assert off.best.is_baseline and off.best.repeats == 3
    # A screening run (N = 3 at c = 4, measured once) is never ranked.
    assert all(s.num_speculative_tokens != 3 for s in off.ranked)


def test_a_failed_largest_n_falls_back_to_the_next(tmp_path: Path):
    # N=7 is missing from the landscape, so its engine fails; N=6 becomes the anchor, and
    # still goes ahead of the baseline (the failed engine measured nothing to screen off by).
    land = toy_landscape(tmp_path / "l.csv", [0.95] * 7, per_token_s=0.0002, skip_n=[7])
    methods = [{"method": "eagle3", "draft": DRAFT, "num_speculative_tokens": {"max": 7}}]
    store, summary = run(tmp_path, land, methods=methods)
    trials = store.trials(store.get_study("toy"))
    assert [(t.num_speculative_tokens, t.state) for t in trials][:3] == [
        (7, "failed"),
        (6, "complete"),
        (0, "complete"),
    ]
    assert summary.trials_failed == 1


def test_resume_continues_without_measuring_twice(tmp_path: Path):
    acceptance = [0.9, 0.8, 0.5, 0.2, 0.1, 0.05, 0.02]
    land = toy_landscape(tmp_path / "l.csv", acceptance, per_token_s=0.0015)
    store = Store(str(tmp_path / "s.db"))
    data = study_from_landscape(land, "toy", sampler="model", seed=0)
    api.create_study(store, data=data, source=str(land))
    first = api.run_study(store, "toy", max_configs=2)
    assert first.trials_run == 2
    api.run_study(store, "toy")
    keys = [t.config_key for t in store.trials(store.get_study("toy"))]
    assert len(keys) == len(set(keys)) > 2


def test_model_is_the_default_sampler(tmp_path: Path):
    land = toy_landscape(tmp_path / "l.csv", [0.95] * 3, per_token_s=0.0002)
    data = study_from_landscape(land, "toy")
    del data["sampler"]
    created = api.create_study(Store(str(tmp_path / "s.db")), data=data, source=str(land))
    assert created.resolved.spec.sampler == "model"


def run_at(step_s: float, half_width: float = 0.0) -> _Run:
    return _Run(step_s, half_width)


def test_step_floor_is_the_convex_monotone_amortized_lower_bound():
    runs = {2: run_at(1.0), 3: run_at(1.2), 8: run_at(3.0)}
    base = run_at(0.5)
    # Right of 3: the chord 2..3 extended reaches 1.4, but t(8) = 3.0 amortized over 9 tokens
    # leaves at least 5 / 9 of it for 5 tokens.
    assert _step_floor(4, runs, base) == pytest.approx(3.0 * 5 / 9)
    # Without t(8): the chord 2..3 extended (slope 0.2), at least t(3).
    assert _step_floor(4, {2: run_at(1.0), 3: run_at(1.2)}, base) == pytest.approx(1.4)
    # Left of 2: the chord 2..3 extended left reaches 0.8, above the baseline's 0.5.
    assert _step_floor(1, runs, base) == pytest.approx(0.8)
    # Past the last run: the chord 3..8 extended (slope 0.36).
    assert _step_floor(10, runs, base) == pytest.approx(3.72)
    # One run and a baseline: N = 1 verifies 2 tokens of N = 3's 4, so at least half its step.
    assert _step_floor(1, {3: run_at(1.2)}, base) == pytest.approx(0.6)
    # ... unless the baseline's own step is longer than that.
    assert _step_floor(1, {3: run_at(1.2)}, run_at(0.7)) == pytest.approx(0.7)
    # Bands are taken at their permissive ends: t(3) low = 1.2 / 1.1, t(2) high = 1 / 0.9.
    noisy = {2: run_at(1.0, 0.1), 3: run_at(1.2, 0.1)}
    low3, high2 = 1.2 / 1.1, 1.0 / 0.9
    assert _step_floor(4, noisy, None) == pytest.approx(max(low3, low3 + (low3 - high2)))


def test_proposes_a_batch_for_free_slots(tmp_path: Path):
    """With several free slots the baseline and every method's anchor start together (each is
    needed before the model can rank anything), the first method's anchor ahead of the baseline
    (off's repeats are screened against it); nothing else is needed until they finish (the
    slots beside them, ``fill``: tests/unit/test_model_strategy_slots.py)."""
    from autotune.search.model_strategy import ModelStrategy
    from autotune.search.space import SearchSpace
    from autotune.search.strategy import SearchState
    from autotune.spec.loader import ResolvedStudy

    land = toy_landscape(tmp_path / "l.csv", [0.8] * 4, per_token_s=0.001)
    store = Store(str(tmp_path / "s.db"))
    data = study_from_landscape(land, "toy", sampler="model", seed=0)
    data["methods"].append({"method": "ngram", "num_speculative_tokens": {"min": 1, "max": 3}})
    created = api.create_study(store, data=data, source=str(land))
    study = ResolvedStudy.from_json(created.study.resolved_json)
    space = SearchSpace(study)
    strategy = ModelStrategy(study)
    empty = SearchState(study, space, rows=(), done={}, in_flight=frozenset())
    batch = strategy.propose(empty, slots=8, fill=False)
    assert [(c.method, c.num_speculative_tokens) for c in batch] == [
        ("eagle3", 4),
        ("none", 0),
        ("ngram", 3),
    ]
    assert [c.label() for c in strategy.propose(empty, slots=1)] == ["eagle3 N=4"]
    running = SearchState(
        study, space, rows=(), done={}, in_flight=frozenset(c.key() for c in batch)
    )
    assert strategy.propose(running, slots=5, fill=False) == []
    # The plan so far: the three running configs (no candidate is known before they finish).
    assert strategy.planned(running) == 3
    assert strategy.planned(empty) == 3


def test_a_smaller_n_that_accepts_more_than_the_prefix_is_measured(tmp_path: Path):
    # The trajectory effect of the recorded sweeps (a smaller N accepting up to eagle3's fitted
    # prefix ratio more than the largest N's run): at c = 1 the true best is N = 5, which an
    # exact-prefix prediction from the N = 7 run ranks below N = 6 and never starts.
    acceptance = [round(0.7 * 0.95**i, 4) for i in range(7)]
    lift = METHODS["eagle3"].prefix_ratio[1] - 1
    land = toy_landscape(tmp_path / "l.csv", acceptance, per_token_s=0.003, trajectory=lift)
    truth: dict[int, dict[int, float]] = defaultdict(dict)
    for p in read_landscape(land):
        truth[p.concurrency][p.num_speculative_tokens] = p.output_throughput_tok_s
    store, _ = run(tmp_path, land)
    measured = {t.num_speculative_tokens for t in store.trials(store.get_study("toy"))}
    for c, by_n in truth.items():
        best_n = max(by_n, key=lambda n: by_n[n])
        assert best_n in measured, (c, best_n, sorted(measured))
        answer = api.recommend(store, "org/toy", "code", c).choice.best.num_speculative_tokens
        # Within the choosing rule's 1 % tie (which prefers the smaller N) of the true best.
        assert by_n[answer] >= by_n[best_n] * 0.99, (c, answer, best_n)


def _curve(by_n: dict[int, float]) -> AcceptanceCurve:
    return AcceptanceCurve(
        acceptance_length_by_n=by_n,
        workload="code",
        dataset="x",
        measured="x",
        source="https://example.org",
    )


def test_prior_anchor_n_is_where_the_published_curve_levels_off():
    # DeepSeek-V4-Pro DSpark (InferenceX): peaks at N = 6, falls by N = 8.
    dspark = _curve({1: 1.84, 2: 2.51, 3: 3.01, 4: 3.36, 5: 3.61, 6: 3.77, 7: 3.73, 8: 3.47})
    assert prior_anchor_n([dspark], range(1, 9)) == 6
    # Its MTP plateaus from N = 4 (gains 0.05 and less past N = 3).
    mtp = _curve({1: 1.79, 2: 2.27, 3: 2.49, 4: 2.54, 5: 2.55, 6: 2.55, 7: 2.54, 8: 2.58})
    assert prior_anchor_n([mtp], range(1, 9)) == 3
    # Several curves: the largest answer; a curve still growing at its end says nothing.
    assert prior_anchor_n([mtp, dspark], range(1, 9)) == 6
    assert prior_anchor_n([_curve({3: 3.6, 7: 5.6})], range(1, 9)) is None
    assert prior_anchor_n([dspark], [10, 11]) is None
    assert prior_anchor_n([], range(1, 9)) is None


def test_a_published_curve_orders_the_first_batch_only(tmp_path: Path):
    # The same measured landscape under the catalog's Kimi-K2.5 (whose eagle3 entry carries
    # InferenceX's curves, levelling off past N = 6) and under a model with no curve.
    kimi = acceptance_curves("moonshotai/Kimi-K2.5")["eagle3"]
    assert prior_anchor_n(kimi, range(1, 8)) == 6
    acceptance = [0.9, 0.8, 0.5, 0.2, 0.1, 0.05, 0.02]
    answers = {}
    for model in ("org/toy", "moonshotai/Kimi-K2.5"):
        land = toy_landscape(tmp_path / f"{model[:3]}.csv", acceptance, 0.0015, model=model)
        store = Store(str(tmp_path / f"{model[:3]}.db"))
        data = study_from_landscape(land, "toy", sampler="model", seed=0)
        api.create_study(store, data=data, source=str(land))
        api.run_study(store, "toy")
        trials = store.trials(store.get_study("toy"))
        first = [t.num_speculative_tokens for t in trials][:2]
        assert first == ([6, 0] if model.startswith("moonshotai") else [7, 0]), model
        # Never a measurement: every stored acceptance length is the landscape's.
        truth = {p.num_speculative_tokens: p.mean_acceptance_length for p in read_landscape(land)}
        for r in store.measurements(study="toy"):
            assert r.mean_acceptance_length == pytest.approx(truth[r.num_speculative_tokens])
        answers[model] = {
            c: api.recommend(store, model, "code", c).choice.best.num_speculative_tokens for c in T0
        }
    assert answers["moonshotai/Kimi-K2.5"] == answers["org/toy"] == {1: 3, 4: 3}
