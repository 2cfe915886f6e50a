"""Session fixtures shared by `check --measure` and `observe` tests: one tiny real study
(baseline + n-gram N=2 on vLLM's CPU build, concurrency 1 and 2) and one loopback `vllm serve`
running exactly the study's n-gram engine."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from autotune import api
from autotune.store import Store
from tests.integration.test_study_e2e import _study

NGRAM = {
    "method": "ngram",
    "num_speculative_tokens": {"min": 2, "max": 2},
    "params": {"prompt_lookup_min": 2, "prompt_lookup_max": 4},
}


@dataclass(frozen=True)
class DeployStudy:
    store: Store
    db: Path
    ngram: dict[str, Any]
    """The exact --speculative-config the study measured for n-gram N=2."""


@pytest.fixture(scope="session")
def deploy_study(tmp_path_factory: pytest.TempPathFactory) -> DeployStudy:
    tmp = tmp_path_factory.mktemp("deploy")
    db = tmp / "deploy.db"
    store = Store(str(db))
    api.create_study(store, _study(tmp, "deploy", [NGRAM]))
    summary = api.run_study(store, "deploy")
    assert summary.trials_failed == 0, summary.failures
    trial = next(t for t in store.trials(store.get_study("deploy")) if t.method == "ngram")
    assert trial.speculative_config is not None
    return DeployStudy(store, db, dict(trial.speculative_config))


@pytest.fixture(scope="session")
def ngram_server(
    deploy_study: DeployStudy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """`vllm serve` (loopback) of the study's n-gram N=2 engine, as autotune verify starts it."""
    from autotune.engine.serve import Server, engine_kwargs
    from autotune.verify.run import engine_config

    store = deploy_study.store
    record = store.get_study("deploy")
    trial = next(t for t in store.trials(record) if t.method == "ngram")
    kwargs = engine_kwargs(engine_config(record.model, trial))
    with Server(kwargs, log=tmp_path_factory.mktemp("serve") / "ngram-server.log") as server:
        yield server
