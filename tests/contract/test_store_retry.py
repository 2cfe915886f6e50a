"""A retried store write whose commit landed but whose acknowledgement was lost stores its row
once (issue #33 item 3: the store retries transient loss for ``AUTOTUNE_STORE_RETRY_S``).

On a real PostgreSQL server behind :class:`autotune.testing.postgres.LostCommitAck`: the server
commits a measurement's (or a trial start's, or the lease's) transaction and the connection is cut before its
``COMMIT`` is acknowledged, so the driver sees a lost connection and retries a write that is
already stored. The study run through the proxy must end with exactly the measurements and
answers of an uninterrupted run, no cell stored twice and no trial left behind.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from autotune import api
from autotune.search.landscape_study import study_from_landscape
from autotune.store import Store
from autotune.testing.landscapes import write_rows
from autotune.testing.postgres import LostCommitAck, PostgresServer
from autotune.testing.resume import CLOSE_EVERYWHERE, Outcome, outcome, run_in_steps

pytestmark = [pytest.mark.contract, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def study(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], Path, Outcome, int]:
    """The close-call replay study (it takes extra repeats), and its uninterrupted run."""
    land = write_rows(tmp_path_factory.mktemp("ack") / "close.csv", CLOSE_EVERYWHERE)
    data = study_from_landscape(land, "ack", "model", 0, repeats=2)
    url = postgres_server.fresh_url()
    reference = run_in_steps(url, data, str(land), [])
    store = Store(url)
    trials = len(store.trials(store.get_study("ack")))
    store.dispose()
    return data, land, reference, trials


@pytest.mark.parametrize(
    ("table", "after"),
    [("autotune_measurements", 1), ("autotune_measurements", 5), ("autotune_measurements", 12),
     ("autotune_trials", 1), ("autotune_trials", 3), ("autotune_leases", 1)],
)  # fmt: skip
def test_a_write_whose_commit_ack_was_lost_is_stored_once(
    postgres_server: PostgresServer,
    study: tuple[dict[str, Any], Path, Outcome, int],
    table: str,
    after: int,
) -> None:
    """The ``after``-th measurement's acknowledgement is lost (the first, one mid-trial, one
    in a later trial), a trial start's (retried after its trial landed, it left that trial
    ``running`` beside the one it then stored, with no cells, after the study was done), or
    the lease's (its driver was refused as busy: the live holder it named was itself)."""
    data, land, reference, trials = study
    url = postgres_server.fresh_url()
    store = Store(url)
    api.create_study(store, data=data, source=str(land))
    store.dispose()
    proxy = LostCommitAck(postgres_server.port, table)
    proxied = Store(proxy.url(url))
    try:
        proxy.arm(after)
        api.run_study(proxied, "ack")
    finally:
        proxied.dispose()
        proxy.close()
    assert proxy.dropped == 1  # the fault happened: a committed measurement, its ack lost
    store = Store(url)
    try:
        record = store.get_study("ack")
        assert record.status == "done"
        stored = store.trials(record)
        assert len(stored) == trials and {t.state for t in stored} <= {"complete", "cancelled"}
        rows = [m for t in stored for m in store.trial_measurements(t.id)]
        cells = Counter((m.trial_id, m.workload, m.concurrency, m.repeat) for m in rows)
        assert [k for k, n in cells.items() if n > 1] == []
        assert outcome(store, "ack") == reference
    finally:
        store.dispose()


@pytest.mark.parametrize("replace", [False, True])
def test_a_study_whose_creation_ack_was_lost_is_created_once(
    postgres_server: PostgresServer,
    study: tuple[dict[str, Any], Path, Outcome, int],
    replace: bool,
) -> None:
    """Retried after its row landed, ``study create`` said ``study 'ack' already exists``
    (exit 2) for the study it had just made; with ``--replace`` it replaced that one."""
    data, land, reference, _ = study
    url = postgres_server.fresh_url()
    if replace:  # a study of that name is there, to be replaced
        store = Store(url)
        api.create_study(store, data=data, source=str(land))
        store.dispose()
    proxy = LostCommitAck(postgres_server.port, "autotune_studies")
    proxied = Store(proxy.url(url))
    try:
        proxy.arm(1)
        made = api.create_study(proxied, data=data, source=str(land), replace=replace)
    finally:
        proxied.dispose()
        proxy.close()
    assert proxy.dropped == 1
    store = Store(url)
    try:
        assert [(s.name, s.id, s.status) for s in store.list_studies()] == [
            ("ack", made.study.id, "created")
        ]
        api.run_study(store, "ack")
        assert outcome(store, "ack") == reference
    finally:
        store.dispose()


def test_a_verification_whose_ack_was_lost_is_stored_once(
    postgres_server: PostgresServer, study: tuple[dict[str, Any], Path, Outcome, int]
) -> None:
    """Retried after its row landed, ``verify`` stored its result twice. Two equal results
    saved one after the other are both kept: only a retry looks for its own row."""
    data, land, _, _ = study
    url = postgres_server.fresh_url()
    store = Store(url)
    api.create_study(store, data=data, source=str(land))
    record = store.get_study("ack")
    proxy = LostCommitAck(postgres_server.port, "autotune_verifications")
    proxied = Store(proxy.url(url))
    saved = {
        "workload": data["workloads"][0],
        "mode": "serve",
        "passed": True,
        "tolerance": 0.1,
        "result": {"levels": [{"concurrency": 1, "ratio": 1.02}]},
        "vllm_version": "0.11.0",
    }
    try:
        proxy.arm(1)
        proxied.save_verification(record, **saved)
        assert proxy.dropped == 1
        proxied.save_verification(record, **saved)  # a second verify, its result the same
    finally:
        proxied.dispose()
        proxy.close()
    try:
        assert [r for _, r in store.verifications(record)] == [saved["result"]] * 2
    finally:
        store.dispose()
