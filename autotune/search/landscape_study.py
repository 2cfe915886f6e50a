"""The study that replays a recorded landscape (docs/landscapes.md): its model, workloads,
concurrency levels, methods, N ranges and knob values, on the ``replay`` engine.

``autotune study create --landscape`` (:func:`autotune.api.create_replay_study`) and the search
benchmark (:mod:`autotune.bench.search`) both build their studies here.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from autotune.engine.readers.landscape import read_landscape
from autotune.errors import SpecError
from autotune.spec.knobs import params_key


def study_from_landscape(
    path: Path | str,
    name: str,
    sampler: str = "model",
    seed: int = 0,
    repeats: int | None = None,
) -> dict[str, Any]:
    """A study (as ``autotune.api.create_study(data=...)`` takes it) that replays a landscape.

    Model, workloads, concurrency levels and methods (with their drafts and N ranges) are the
    landscape's own; ``repeats`` defaults to the number of repeats it recorded. N ranges are
    min..max of what was recorded, so a landscape with gaps in N fails those configs (at no
    cost) like an engine that cannot start. ROCm's MLA cap on N is lifted: the landscape's
    points were recorded, so they ran. A model that is not an HF id or a path (``tiny:llama``)
    is named by its catalog alias.
    """
    path = Path(path).resolve()
    points = read_landscape(path)
    workloads = list(dict.fromkeys(p.workload for p in points))
    concurrency = sorted({p.concurrency for p in points})
    methods = method_entries(
        ((p.method, p.draft, p.num_speculative_tokens, p.params) for p in points), str(path)
    )
    recorded = len({p.repeat for p in points})
    return {
        "name": name,
        "description": f"replay of {path.name}",
        "model": {"name": _model_name(points[0].model), "allow_rocm_mla_override": True},
        "workloads": workloads,
        "concurrency": concurrency,
        "methods": methods,
        "baseline": any(p.method == "none" for p in points),
        "repeats": repeats or recorded,
        "sampler": sampler,
        "seed": seed,
        "engine": {"kind": "replay", "landscape": str(path)},
    }


def _knob_settings(
    recorded: set[tuple[tuple[str, Any], ...]], method: str = "?", source: str = "landscape"
) -> list[dict[str, Any]]:
    """The ``params`` of the method entry that covers a method's recorded knob combinations:
    each knob with the values it was recorded at. When the combinations are not a full grid of
    those values, the grid's missing combinations fail at no cost on replay, like gaps in N.
    Combinations that do not all set the same knobs cannot be one entry: a SpecError says which
    (a study lists a method once per draft)."""
    combos = sorted(recorded, key=_params_key_of)
    names = sorted({k for c in combos for k, _ in c})
    if len(combos) == 1:
        return [dict(combos[0])]
    if not all(len(c) == len(names) for c in combos):
        sets = sorted({", ".join(k for k, _ in c) or "(none)" for c in combos})
        raise SpecError(
            f"method {method}: the rows set different knobs ({'; '.join(sets)}); a replay "
            "study needs every row of a method to set the same knobs (their values may vary)",
            source=source,
            field="params",
        )
    values = {n: sorted({dict(c)[n] for c in combos}, key=_order) for n in names}
    return [{n: v if len(v) > 1 else v[0] for n, v in values.items()}]


def _params_key_of(combo: tuple[tuple[str, Any], ...]) -> str:
    return params_key(dict(combo))


def _order(value: Any) -> tuple[str, Any]:
    # One knob's values share a type; numbers sort as numbers.
    return (type(value).__name__, value)


def _model_name(model: str) -> str:
    if "/" in model or os.sep in model:
        return model
    from autotune.spec.catalog import load_catalog

    found = load_catalog().find_by_model(model)
    return found[0] if found else model


def method_entries(
    configs: Iterable[tuple[str, str | None, int, tuple[tuple[str, Any], ...]]], source: str
) -> list[dict[str, Any]]:
    """The study's ``methods`` for recorded configs ``(method, draft, N, knobs)``: per (method,
    draft), N from the smallest to the largest recorded, one entry per knob setting; the
    baseline (``none``) is left out."""
    ns: dict[tuple[str, str | None], set[int]] = defaultdict(set)
    knobs: dict[tuple[str, str | None], set[tuple[tuple[str, Any], ...]]] = defaultdict(set)
    for method, draft, n, params in configs:
        if method != "none":
            ns[(method, draft)].add(n)
            knobs[(method, draft)].add(params)
    methods = []
    for (method, draft), values in sorted(ns.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        for setting in _knob_settings(knobs[(method, draft)], method, source):
            entry: dict[str, Any] = {
                "method": method,
                "num_speculative_tokens": {"min": min(values), "max": max(values)},
            }
            if draft is not None:
                entry["draft"] = draft
            if setting:
                entry["params"] = setting
            methods.append(entry)
    return methods
