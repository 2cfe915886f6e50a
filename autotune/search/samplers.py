"""Optuna samplers selectable by name in a study file."""

from __future__ import annotations

from typing import Any

SAMPLERS = ("grid", "random", "tpe", "gp")


def make_sampler(name: str, seed: int) -> Any:
    """An Optuna sampler: ``grid`` is BruteForce (it handles our conditional N per method)."""
    import optuna

    if name == "grid":
        return optuna.samplers.BruteForceSampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=4)
    raise ValueError(f"unknown sampler {name!r}; known: {', '.join(SAMPLERS)}")
