"""The search space of a study: option (categorical) × N (integer, per-option bounds).

Each point is one engine config. An option is a method with its draft and one combination of its
knobs (a *variant*: a method whose ``params`` list several values of a knob has one option per
combination, named e.g. ``ngram[prompt_lookup_min=2]``; :mod:`autotune.spec.options` lists the
options and counts them for coverage). Optuna sees the space define-by-run: ``option`` picks a
method, draft and variant, then ``<option>.num_speculative_tokens`` picks N within that option's
range.

N stays one Optuna parameter per option on purpose (issue #24 asked for one ``N``): the
options' N ranges differ (ngram 1..5, EAGLE-3 1..7, a DSpark draft its trained block), and TPE
and GP model each parameter name as one distribution, so one shared ``N`` would learn "N=3 is
good" across methods whose N mean different things and would change which configs the
seeded samplers propose; and every stored study's trials carry the per-option names, so
``study resume`` of a stored study would meet parameters its sampler history does not have.
The Optuna copy's user attributes are numbers and JSON already (``config``,
``speculative_config`` as a JSON object, ``tok_s WORKLOAD c=C`` as floats: samplers.record).
"""

from __future__ import annotations

from typing import Any

from autotune.engine._base import EngineConfig
from autotune.spec.loader import ResolvedStudy
from autotune.spec.methods import BASELINE
from autotune.spec.options import Option as Option
from autotune.spec.options import config_count, study_options

OPTION = "option"


class SearchSpace:
    """All engine configs a study may start."""

    def __init__(self, study: ResolvedStudy):
        self.study = study
        self.options = study_options(study)
        self._by_name = {o.name: o for o in self.options}

    def option(self, name: str) -> Option:
        return self._by_name[name]

    def config(self, option: Option, n: int) -> EngineConfig:
        s = self.study
        return EngineConfig(
            model=s.model,
            method=option.method,
            num_speculative_tokens=n,
            draft=option.draft,
            method_params=dict(option.params),
            tensor_parallel_size=s.tensor_parallel_size,
            engine_args=dict(s.engine_args),
            env=dict(s.env),
        )

    def configs(self) -> list[EngineConfig]:
        return [self.config(o, n) for o in self.options for n in o.n_values]

    def baseline(self) -> EngineConfig | None:
        opt = self._by_name.get(BASELINE)
        return self.config(opt, 0) if opt else None

    def params(self, option: Option, n: int) -> dict[str, Any]:
        """Optuna params that select (option, n), for ``enqueue_trial``."""
        params: dict[str, Any] = {OPTION: option.name}
        if option.method != BASELINE:
            params[option.n_param] = n
        return params

    def params_for(self, config: EngineConfig) -> dict[str, Any]:
        """Optuna params of a config of this space (for ``enqueue_trial``)."""
        for option in self.options:
            if (option.method, option.draft, dict(option.params)) == (
                config.method,
                config.draft,
                dict(config.method_params),
            ) and config.num_speculative_tokens in option.n_values:
                params = self.params(option, config.num_speculative_tokens)
                lo, hi = option.n_values[0], option.n_values[-1]
                if lo == hi:
                    params.pop(option.n_param, None)
                return params
        raise KeyError(f"{config.label()} is not in the search space")

    def distributions(self, params: dict[str, Any]) -> dict[str, Any]:
        """Optuna distributions of ``params`` (as :meth:`suggest` defines them), for
        ``optuna.trial.create_trial``."""
        from optuna.distributions import CategoricalDistribution, IntDistribution

        out: dict[str, Any] = {OPTION: CategoricalDistribution([o.name for o in self.options])}
        option = self._by_name[params[OPTION]]
        if option.n_param in params:
            out[option.n_param] = IntDistribution(option.n_values[0], option.n_values[-1])
        return out

    def suggest(self, trial: Any) -> EngineConfig:
        """Define-by-run sampling of one engine config on an Optuna trial."""
        name = trial.suggest_categorical(OPTION, [o.name for o in self.options])
        option = self._by_name[name]
        if option.method == BASELINE:
            return self.config(option, 0)
        lo, hi = option.n_values[0], option.n_values[-1]
        n = lo if lo == hi else trial.suggest_int(option.n_param, lo, hi)
        return self.config(option, n)

    def __len__(self) -> int:
        return config_count(self.options)


def validate_study(resolved: ResolvedStudy, source: str) -> None:
    """Refuse a study the engine would refuse, before anything is stored: a replay study whose
    landscape lacks its workloads (:func:`autotune.engine.resolution.check_study`), configs
    vLLM's ``SpeculativeConfig`` would refuse (:func:`autotune.engine.vllm.checks.check_configs`).
    Runs at ``study create`` so that read-only commands never import vLLM."""
    from autotune.engine.resolution import check_study

    check_study(resolved, source)
    if resolved.spec.engine.kind == "replay":
        return  # a replayed landscape never starts an engine: nothing for vLLM to refuse
    from autotune.engine.vllm.checks import check_configs

    check_configs(SearchSpace(resolved).configs(), source)
