"""The run protocol around the tuner: hold the study's lease, recover what a dead driver left,
tune, and save the recommendations; and the Optuna clean-up when a study is deleted.

Every write checks the lease in its own transaction (``Store.lease``): a driver whose lease was
taken over writes nothing more, stops its engines and raises LeaseLostError. Only with the lease
held are a dead driver's trials marked interrupted (their measurements kept: the resume measures
only the missing cells), so a live driver's trial is never touched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import optuna

from autotune.search.reporting import Reporter, RunSummary
from autotune.search.tuner import Tuner

if TYPE_CHECKING:
    from autotune.cluster.pools import PoolFactory
    from autotune.store import Store, StudyRecord


def run_protocol(
    store: Store,
    name: str,
    factory: PoolFactory,
    *,
    ttl_s: float,
    max_configs: int | None = None,
    reporter: Reporter | None = None,
    wait: bool = False,
    on_wait: Callable[[str], None] | None = None,
) -> RunSummary:
    """Under the study's lease: fail a dead driver's trials, run the tuner, save the choice."""
    store.ensure_optuna_schema()  # Optuna's tables, created under the schema lock
    with store.lease(name, ttl_s=ttl_s, wait=wait, on_wait=on_wait):
        record = store.get_study(name)
        store.abandon_running_trials(record)
        fail_dead_optuna_trials(store, record.optuna_study_name)
        tuner = Tuner(store, record, factory, reporter=reporter)
        summary = tuner.run(max_configs=max_configs)
        store.check_lease()
        save_recommendations(store, record)
    return summary


def delete_optuna_study(store: Store, optuna_name: str) -> None:
    """Delete a study's Optuna twin (nothing when it never ran)."""
    with contextlib.suppress(KeyError):  # never run: Optuna has no such study
        optuna.delete_study(study_name=optuna_name, storage=store.optuna_storage())


def fail_dead_optuna_trials(store: Store, optuna_name: str) -> int:
    """Optuna trials a dead driver left RUNNING become FAIL (their engines are gone). Called
    only while holding the study's lease, so no live driver owns them."""
    try:
        ostudy = optuna.load_study(study_name=optuna_name, storage=store.optuna_storage())
    except KeyError:  # never run yet
        return 0
    running = ostudy.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    for t in running:
        ostudy.tell(t.number, state=optuna.trial.TrialState.FAIL)
    return len(running)


def save_recommendations(store: Store, record: StudyRecord) -> int:
    """Store the current choice for every measured (workload, concurrency) of a study,
    replacing what an earlier run of the study stored."""
    from autotune.evidence.cells import cells
    from autotune.recommend.choose import choose
    from autotune.store import NewRecommendation

    rows = store.measurements(study=record.name)
    items: list[NewRecommendation] = []
    for workload, concurrency in cells(rows):
        choice = choose(rows, workload, concurrency)
        if choice is None:
            continue
        items.append(
            NewRecommendation(
                workload=workload,
                workload_digest=choice.workload_digest,
                concurrency=concurrency,
                trial_id=choice.best.trial_ids[0],
                speculative_config=choice.best.speculative_config,
                output_throughput_tok_s=choice.best.median_tok_s,
                baseline_tok_s=choice.baseline.median_tok_s if choice.baseline else None,
                speedup=choice.speedup,
            )
        )
    return store.replace_recommendations(record, items)
