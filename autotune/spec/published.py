"""Published speculative-decoding results (``autotune/catalog/published.yaml``) used as priors.

Each entry is one number a vendor blog, model card or benchmark write-up reported, with its
source URL, and each recipe a published serving recipe that states N (``recipes:`` in the same
file). This module holds the data and its schema only; the rule that picks the starting point
``autotune recommend`` answers with when nothing is measured is
:mod:`autotune.recommend.published`'s.
"""

from __future__ import annotations

import datetime
import functools
from importlib import resources
from typing import Literal

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
