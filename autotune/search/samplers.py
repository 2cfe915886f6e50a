"""Optuna's side of the search: the samplers selectable by name, ``OptunaStrategy`` that lets one
of them choose configs, and ``OptunaMirror``, the Optuna study every run keeps in the store.

Whatever strategy runs, each finished engine config becomes one Optuna trial (named objective,
the speculative config and per-level medians as user attributes, failures with their reason),
so ``optuna-dashboard`` shows the study and Optuna's samplers learn from every trial.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from autotune.cluster.jobs import Cell
from autotune.engine._base import EngineConfig, Measurement
from autotune.evidence.objectives import level_medians
from autotune.search.objective import METRIC
from autotune.search.space import SearchSpace
from autotune.search.strategy import (
    SearchState,
    Strategy,
    protocol_cell,
    repeat_limits,
    undecided_cell,
)
from autotune.spec.labels import Labels

SAMPLERS = ("model", "grid", "random", "tpe", "gp")


def make_sampler(name: str, seed: int) -> Any:
    """An Optuna sampler by study-file name (``model`` has none: it gets a RandomSampler that
    never samples, since the mirror only records its trials)."""
    import optuna

    if name in ("model", "random"):
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return _grid_sampler(seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)
    if name == "gp":
        # Our space is conditional (N per method): independent sampling of N is expected.
        return optuna.samplers.GPSampler(
            seed=seed, n_startup_trials=4, warn_independent_sampling=False
        )
    raise ValueError(f"unknown sampler {name!r}; known: {', '.join(SAMPLERS)}")


def make_strategy(name: str, study: Any, mirror: OptunaMirror) -> Strategy:
    """The strategy for a study's ``sampler``: autotune's model-guided one, or Optuna's."""
    if name == "model":
        from autotune.search.model_strategy import ModelStrategy

        return ModelStrategy(study)
    return OptunaStrategy(mirror)


def _grid_sampler(seed: int) -> Any:
    import optuna

    class GridSampler(optuna.samplers.BruteForceSampler):
        """BruteForce (it handles the conditional N per method) without its ``study.stop()``,
        which Optuna allows only inside ``optimize()``: the tuner sees an exhausted space
        itself."""

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            return None

    return GridSampler(seed=seed)


SAMPLER_STATE = "autotune:sampler_random_state"
"""The Optuna study's user attribute holding its sampler's random state after the last ask: a
resumed study, a takeover or another driver restores it, so a sampler continues the one stream
an uninterrupted driver would have drawn (a sampler made afresh from its seed would start it
over and propose other configs)."""


def _random_states(sampler: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(attribute path, numpy RandomState) of every random state a sampler holds, its nested
    samplers' too (TPE's and GP's independent RandomSampler)."""
    import numpy as np
    from optuna.samplers import BaseSampler
    from optuna.samplers._lazy_random_state import LazyRandomState

    out: list[tuple[str, Any]] = []
    for name, value in sorted(vars(sampler).items()):
        if isinstance(value, LazyRandomState):
            out.append((prefix + name, value.rng))
        elif isinstance(value, np.random.RandomState):
            out.append((prefix + name, value))
        elif isinstance(value, BaseSampler):
            out += _random_states(value, f"{prefix}{name}.")
    return out


def random_state(sampler: Any) -> dict[str, list[Any]]:
    """The sampler's random states as JSON (Mersenne Twister keys, position, Gaussian cache)."""
    out: dict[str, list[Any]] = {}
    for path, rng in _random_states(sampler):
        kind, keys, pos, has_gauss, gauss = rng.get_state()
        out[path] = [kind, [int(k) for k in keys], int(pos), int(has_gauss), float(gauss)]
    return out


def restore_random_state(sampler: Any, state: dict[str, list[Any]]) -> None:
    """Set the sampler's random states to ``state`` (:func:`random_state`); paths it does not
    hold are left alone."""
    import numpy as np

    for path, rng in _random_states(sampler):
        saved = state.get(path)
        if saved is not None:
            kind, keys, pos, has_gauss, gauss = saved
            rng.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))


class OptunaMirror:
    """The study's Optuna study (``autotune:NAME`` in the same database)."""

    def __init__(
        self,
        storage: Any,
        study_name: str,
        space: SearchSpace,
        sampler: Any,
        metric: str = METRIC,
    ) -> None:
        """``storage``: Optuna's storage on the study store (``Store.optuna_storage()``). A
        dead driver's RUNNING trials were failed by ``autotune.search.protocol`` under the
        study's lease. The sampler's random state is stored with the study after every ask
        and restored here (:data:`SAMPLER_STATE`)."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self.space = space
        self.labels = Labels(c.speculative_config() for c in space.configs())
        self.study = optuna.create_study(
            study_name=study_name,
            storage=storage,
            sampler=sampler,
            direction="maximize",
            load_if_exists=True,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self.study.set_metric_names([metric])
        stored = self.study.user_attrs.get(SAMPLER_STATE)
        if stored is not None:
            restore_random_state(sampler, stored)
        self._asked: dict[str, Any] = {}
        """Config key -> the running Optuna trial a sampler proposed it in."""

    def ask(self) -> tuple[EngineConfig, Any]:
        """A config the sampler proposes (an enqueued one first) and its running trial: the
        caller either ``hold``s it until the config is recorded or ``answer_again``s it."""
        trial = self.study.ask()
        config = self.space.suggest(trial)
        self.study.set_user_attr(SAMPLER_STATE, random_state(self.study.sampler))
        return config, trial

    def hold(self, config: EngineConfig, trial: Any) -> None:
        self._asked[config.key()] = trial

    def number(self, config: EngineConfig) -> int | None:
        """The Optuna trial number a sampler proposed ``config`` in (None: recorded at the
        end as a trial of its own)."""
        trial = self._asked.get(config.key())
        return None if trial is None else int(trial.number)

    def enqueue(self, config: EngineConfig) -> None:
        """Serve ``config`` at the next ask, unless a proposal already waits."""
        waiting = self.study.get_trials(
            deepcopy=False, states=(self._optuna.trial.TrialState.WAITING,)
        )
        if not waiting:
            self.study.enqueue_trial(self.space.params_for(config))

    def answer_again(self, config: EngineConfig, trial: Any, value: float | None) -> None:
        """The sampler proposed a config that is measured (or running): tell it the stored
        value (a failure when there is none yet) without measuring again."""
        trial.set_user_attr("repeat_of_config", config.label(self.labels))
        self._tell(trial, value)

    def record(
        self,
        config: EngineConfig,
        value: float | None,
        measurements: Sequence[Measurement],
        reason: str | None = None,
    ) -> None:
        """One finished engine config as a trial: the proposing sampler's, or a new one."""
        attrs: dict[str, Any] = {
            "config": config.label(self.labels),
            "speculative_config": config.speculative_config(),
            **{f"tok_s {w} c={c}": v for (w, c), v in level_medians(measurements).items()},
        }
        if reason:
            attrs["failure_reason"] = reason
        trial = self._asked.pop(config.key(), None)
        if trial is None:
            optuna = self._optuna
            params = self.space.params_for(config)
            state = optuna.trial.TrialState
            self.study.add_trial(
                optuna.trial.create_trial(
                    params=params,
                    distributions=self.space.distributions(params),
                    value=value,
                    state=state.COMPLETE if value is not None else state.FAIL,
                    user_attrs=attrs,
                )
            )
            return
        for k, v in attrs.items():
            trial.set_user_attr(k, v)
        self._tell(trial, value)

    def recorded(self) -> list[dict[str, Any]]:
        """The params of every config :meth:`record` recorded (a finished trial with its
        ``config`` attribute; repeats answered from the store and dead drivers' trials have
        none)."""
        state = self._optuna.trial.TrialState
        trials = self.study.get_trials(deepcopy=False, states=(state.COMPLETE, state.FAIL))
        return [
            dict(t.params)
            for t in trials
            if "config" in t.user_attrs and "repeat_of_config" not in t.user_attrs
        ]

    def _tell(self, trial: Any, value: float | None) -> None:
        if value is None:
            self.study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(trial, value)


class OptunaStrategy:
    """An Optuna sampler chooses each config; every config is measured at every cell."""

    def __init__(self, mirror: OptunaMirror, max_repeats_per_config: int = 20) -> None:
        self.mirror = mirror
        self.reason = ""
        self.repeated_proposals = 0
        """Proposals of a taken config (answered from the store); reported as skipped."""
        self._run_of_repeats = 0
        self._max_run = max_repeats_per_config * len(mirror.space)

    def propose(self, state: SearchState, slots: int) -> list[EngineConfig]:
        taken = state.taken()
        every = {c.key() for c in state.space.configs()}
        baseline = state.space.baseline()
        if baseline is not None and baseline.key() not in taken:
            self.mirror.enqueue(baseline)
        out: list[EngineConfig] = []
        while len(out) < slots:
            if every <= taken:
                self.reason = "every engine config in the space was measured"
                break
            if self._run_of_repeats > self._max_run:
                self.reason = "the sampler keeps proposing measured configs"
                break
            config, trial = self.mirror.ask()
            if config.key() in taken:
                self.mirror.answer_again(config, trial, state.done.get(config.key()))
                self.repeated_proposals += 1
                self._run_of_repeats += 1
                continue
            self._run_of_repeats = 0
            self.mirror.hold(config, trial)
            taken.add(config.key())
            out.append(config)
        return out

    def next_cell(
        self, state: SearchState, config: EngineConfig, measured: Sequence[Measurement]
    ) -> Cell | None:
        limits = repeat_limits(state.study, config, state.rows)
        return protocol_cell(state.study, measured, limits) or undecided_cell(
            state.study, config, state.rows, measured, limits
        )

    def observe(self, config: EngineConfig, value: float | None) -> None:
        """Nothing to do: the sampler reads every trial from the mirror."""

    def cancel_reason(self, config: EngineConfig) -> str | None:
        """Never: every config is measured at every cell."""
        return None

    def planned(self, state: SearchState) -> int:
        return len(state.space)
