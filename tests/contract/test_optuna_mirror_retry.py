"""A retried write of the Optuna mirror whose commit landed but whose acknowledgement was lost
leaves the mirror as an uninterrupted run's (:mod:`autotune.store.optuna_schema`).

On a real PostgreSQL server behind :class:`autotune.testing.postgres.LostCommitAck`, the
acknowledgement of one of Optuna's writes is lost: the server commits it and the connection is
cut before its ``COMMIT`` is acknowledged. Before the fix, a lost trial creation left the trial
twice in the mirror (Optuna's own retry, then the store's, insert it again: ``ngram N=3`` twice
on a grid run), a lost ``tell`` ended the driver with Optuna's ``UpdateFinishedTrialError``,
and a lost pop of the enqueued baseline left that trial ``RUNNING`` beside a fresh one. Every
write the mirror makes is tried: the study's creation and attributes, trial creation (an
``ask``, an ``enqueue_trial``'s waiting trial, an ``add_trial``'s finished one), the pop of a
waiting trial, a parameter, a user attribute and a ``tell``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import api
from autotune.search.landscape_study import study_from_landscape
from autotune.store import Store
from autotune.testing.landscapes import write_rows
from autotune.testing.postgres import LostCommitAck, PostgresServer
from autotune.testing.resume import CLOSE_EVERYWHERE, Outcome, outcome, run_in_steps

pytestmark = [pytest.mark.contract, pytest.mark.timeout(300)]

Mirror = list[tuple[str, str, str]]
"""The Optuna study's trials as (state, params, config attribute), in trial order."""


def mirror(store: Store, name: str) -> Mirror:
    import optuna

    study = optuna.load_study(study_name=f"autotune:{name}", storage=store.optuna_storage())
    return [
        (t.state.name, repr(sorted(t.params.items())), str(t.user_attrs.get("config")))
        for t in study.get_trials(deepcopy=False)
    ]


@pytest.fixture(scope="module")
def landscape(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_rows(tmp_path_factory.mktemp("mirror") / "close.csv", CLOSE_EVERYWHERE)


_REFERENCE: dict[str, tuple[Outcome, Mirror]] = {}


def reference(server: PostgresServer, landscape: Path, sampler: str) -> tuple[Outcome, Mirror]:
    """The uninterrupted run of the study on ``sampler``: its outcome and its mirror."""
    if sampler not in _REFERENCE:
        data = study_from_landscape(landscape, "mirror", sampler, 0, repeats=2)
        url = server.fresh_url()
        done = run_in_steps(url, data, str(landscape), [])
        store = Store(url)
        try:
            _REFERENCE[sampler] = (done, mirror(store, "mirror"))
        finally:
            store.dispose()
    return _REFERENCE[sampler]


@pytest.mark.parametrize(
    ("sampler", "statement", "after"),
    [
        ("grid", "INSERT INTO studies ", 1),  # create_new_study
        ("grid", "INSERT INTO study_system_attributes", 1),  # set_metric_names
        ("grid", "INSERT INTO study_user_attributes", 1),  # the sampler's state
        ("grid", "INSERT INTO trials ", 1),  # enqueue_trial: the baseline, waiting
        ("grid", "INSERT INTO trials ", 2),  # ask: the sampler's first own trial
        ("grid", "INSERT INTO trials ", 4),  # ask: its last
        ("grid", "UPDATE trials SET state=$1, datetime_start", 1),  # ask pops the baseline
        ("grid", "INSERT INTO trial_params", 2),  # suggest
        ("grid", "INSERT INTO trial_user_attributes", 1),  # the config's attributes
        ("grid", "UPDATE trials SET state=$1, datetime_complete", 1),  # tell
        ("grid", "UPDATE trials SET state=$1, datetime_complete", 3),
        ("model", "INSERT INTO trials ", 2),  # add_trial: a finished trial at once
    ],
)
def test_an_optuna_write_whose_commit_ack_was_lost_is_in_the_mirror_once(
    postgres_server: PostgresServer, landscape: Path, sampler: str, statement: str, after: int
) -> None:
    done, trials = reference(postgres_server, landscape, sampler)
    data = study_from_landscape(landscape, "mirror", sampler, 0, repeats=2)
    url = postgres_server.fresh_url()
    store = Store(url)
    api.create_study(store, data=data, source=str(landscape))
    store.dispose()
    proxy = LostCommitAck(postgres_server.port, statement=statement)
    proxied = Store(proxy.url(url))
    try:
        proxy.arm(after)
        api.run_study(proxied, "mirror")
    finally:
        proxied.dispose()
        proxy.close()
    assert proxy.dropped == 1  # the fault happened: a committed write, its ack lost
    store = Store(url)
    try:
        assert store.get_study("mirror").status == "done"
        assert mirror(store, "mirror") == trials
        assert outcome(store, "mirror") == done
    finally:
        store.dispose()


def test_the_private_optuna_steps_a_trial_creation_token_goes_through_are_there() -> None:
    """Without them a trial creation is retried as it is (a lost acknowledgement stores it
    twice): an Optuna upgrade that moves one fails here, naming it."""
    import optuna

    from autotune.store.optuna_retry import _CREATION, _retrying_rdb

    missing = [n for n in _CREATION if not callable(getattr(optuna.storages.RDBStorage, n, None))]
    assert missing == [], (
        f"Optuna {optuna.__version__}: the private RDBStorage.{missing} that "
        "autotune.store.optuna_retry overrides are gone; adapt its trial creation"
    )
    cls = _retrying_rdb(optuna)
    assert all(getattr(cls, n).__module__ == "autotune.store.optuna_retry" for n in _CREATION)
