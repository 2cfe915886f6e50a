"""The options of a study's search space, and how many engine configs they make.

An option is a method with its draft and one combination of its knobs (a *variant*: a method
whose ``params`` list several values of a knob has one option per combination, named e.g.
``ngram[prompt_lookup_min=2]``), plus the baseline ``off`` when the study measures it; each
option carries the N values its method is searched at. The enumeration is a pure function of the
resolved study, so the count a study planned (:func:`planned_configs`: what coverage counts
against) is read from the study's stored spec by any layer, and :mod:`autotune.search.space`
builds its engine configs and Optuna parameters on the same options.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.spec.knobs import searched, variant_name, variants
from autotune.spec.loader import ResolvedStudy
from autotune.spec.methods import BASELINE


@dataclass(frozen=True)
class Option:
    """A method with its draft and one fixed value per knob; N is chosen per trial."""

    name: str
    method: str
    draft: str | None
    n_values: tuple[int, ...]
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def n_param(self) -> str:
        return f"{self.name}.num_speculative_tokens"


def study_options(study: ResolvedStudy) -> list[Option]:
    """Every option of ``study``'s space: ``off`` first (when measured), then each method's
    variants in the study's order (a method listed twice is ``name#2``)."""
    options: list[Option] = []
    if study.spec.baseline:
        options.append(Option(BASELINE, BASELINE, None, (0,)))
    seen: dict[str, int] = {}
    for m in study.methods:
        seen[m.method] = seen.get(m.method, 0) + 1
        name = m.method if seen[m.method] == 1 else f"{m.method}#{seen[m.method]}"
        shown = searched(m.params)
        for variant in variants(m.params):
            options.append(
                Option(
                    name=variant_name(name, variant, shown),
                    method=m.method,
                    draft=m.draft,
                    n_values=tuple(m.num_speculative_tokens.values()),
                    params=tuple(sorted(variant.items())),
                )
            )
    return options


def config_count(options: list[Option]) -> int:
    """How many engine configs ``options`` make (one per option and N value)."""
    return sum(len(o.n_values) for o in options)


def planned_configs(study: ResolvedStudy) -> int:
    """The engine configs ``study``'s search space holds (what its coverage counts against)."""
    return config_count(study_options(study))
