"""Everything Optuna: the search space, the samplers and the ask/tell tuner loop."""

from autotune.search.model_strategy import ModelStrategy
from autotune.search.samplers import SAMPLERS, make_sampler
from autotune.search.space import Option, SearchSpace
from autotune.search.tuner import Reporter, RunSummary, SilentReporter, Tuner, objective_value

__all__ = [
    "SAMPLERS",
    "ModelStrategy",
    "Option",
    "Reporter",
    "RunSummary",
    "SearchSpace",
    "SilentReporter",
    "Tuner",
    "make_sampler",
    "objective_value",
]
