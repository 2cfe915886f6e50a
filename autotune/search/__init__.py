"""Everything Optuna and search: the space, the Strategy interface and its two kinds
(Optuna's samplers, the model-guided search), and the tuner loop."""

from autotune.search.model_strategy import ModelStrategy
from autotune.search.reporting import Reporter, RunSummary, SilentReporter
from autotune.search.samplers import SAMPLERS, OptunaMirror, OptunaStrategy, make_sampler
from autotune.search.space import Option, SearchSpace
from autotune.search.strategy import SearchState, Strategy
from autotune.search.tuner import Tuner

__all__ = [
    "SAMPLERS",
    "ModelStrategy",
    "Option",
    "OptunaMirror",
    "OptunaStrategy",
    "Reporter",
    "RunSummary",
    "SearchSpace",
    "SearchState",
    "SilentReporter",
    "Strategy",
    "Tuner",
    "make_sampler",
]
