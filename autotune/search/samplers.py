"""Search strategies selectable by name in a study file: Optuna's samplers, and ``model``.

``model`` is autotune's model-guided strategy: it enqueues the configs it wants measured (Optuna
records them as ordinary trials); the others are Optuna's own samplers.
"""

from __future__ import annotations

import warnings
from typing import Any

SAMPLERS = ("model", "grid", "random", "tpe", "gp")


def make_sampler(name: str, seed: int) -> Any:
    """An Optuna sampler: ``grid`` is BruteForce (it handles our conditional N per method)."""
    import optuna

    if name == "model":
        # Every trial is enqueued by the strategy; the sampler only fills unused params.
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.BruteForceSampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "tpe":
        # Our space is conditional (N per method): independent sampling of N is expected.
        return optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=4, warn_independent_sampling=False
        )
    if name == "gp":
        return optuna.samplers.GPSampler(
            seed=seed, n_startup_trials=4, warn_independent_sampling=False
        )
    raise ValueError(f"unknown sampler {name!r}; known: {', '.join(SAMPLERS)}")


def make_strategy(name: str, study: Any) -> Any:
    """The strategy object for ``name``, or None when an Optuna sampler decides alone."""
    if name != "model":
        return None
    from autotune.search.model_strategy import ModelStrategy

    return ModelStrategy(study)
