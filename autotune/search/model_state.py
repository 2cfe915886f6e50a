"""Where the model strategy (:mod:`autotune.search.model_strategy`) keeps what it decided per
config: the levels a config's engine measures (decided when it is proposed, widened while it
runs) and the evidence its running engine was last judged on. They are stored (the Optuna
study's user attributes through the tuner), not kept in the driver, so a resumed study, a
takeover or another driver continues an engine with the decisions the first driver took.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

"""Mean acceptance length a published curve must still gain per added draft token for the
prior to keep growing N: past that a draft token is accepted less than one step in ten, and
verifying it costs on every step."""


STATE_PREFIX = "autotune:model:"
"""Prefix of the Optuna study user attributes that hold the model strategy's per-config state
(:class:`OptunaState`): ``autotune:model:<config key>``."""


class StrategyState(Protocol):
    """Where the model strategy keeps what it decided per config: config key -> a JSON object
    (``levels``: the [workload, concurrency] its engine measures; ``judged_at``: [finished
    configs, rows] when its running engine was last judged for a cancel)."""

    def load(self) -> dict[str, dict[str, Any]]:
        """Every config's stored entry."""
        ...

    def save(self, key: str, entry: Mapping[str, Any]) -> None:
        """Store one config's entry (replacing the one stored)."""
        ...


class OptunaState:
    """:class:`StrategyState` as user attributes of the study's Optuna study (the study store's
    database; every write there is fenced by the study's lease, as the tuner's are)."""

    def __init__(self, study: Any) -> None:
        self._study = study

    def load(self) -> dict[str, dict[str, Any]]:
        attrs: dict[str, Any] = self._study.user_attrs
        return {
            k[len(STATE_PREFIX) :]: dict(v)
            for k, v in attrs.items()
            if k.startswith(STATE_PREFIX) and isinstance(v, dict)
        }

    def save(self, key: str, entry: Mapping[str, Any]) -> None:
        self._study.set_user_attr(STATE_PREFIX + key, dict(entry))
