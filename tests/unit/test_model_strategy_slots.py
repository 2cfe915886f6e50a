"""The model-guided strategy on several engine slots: free slots take the configs that could
still win, and a running config the evidence rules out is cancelled, its measurements kept.

Runs the real tuner, store and replay engine on :class:`autotune.cluster.virtual.VirtualPool`
(k slots on a virtual clock, so which engine finishes first is decided by the recorded times,
not by this machine's load), on a landscape built here: eagle3 N = 1..7 whose N = 7 wins
everywhere by far (high acceptance, cheap draft tokens)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from autotune import api
from autotune.cluster.virtual import VirtualPool
from autotune.engine.readers.landscape import LandscapePoint, write_landscape
from autotune.engine.replay import ReplayEngine
from autotune.search.landscape_study import study_from_landscape
from autotune.search.model_strategy import ModelStrategy
from autotune.search.protocol import save_recommendations
from autotune.search.space import SearchSpace
from autotune.search.strategy import SearchState
from autotune.search.tuner import Tuner
from autotune.spec.loader import ResolvedStudy
from autotune.store import Store

DRAFT = "org/toy-eagle3"
T0 = {1: 0.010, 4: 0.012}  # baseline step per concurrency, seconds
N_MAX = 7


def landscape(path: Path) -> Path:
    """Baseline and eagle3 N = 1..7 at c = 1 and 4, 2 identical repeats, a_i = 0.95, 0.2 ms a
    draft token: N = 7 wins everywhere. Its cells take 1 s, every other config's 5 s, so on
    several slots N = 7 finishes while the configs started beside it are still measuring."""
    points = []
    for n in range(N_MAX + 1):
        acc = (0.95,) * n
        for c, t0 in T0.items():
            for r in range(2):
                points.append(
                    LandscapePoint(
                        model="org/toy",
                        workload="code",
                        method="eagle3" if n else "none",
                        draft=DRAFT if n else None,
                        num_speculative_tokens=n,
                        concurrency=c,
                        repeat=r,
                        output_throughput_tok_s=c * (1 + sum(acc)) / (t0 + 0.0002 * n),
                        mean_acceptance_length=1 + sum(acc) if n else None,
                        acceptance_per_pos=acc,
                        engine_start_s=30.0,
                        measure_s=1.0 if n == N_MAX else 5.0,
                    )
                )
    write_landscape(path, points)
    return path


def make_study(tmp_path: Path) -> Store:
    land = landscape(tmp_path / "l.csv")
    store = Store(str(tmp_path / "s.db"))
    data = study_from_landscape(land, "toy", sampler="model", seed=0)
    api.create_study(store, data=data, source=str(land))
    store.ensure_optuna_schema()
    return store


def run(store: Store, slots: int, max_configs: int | None = None) -> VirtualPool:
    """One tuner run of the study on ``slots`` virtual slots; the pool it ran on."""
    resolved = ResolvedStudy.from_json(store.get_study("toy").resolved_json)
    pools: list[VirtualPool] = []

    def factory(_: ResolvedStudy) -> VirtualPool:
        engine = lambda: ReplayEngine(str(resolved.landscape), resolved.spec.seed)  # noqa: E731
        pools.append(VirtualPool(slots, engine))
        return pools[-1]

    with store.lease("toy"):
        Tuner(store, store.get_study("toy"), factory).run(max_configs=max_configs)
    return pools[0]


def test_k_free_slots_take_k_configs_that_could_win(tmp_path: Path):
    # Nothing is measured yet: N=7 (the anchor) and the baseline are what the model needs; the
    # other two slots take N of the method that could still win (nothing rules them out).
    store = make_study(tmp_path)
    study = ResolvedStudy.from_json(store.get_study("toy").resolved_json)
    space = SearchSpace(study)
    state = SearchState(study=study, space=space, rows=[], done={}, in_flight=frozenset())
    picks = ModelStrategy(study, curves={}).propose(state, 4)
    assert len(picks) == 4
    assert len({c.key() for c in picks}) == 4
    assert [c.num_speculative_tokens for c in picks[:2]] == [N_MAX, 0]
    # With the anchor and the baseline running, three free slots take three more configs.
    running = frozenset(c.key() for c in picks[:2])
    more = ModelStrategy(study, curves={}).propose(dataclasses.replace(state, in_flight=running), 3)
    assert len(more) == 3
    assert not {c.key() for c in more} & running
    # Through the tuner: four slots, four engines at once.
    assert run(store, slots=4).peak == 4


def test_one_slot_starts_only_what_the_model_needs(tmp_path: Path):
    # On one slot nothing else runs when the tuner asks: no speculative config, no cancel, and
    # the study ends as soon as N=7 has ruled the rest out.
    store = make_study(tmp_path)
    pool = run(store, slots=1)
    trials = store.trials(store.get_study("toy"))
    assert pool.peak == 1
    assert [t.num_speculative_tokens for t in trials][:2] == [N_MAX, 0]
    assert not [t for t in trials if t.state == "cancelled"]
    assert len(trials) < N_MAX + 1


def test_a_running_config_ruled_out_is_cancelled_and_its_measurements_stay(tmp_path: Path):
    store = make_study(tmp_path)
    run(store, slots=4)
    record = store.get_study("toy")
    trials = store.trials(record)
    cancelled = [t for t in trials if t.state == "cancelled"]
    assert cancelled, [(t.num_speculative_tokens, t.state) for t in trials]
    rows = store.measurements(study="toy")
    for t in cancelled:
        assert t.num_speculative_tokens not in (0, N_MAX)
        assert t.failure_reason is not None and t.failure_reason.startswith("cancelled: ruled out")
        mine = [r for r in rows if r.trial_id == t.id]
        # Stopped before its 4 cells, and what it measured is kept with the study's rows.
        assert 1 <= len(mine) < 4
        assert t.engine_seconds == 30.0 + 5.0 * len(mine)
    assert save_recommendations(store, record) > 0
    # The answer is N=7 at every level (the cancelled configs never rival it).
    for c in T0:
        top = max((r for r in rows if r.concurrency == c), key=lambda r: r.output_throughput_tok_s)
        assert top.num_speculative_tokens == N_MAX


def test_resume_after_a_cancel_does_not_start_the_cancelled_config_again(tmp_path: Path):
    store = make_study(tmp_path)
    run(store, slots=4, max_configs=4)  # stops after the first batch, one of them cancelled
    first = store.trials(store.get_study("toy"))
    assert [t.state for t in first].count("cancelled") >= 1
    assert all(t.state in ("complete", "cancelled") for t in first)
    run(store, slots=4)  # the resume
    trials = store.trials(store.get_study("toy"))
    keys = [t.config_key for t in trials]
    assert len(keys) == len(set(keys))  # nothing started twice, the cancelled ones neither
    assert {t.id for t in first} <= {t.id for t in trials}
    assert store.get_study("toy").status == "done"
    # A third run has nothing left to do.
    run(store, slots=4)
    assert len(store.trials(store.get_study("toy"))) == len(trials)


def test_max_configs_counts_configs_not_slots(tmp_path: Path):
    # --max-configs 1 on four free slots starts one engine (it used to fill every slot: 4).
    store = make_study(tmp_path)
    pool = run(store, slots=4, max_configs=1)
    trials = store.trials(store.get_study("toy"))
    assert len(trials) == 1 and pool.peak == 1
    assert store.get_study("toy").status == "stopped: --max-configs"
    # K=2 on four slots: two engines, at once.
    run(store, slots=4, max_configs=2)
    assert len(store.trials(store.get_study("toy"))) == 3
