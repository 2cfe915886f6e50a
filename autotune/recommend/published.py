"""The published prior: what `autotune recommend` answers with when nothing is measured.

The rule reads the cited data of :mod:`autotune.spec.published` (``autotune/catalog/
published.yaml``): ``best_prior`` picks the highest published speedup for a (model, workload)
pair, and ``starting_point`` the closest cited result, with N taken from the source or, where the
source states none, from a cited recipe, and labels saying what does not match.
:func:`published_prior` turns that point into the answer `recommend` prints
(:class:`PriorRecommendation`), with the catalog's engine args for the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.spec.published import PublishedResult, PublishedResults, Recipe, load_published


def best_prior(
    alias: str,
    workload: str,
    concurrency: int | None = None,
    results: list[PublishedResult] | None = None,
) -> PublishedResult | None:
    """The highest published speedup for a catalog model on a workload, or None.

    Only entries with a speedup count. When ``concurrency`` is given, entries measured at that
    concurrency win over the rest; otherwise the best over every concurrency is returned.
    ``alias`` may be any name the catalog resolves (e.g. ``gemma-4-31b``); ``results`` defaults
    to the shipped file.
    """
    from autotune.spec.catalog import load_catalog  # the catalog resolves extra spellings

    found = load_catalog().resolve(alias)
    name = found[0] if found else alias
    pool = results if results is not None else load_published().results
    candidates = [
        r for r in pool if r.alias == name and r.workload == workload and r.speedup is not None
    ]
    if concurrency is not None:
        # A speedup measured at another concurrency is a weak prior: batching changes it a lot.
        matching = [r for r in candidates if r.concurrency == concurrency]
        candidates = matching or candidates
    return max(candidates, key=lambda r: r.speedup or 0.0, default=None)


@dataclass(frozen=True)
class StartingPoint:
    """A published starting point for a (model, workload): what to deploy before measuring."""

    alias: str
    workload: str
    method: str
    draft: str | None
    num_speculative_tokens: int
    n_source: str
    """Where N comes from: "the result's source", or "recipe URL (what it states)"."""
    result: PublishedResult | None
    """The cited result; None when only a recipe is published for the model."""
    recipe: Recipe | None
    """The recipe N was taken from (or the only publication), else None."""
    labels: tuple[str, ...]
    """What does not match the question (workload, concurrency, engine, numbers reported)."""

    @property
    def citation(self) -> str:
        return self.result.source if self.result is not None else self.recipe.source  # type: ignore[union-attr]

    @property
    def hardware(self) -> str | None:
        return self.result.hardware if self.result is not None else None


def _recipe_for(alias: str, method: str, recipes: list[Recipe]) -> Recipe | None:
    return next((r for r in recipes if r.alias == alias and r.method == method), None)


def _random_prompts(r: PublishedResult) -> bool:
    """Whether the result was measured on random tokens (``random 1K/1K``), not real prompts."""
    return (r.dataset or "").strip().lower().startswith("random")


def _n_bound(entry: Any, method: str) -> int | None:
    """The catalog's largest N for the model's method (``n_max``, or a block drafter's
    ``block_size - 1``); None when it states none."""
    m = entry.methods.get(method) if entry is not None else None
    if m is None:
        return None
    bounds = [b for b in (m.n_max, m.block_size - 1 if m.block_size else None) if b]
    return min(bounds) if bounds else None


def starting_point(
    alias: str,
    workload: str,
    concurrency: int | None = None,
    published: PublishedResults | None = None,
) -> StartingPoint | None:
    """The closest cited result for (model, workload), or None when nothing is published.

    Same model only (its catalog alias). Results on the same workload family come first; when
    there are none, results on any prompt set, labelled "workload not matched". A result counts
    only when N is known: stated by its source, or by a recipe for the same model and method.
    Within those: results at ``concurrency`` first (when given), then results with a reported
    speedup (highest first), then acceptance-only results (highest acceptance length first,
    ties to the smaller N). With no usable result, a recipe for the model alone answers,
    labelled "recipe only".
    """
    from autotune.spec.catalog import load_catalog

    catalog = load_catalog()
    # An alias, an extra name, or the HF id of a catalog target (moonshotai/Kimi-K2.5 -> kimi).
    found = catalog.resolve(alias) or catalog.find_by_model(alias)
    name = found[0] if found else alias
    data = published if published is not None else load_published()
    usable: list[tuple[PublishedResult, int, Recipe | None]] = []
    for r in data.results:
        if r.alias != name:
            continue
        recipe = None if r.num_speculative_tokens else _recipe_for(name, r.method, data.recipes)
        n = r.num_speculative_tokens or (recipe.num_speculative_tokens if recipe else None)
        if n is None:
            continue
        # An acceptance length grows with N whatever the speedup does: an acceptance-only
        # result past the catalog's N bound would suggest an N the study can never measure.
        bound = _n_bound(found[1] if found else None, r.method)
        if r.speedup is None and bound is not None and n > bound:
            continue
        usable.append((r, n, recipe))
    matched = [u for u in usable if u[0].workload == workload]
    pool = matched or usable

    def key(u: tuple[PublishedResult, int, Recipe | None]) -> tuple[bool, bool, bool, float, int]:
        r, n, _ = u
        at_c = concurrency is not None and r.concurrency == concurrency
        number = r.speedup if r.speedup is not None else (r.mean_acceptance_length or 0.0)
        # Real prompt sets before random ones; then the level asked for; speedups before
        # acceptance-only results.
        return (not _random_prompts(r), at_c, r.speedup is not None, number, -n)

    if pool:
        r, n, recipe = max(pool, key=key)
        labels = []
        if not matched:
            labels.append(f"workload not matched: the source measured {r.dataset}")
        if concurrency is not None and r.concurrency != concurrency:
            at = f"concurrency {r.concurrency}" if r.concurrency else "an unstated concurrency"
            labels.append(f"concurrency not matched: the source measured {at}")
        if r.speedup is None:
            labels.append("acceptance only: the source reports no speedup")
        if _random_prompts(r):
            labels.append(f"random prompts: the source measured {r.dataset}, no real prompt set")
        if r.engine and not r.engine.startswith("vllm"):
            labels.append(f"engine not matched: measured with {r.engine}")
        entry = load_catalog().models.get(name)
        if entry is not None and r.model != entry.model:
            labels.append(f"checkpoint not matched: the source measured {r.model}")
        if recipe is not None:
            labels.append(f"N from recipe: the source states no N; {recipe.source} states {n}")
            n_source = f"{recipe.source} ({recipe.states})"
        else:
            n_source = "the result's source"
        return StartingPoint(
            alias=name,
            workload=workload,
            method=r.method,
            draft=r.draft,
            num_speculative_tokens=n,
            n_source=n_source,
            result=r,
            recipe=recipe,
            labels=tuple(labels),
        )
    recipe = next((rc for rc in data.recipes if rc.alias == name), None)
    if recipe is None:
        return None
    return StartingPoint(
        alias=name,
        workload=workload,
        method=recipe.method,
        draft=recipe.draft,
        num_speculative_tokens=recipe.num_speculative_tokens,
        n_source=f"{recipe.source} ({recipe.states})",
        result=None,
        recipe=recipe,
        labels=(
            "recipe only: no published measurement of this model; N is the recipe's",
            "workload not matched: the recipe names no workload",
        ),
    )


@dataclass(frozen=True)
class PriorRecommendation:
    """An answer from a published result or recipe, for a pair nothing was measured for."""

    point: StartingPoint
    model: str
    """HF id of the catalog's target checkpoint."""
    tensor_parallel_size: int
    engine_args: dict[str, Any]
    source: str = "published"

    @property
    def result(self) -> PublishedResult | None:
        return self.point.result

    @property
    def speculative_config(self) -> dict[str, Any] | None:
        from autotune.spec.methods import speculative_config

        p = self.point
        params = {}
        entry = _catalog_entry(p.alias)
        if entry is not None and p.method in entry.methods:
            params = dict(entry.methods[p.method].params)
        return speculative_config(p.method, p.num_speculative_tokens, p.draft, params)

    def to_json(self) -> dict[str, Any]:
        """What `recommend --json` prints for a published answer."""
        return {"speculative_config": self.speculative_config, **self.label()}

    def label(self) -> dict[str, Any]:
        """What `--json`/`--explain` and the stderr note carry about the source."""
        p = self.point
        r = p.result
        return {
            "source": "published",
            "citation": p.citation,
            "method": p.method,
            "num_speculative_tokens": p.num_speculative_tokens,
            "n_from": p.n_source,
            "speedup": r.speedup if r else None,
            "mean_acceptance_length": r.mean_acceptance_length if r else None,
            "dataset": r.dataset if r else None,
            "concurrency": r.concurrency if r else None,
            "hardware": p.hardware,
            "engine": r.engine if r else None,
            "measured_model": r.model if r else None,
            "date": str(r.date) if r and r.date else None,
            "labels": list(p.labels),
            "notes": r.notes if r else "",
        }


def _catalog_entry(alias: str) -> Any:
    from autotune.spec.catalog import load_catalog

    catalog = load_catalog()
    found = catalog.resolve(alias)
    return catalog.models.get(found[0] if found else alias)


def published_prior(
    model: str, workload: str, concurrency: int | None = None
) -> PriorRecommendation | None:
    """The published starting point `recommend` falls back to when nothing is measured."""
    point = starting_point(model, workload, concurrency)
    if point is None:
        return None
    entry = _catalog_entry(point.alias)
    return PriorRecommendation(
        point=point,
        model=entry.model if entry is not None else model,
        tensor_parallel_size=entry.tensor_parallel_size.get("default", 1) if entry else 1,
        engine_args=dict(entry.engine_args) if entry is not None else {},
    )
