"""``autotune.spec.options``: the options a study's search builds, read from its resolved spec
alone, and the count a partial study's coverage is judged against (``planned_configs``)."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.search.space import SearchSpace
from autotune.spec.loader import ResolvedStudy, resolve_study, validate
from autotune.spec.options import planned_configs, study_options
from autotune.spec.study import StudySpec


def _resolved(methods: list[dict[str, Any]], baseline: bool = True) -> ResolvedStudy:
    data = {
        "name": "v",
        "model": {"name": "tiny"},
        "workloads": ["code"],
        "concurrency": [1],
        "baseline": baseline,
        "methods": methods,
    }
    return resolve_study(validate(StudySpec, data, "v.yaml"), "v.yaml", platform="cpu")


NGRAM_VARIANTS = {
    "method": "ngram",
    "num_speculative_tokens": {"min": 1, "max": 3},
    "params": {"prompt_lookup_min": [1, 2], "prompt_lookup_max": 4},
}


@pytest.mark.parametrize(
    ("methods", "baseline", "expected"),
    [
        ([NGRAM_VARIANTS], True, 1 + 2 * 3),
        ([NGRAM_VARIANTS], False, 2 * 3),
        ([{"method": "ngram", "num_speculative_tokens": {"min": 2, "max": 2}}], True, 2),
    ],
)
def test_the_count_is_the_search_space_the_tuner_builds(methods, baseline, expected) -> None:
    resolved = _resolved(methods, baseline)
    space = SearchSpace(resolved)
    assert planned_configs(resolved) == expected == len(space.configs()) == len(space)
    assert study_options(resolved) == space.options
    # Read back from the stored JSON, as recommend and report read it: the same count.
    assert planned_configs(ResolvedStudy.from_json(resolved.to_json())) == expected


def test_variant_names_and_order() -> None:
    names = [o.name for o in study_options(_resolved([NGRAM_VARIANTS]))]
    assert names == ["none", "ngram[prompt_lookup_min=1]", "ngram[prompt_lookup_min=2]"]
