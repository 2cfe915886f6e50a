"""Optuna's ``RDBStorage`` on the store, its calls run again while the store is transiently lost,
and each of its writes stored once when a retried one had landed.

A write whose ``COMMIT`` reached the server but whose acknowledgement was lost (the connection
cut on the way back) fails in the client as a lost connection; run again, it must not write a
second time (``tests/contract/test_optuna_mirror_retry.py``, behind
:class:`autotune.testing.postgres.LostCommitAck`). Every write the study's Optuna mirror makes,
and what a retry of it does once the first attempt landed:

- ``_create_new_trial`` (``ask``, ``enqueue_trial``, ``add_trial``; Optuna's own
  ``create_new_trial`` goes through it): **not idempotent**. It inserts a trial row, and Optuna
  itself retries it up to five times on any storage error, so a lost acknowledgement left the
  trial twice (the first copy ``RUNNING`` forever, the grid and TPE samplers seeing a trial
  that never ran). Here each call writes a token in a system attribute of its trial
  (:data:`CREATE_TOKEN`, in the same transaction as the trial), and a later attempt of the
  same call, after taking Optuna's lock on the study row (which waits for a first attempt the
  server is still committing), returns the trial that carries its token instead of inserting.
- ``set_trial_state_values``: **not idempotent**. A ``tell`` retried after it landed found its
  trial finished and raised ``UpdateFinishedTrialError``, ending the driver; the pop of a
  waiting trial (``ask`` serving an enqueued config) retried after it landed found the trial
  ``RUNNING`` and answered False, so Optuna left it ``RUNNING`` and made a new one. On a retry
  the trial already in the state (and with the values) asked for is the first attempt's work:
  the call answers True. No other driver can have done it: only the study's lease holder
  writes its mirror, every write fenced by the lease row it locks (``autotune.store.leases``).
- ``create_new_study`` (a retry raised ``DuplicatedStudyError`` for the study it made: on a
  retry the study of that name is returned) and ``delete_study`` (a retry raised ``KeyError``:
  on a retry the study being gone is the deletion done).
- Idempotent by nature, retried as they are: ``_set_trial_param`` (a second insert of the same
  parameter hits its unique key, which Optuna ignores), ``set_trial_user_attr`` and
  ``set_trial_system_attr`` (upserts of the same value), ``set_study_user_attr`` and
  ``set_study_system_attr`` (the same value written again), ``set_trial_intermediate_value``
  and ``record_heartbeat`` (likewise; the mirror uses neither), and every read.
"""

from __future__ import annotations

import copy
import functools
import json
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from autotune.store.connection import _is_transient, _with_retry, retried_call
from autotune.store.urls import masked_url

CREATE_TOKEN = "autotune:create_token"
"""The system attribute of an Optuna trial that holds the token of the call that created it
(written with the trial, so a retry finds the trial its first attempt stored)."""

OPTUNA_CALLS = (
    "create_new_study",
    "delete_study",
    "set_study_user_attr",
    "set_study_system_attr",
    "get_study_id_from_name",
    "get_study_name_from_id",
    "get_study_directions",
    "get_study_user_attrs",
    "get_study_system_attrs",
    "get_all_studies",
    "create_new_trial",
    "_create_new_trial",
    "set_trial_param",
    "_set_trial_param",
    "get_trial_id_from_study_id_trial_number",
    "get_trial_number_from_id",
    "get_trial_param",
    "set_trial_state_values",
    "set_trial_intermediate_value",
    "set_trial_user_attr",
    "set_trial_system_attr",
    "get_trial",
    "get_all_trials",
    "_get_trials",
    "get_n_trials",
    "get_best_trial",
    "_get_best_trial_id",
    "record_heartbeat",
)
"""The RDBStorage calls run again while the store is transiently lost (as the store's own are:
:func:`autotune.store.connection._retried`). The private ones are those Optuna's
``_CachedStorage`` (which every ``optuna.Study`` puts in front of an ``RDBStorage``) calls
instead of the public ones; ``tests/unit/test_store_optuna_schema.py`` checks each is there."""

_CREATION = ("_create_new_trial", "_get_prepared_new_trial")
"""Optuna's private steps of a trial's creation that the token goes through (without them, a
trial creation is retried as it is)."""

_TRIED: set[str] = set()
"""Tokens of trial creations whose transaction has run once (a later run is a retry)."""
_TRIED_LOCK = threading.Lock()


@functools.cache
def _retrying_rdb(optuna: Any) -> Any:
    """Optuna's RDBStorage whose calls are retried while the store is transiently lost (Optuna
    turns the database's error into StorageInternalError, the cause kept), and whose writes
    are stored once when a retried one had landed (the module's docstring says how)."""
    base = optuna.storages.RDBStorage
    state_enum = optuna.trial.TrialState

    def transient(exc: Exception) -> bool:
        return isinstance(exc, optuna.exceptions.StorageInternalError) and _is_transient(
            exc.__cause__
        )

    def retry(self: Any, call: Callable[[], Any]) -> Any:
        return _with_retry(call, masked_url(self.url), transient)

    def retrying(name: str) -> Callable[..., Any]:
        call = getattr(base, name)

        @functools.wraps(call)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            return retry(self, lambda: call(self, *args, **kwargs))

        return wrapper

    def _create_new_trial(self: Any, study_id: int, template_trial: Any = None) -> Any:
        token = uuid.uuid4().hex
        marked = _marked_template(optuna, template_trial, token)
        try:
            return retry(self, lambda: base._create_new_trial(self, study_id, marked))
        finally:
            with _TRIED_LOCK:
                _TRIED.discard(token)

    def _get_prepared_new_trial(self: Any, study_id: int, template_trial: Any, session: Any) -> Any:
        """Inside the transaction, after Optuna's lock on the study row: on a second run of a
        call, the trial its first run stored, if it did; else a new one, as Optuna makes it."""
        token = None if template_trial is None else template_trial.system_attrs.get(CREATE_TOKEN)
        if token is not None:
            with _TRIED_LOCK:
                again = token in _TRIED
                _TRIED.add(token)
            if again:
                landed = _trial_with_token(session, study_id, token)
                if landed is not None:
                    return landed
        return base._get_prepared_new_trial(self, study_id, template_trial, session)

    def set_trial_state_values(
        self: Any, trial_id: int, state: Any, values: Sequence[float] | None = None
    ) -> bool:
        def attempt() -> bool:
            try:
                done = bool(base.set_trial_state_values(self, trial_id, state, values))
            except optuna.exceptions.UpdateFinishedTrialError:
                if retried_call() and _holds(base.get_trial(self, trial_id), state, values):
                    return True  # the first attempt's tell landed
                raise
            if done or not retried_call() or state != state_enum.RUNNING:
                return done
            # A retried pop of a waiting trial: RUNNING now is the first attempt's pop.
            return bool(base.get_trial(self, trial_id).state == state_enum.RUNNING)

        return bool(retry(self, attempt))

    def create_new_study(
        self: Any, directions: Sequence[Any], study_name: str | None = None
    ) -> int:
        def attempt() -> int:
            try:
                return int(base.create_new_study(self, directions, study_name))
            except optuna.exceptions.DuplicatedStudyError:
                if retried_call() and study_name is not None:  # the first attempt made it
                    return int(base.get_study_id_from_name(self, study_name))
                raise

        return int(retry(self, attempt))

    def delete_study(self: Any, study_id: int) -> None:
        def attempt() -> None:
            try:
                base.delete_study(self, study_id)
            except KeyError:
                if not retried_call():  # else: the first attempt deleted it
                    raise

        retry(self, attempt)

    own = {
        "_create_new_trial": _create_new_trial,
        "_get_prepared_new_trial": _get_prepared_new_trial,
        "set_trial_state_values": set_trial_state_values,
        "create_new_study": create_new_study,
        "delete_study": delete_study,
    }
    if not all(callable(getattr(base, n, None)) for n in _CREATION):  # Optuna moved them
        del own["_create_new_trial"], own["_get_prepared_new_trial"]  # plain retries, then
    names = {
        name: retrying(name)
        for name in OPTUNA_CALLS
        if name not in own and callable(getattr(base, name, None))
    }
    cls = type("RetryingRDBStorage", (base,), {"__module__": __name__, **names, **own})
    globals()["RetryingRDBStorage"] = cls  # found by name, should anything pickle a storage
    return cls


def _marked_template(optuna: Any, template_trial: Any, token: str) -> Any:
    """``template_trial`` (a copy; for none, the running trial Optuna would make) with the
    call's token among its system attributes."""
    if template_trial is None:
        marked = optuna.trial.FrozenTrial(
            number=-1,
            state=optuna.trial.TrialState.RUNNING,
            value=None,
            values=None,
            datetime_start=datetime.now(),
            datetime_complete=None,
            params={},
            distributions={},
            user_attrs={},
            system_attrs={},
            intermediate_values={},
            trial_id=-1,
        )
    else:
        marked = copy.deepcopy(template_trial)
    marked.system_attrs = {**marked.system_attrs, CREATE_TOKEN: token}
    return marked


def _trial_with_token(session: Any, study_id: int, token: str) -> Any:
    """The study's trial row whose :data:`CREATE_TOKEN` is ``token``, or None."""
    from optuna.storages._rdb import models

    attr = models.TrialSystemAttributeModel
    return (
        session.query(models.TrialModel)
        .join(attr, attr.trial_id == models.TrialModel.trial_id)
        .filter(
            models.TrialModel.study_id == study_id,
            attr.key == CREATE_TOKEN,
            attr.value_json == json.dumps(token),
        )
        .one_or_none()
    )


def _holds(trial: Any, state: Any, values: Sequence[float] | None) -> bool:
    """Whether ``trial`` is in ``state`` with ``values`` (what a landed write left)."""
    if trial.state != state:
        return False
    stored = trial.values
    return (stored is None and values is None) or (
        stored is not None and values is not None and list(stored) == [float(v) for v in values]
    )
