"""A deployed config's name where the study's configs are named too (``check``, ``check --measure``).

A study's labels (autotune.spec.labels) show only the knobs its own configs differ in, so a
deployed config that differs from a measured one only in a knob the study never varied gets the
measured one's name: a deployed ``ngram`` N=3 with a one-token lookup window and the study's
``ngram`` N=3 are both ``ngram N=3``. Wherever both appear, the deployed one's name adds the
knobs it differs in from the nearest measured config of the same name, as vLLM's
``--speculative-config`` keys spell them: ``ngram N=3 (prompt_lookup_max=1)``. A name no
measured config shares is left as it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from autotune.spec.labels import PLAIN, Labels

_DEFAULT = object()
"""A key ``config`` leaves at vLLM's default (normalization drops it)."""


def _text(value: Any) -> str:
    if value is _DEFAULT:
        return "default"
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def knob_differences(
    config: Mapping[str, Any] | None, other: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The keys in which ``config`` differs from ``other`` as vLLM runs them (normalized with
    vLLM's defaults), with ``config``'s values (:data:`_DEFAULT` where it is at vLLM's)."""
    from autotune.recommend.normalize import normalize

    mine, theirs = normalize(config) or {}, normalize(other) or {}
    return {
        k: mine.get(k, _DEFAULT)
        for k in sorted(set(mine) | set(theirs))
        if mine.get(k, _DEFAULT) != theirs.get(k, _DEFAULT)
    }


def deployed_label(
    config: Mapping[str, Any] | None,
    measured: Iterable[Mapping[str, Any] | None],
    labels: Labels = PLAIN,
    *,
    prose: bool = True,
) -> str:
    """``config``'s name told apart from the ``measured`` configs named like it: its label under
    ``labels``, plus ``(knob=value, ...)`` where a measured config of that label differs from it
    (the one differing in the fewest knobs)."""
    from autotune.recommend.normalize import key

    name = labels(config, prose=prose)
    if not config:
        return name
    mine = key(config)
    same_name = [m for m in measured if m and labels(m, prose=prose) == name and key(m) != mine]
    if not same_name:
        return name
    nearest = min(
        (knob_differences(config, m) for m in same_name),
        key=lambda d: (len(d), sorted((k, _text(v)) for k, v in d.items())),
    )
    return f"{name} ({', '.join(f'{k}={_text(v)}' for k, v in nearest.items())})"
