"""Published speculative-decoding results (``autotune/catalog/published.yaml``) used as priors.

Each entry is one number a vendor blog, model card or benchmark write-up reported, with its
source URL; ``best_prior`` picks the most promising one for a (model, workload) pair, and
``starting_point`` is what ``autotune recommend`` answers with when nothing is measured: the
closest cited result, with N taken from the source or, where the source states none, from a
cited recipe (``recipes:`` in the same file), and labels saying what does not match.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from autotune.errors import SpecError
from autotune.spec._base import StrictModel
from autotune.spec.methods import METHODS, Method

Workload = Literal["code", "chat", "math"]
"""autotune's workload families a published dataset maps to (HumanEval/MBPP -> code,
MATH500/GSM8K -> math, MT-Bench/ShareGPT -> chat)."""

_SOURCE = "autotune/catalog/published.yaml"


class PublishedResult(StrictModel):
    """One published measurement of a speculative method against its no-speculation baseline."""

    alias: str | None = Field(
        description="Catalog alias of the target's family (models.yaml); None when the model is "
        "not in the catalog. The exact checkpoint measured is in `model`."
    )
    model: str = Field(
        description="HF id of the target actually measured (may be a quantized variant of the "
        "catalog model, e.g. an MXFP4 or AWQ checkpoint)."
    )
    method: Method = Field(description="Speculative method, spelled as vLLM's `method` field.")
    draft: str | None = Field(
        None, description="HF id of the draft checkpoint used; None for ngram and native MTP."
    )
    dataset: str = Field(description="Prompt set as the source names it (e.g. MATH500, random).")
    workload: Workload | None = Field(
        description="autotune workload family the dataset maps to; None for random or mixed "
        "prompt sets that map to none."
    )
    num_speculative_tokens: int | None = Field(
        None,
        ge=1,
        le=15,
        description="N the number was measured at (the best N when `best_of_sweep`); None when "
        "the source does not state it.",
    )
    best_of_sweep: bool = Field(
        False,
        description="True when the source swept N and this is its best N; False for a single N "
        "or one point of a sweep.",
    )
    speedup: float | None = Field(
        None,
        gt=0,
        description="Output throughput with speculation / without, same hardware, workload and "
        "concurrency. None when the source reports only acceptance.",
    )
    mean_acceptance_length: float | None = Field(
        None,
        ge=1,
        description="Mean tokens committed per target step, bonus token included (vLLM's "
        "convention: 1 + accepted drafts).",
    )
    concurrency: int | None = Field(
        None, ge=1, description="Requests in flight; None when the source does not state it."
    )
    hardware: str | None = Field(
        description="GPUs as the source describes them (e.g. '1x AMD Instinct MI355X'); None "
        "when not stated."
    )
    tensor_parallel_size: int | None = Field(
        None, ge=1, description="Tensor-parallel size of the target, when stated."
    )
    engine: str | None = Field(
        description="Serving engine and version as stated (vllm, sglang); None when not stated."
    )
    source: str = Field(
        description="URL of the publication the numbers come from, or (where it is not "
        "available) the repository file it is cited from, e.g. docs/sources/NAME.txt."
    )
    date: datetime.date | None = Field(
        description="Publication date; None when the source carries none."
    )
    notes: str = Field("", description="How the number was derived and anything that limits it.")

    @model_validator(mode="after")
    def _has_a_number(self) -> PublishedResult:
        if self.speedup is None and self.mean_acceptance_length is None:
            raise ValueError("an entry needs a speedup or a mean_acceptance_length")
        if METHODS[self.method].needs_draft and not self.draft:
            raise ValueError(f"method {self.method} needs the draft that was used")
        return self


class Recipe(StrictModel):
    """A published serving recipe that states N for a model and method (no measured speedup)."""

    alias: str = Field(description="Catalog alias of the target (models.yaml).")
    model: str = Field(description="HF id of the target the recipe serves.")
    method: Method = Field(description="Speculative method, spelled as vLLM's `method` field.")
    draft: str | None = Field(None, description="Draft checkpoint the recipe uses, if any.")
    num_speculative_tokens: int = Field(ge=1, le=15, description="N the recipe states.")
    source: str = Field(description="URL of the recipe.")
    states: str = Field(description="What the recipe says, quoted or closely paraphrased.")

    @model_validator(mode="after")
    def _has_its_draft(self) -> Recipe:
        if METHODS[self.method].needs_draft and not self.draft:
            raise ValueError(f"method {self.method} needs the draft the recipe uses")
        return self


class PublishedResults(StrictModel):
    """The whole published.yaml file."""

    results: list[PublishedResult] = Field(
        min_length=1, description="Published results, one entry per reported number."
    )
    recipes: list[Recipe] = Field(
        default_factory=list,
        description="Recipes that state N, for results whose source states none.",
    )


@functools.cache
def load_published() -> PublishedResults:
    """The published results shipped with the package (cached)."""
    text = resources.files("autotune.catalog").joinpath("published.yaml").read_text()
    try:
        # libyaml's loader when present: the pure-Python one takes most of recommend's time.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        return PublishedResults.model_validate(yaml.load(text, Loader=loader))
    except ValidationError as exc:  # a packaging bug, but say where
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise SpecError(err["msg"], source=_SOURCE, field=loc) from None


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


@dataclasses.dataclass(frozen=True)
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
