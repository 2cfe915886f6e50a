"""Published speculative-decoding results (``autotune/catalog/published.yaml``) used as priors.

Each entry is one number a vendor blog, model card or benchmark write-up reported, with its
source URL; ``best_prior`` picks the most promising one for a (model, workload) pair.
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
    source: str = Field(description="URL of the publication the numbers come from.")
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


class PublishedResults(StrictModel):
    """The whole published.yaml file."""

    results: list[PublishedResult] = Field(
        min_length=1, description="Published results, one entry per reported number."
    )


@functools.cache
def load_published() -> PublishedResults:
    """The published results shipped with the package (cached)."""
    text = resources.files("autotune.catalog").joinpath("published.yaml").read_text()
    try:
        return PublishedResults.model_validate(yaml.safe_load(text))
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
