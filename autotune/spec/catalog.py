"""The model catalog: aliases (kimi, gemma4, qwen, minimax, tiny) → HF ids, drafts, N bounds,
cited acceptance-length curves.

The data lives in ``autotune/catalog/models.yaml`` (one file, not code); this module gives it a
strict schema, the lookups the rest of autotune uses, and the catalog's view by method
(:func:`catalog_methods`: each model's methods with the N range autotune searches).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from autotune.errors import SpecError
from autotune.spec._base import Float, Int, StrictModel, Text
from autotune.spec.methods import GLOBAL_MAX_N, METHODS, Method, RuleContext, max_n

_SOURCE = "autotune/catalog/models.yaml"

CurveN = Annotated[Int, Field(ge=1, le=GLOBAL_MAX_N)]
"""An N of a published curve: 1..15, the largest num_speculative_tokens autotune tries."""


class AcceptanceCurve(StrictModel):
    """A published mean acceptance length at each N for one model and method, with its source.

    A prior only: the model strategy orders its first batch by it (which N to start first);
    nothing is stored or recommended from it, and reports show it beside what was measured.
    """

    acceptance_length_by_n: dict[CurveN, Annotated[Float, Field(ge=1.0)]] = Field(
        min_length=1,
        description="N -> mean acceptance length as the source states it (vLLM's convention: "
        "1 + accepted drafts per step, the bonus token included; 1 <= AL <= N + 1).",
    )
    workload: Literal["code", "chat", "math"] | None = Field(
        description="autotune workload family of the source's prompt set (None: none maps)."
    )
    dataset: Text = Field(description="The prompt set as the source names it.")
    condition: Text = Field(
        "", description="What else the source fixed (sampling, thinking mode), when it says."
    )
    measured: Text = Field(
        description="What was measured: checkpoint, draft, hardware and engine as stated (the "
        "checkpoint may be a quantized variant of the catalog target)."
    )
    source: Text = Field(description="URL of the file or page the numbers are copied from.")
    repository: Text | None = Field(None, description="owner/name of the source repository.")
    path: Text | None = Field(None, description="Path of the source file in the repository.")
    commit: Text | None = Field(None, description="Commit of the source file read, when known.")
    notes: Text = Field("", description="What was left out and why.")

    @model_validator(mode="after")
    def _at_most_n_plus_one(self) -> AcceptanceCurve:
        for n, al in self.acceptance_length_by_n.items():
            if al > n + 1:
                raise ValueError(
                    f"acceptance_length_by_n: {al} at N={n} is more than N + 1 tokens per step"
                )
        return self

    def compact(self) -> str:
        """``AL@N 1:1.80 2:2.33 …`` in N order."""
        pairs = sorted(self.acceptance_length_by_n.items())
        return "AL@N " + " ".join(f"{n}:{al:.2f}" for n, al in pairs)

    def citation(self) -> str:
        """Repository, path and short commit when known, else the source URL."""
        if self.repository and self.path:
            at = f" @ {self.commit[:7]}" if self.commit else ""
            return f"{self.repository} {self.path}{at}"
        return self.source


class MethodEntry(StrictModel):
    """A speculative method that applies to a catalog model, with its published draft."""

    draft: str | None = Field(
        None,
        description="The published draft checkpoint (HF id) for methods that need one; "
        "'tiny:NAME' for drafts autotune.testing builds locally.",
    )
    draft_source: str | None = Field(
        None, description="Where the draft checkpoint is published (model card URL)."
    )
    n_max: int | None = Field(
        None, ge=1, le=15, description="Largest N worth trying for this model and method."
    )
    block_size: int | None = Field(
        None, ge=2, description="Block size of a block drafter (dflash N <= block_size - 1)."
    )
    params: dict[str, int] = Field(
        default_factory=dict, description="Default method parameters (e.g. prompt_lookup_max)."
    )
    acceptance_curves: list[AcceptanceCurve] = Field(
        default_factory=list,
        description="Published acceptance length by N for this model and method, each cited; "
        "priors that order the search's first batch, never measurements.",
    )

    def n_bound(self) -> int | None:
        """The largest N the entry allows (``n_max``, or a block drafter's block - 1)."""
        bounds = [b for b in (self.n_max, self.block_size - 1 if self.block_size else None) if b]
        return min(bounds) if bounds else None


class ModelEntry(StrictModel):
    """One target model: where it lives, how it is served, which drafts apply."""

    model: str = Field(description="HF id or local path of the target model ('tiny:NAME' local).")
    description: str = Field(description="One line for `autotune models`.")
    source: str | None = Field(None, description="Model card URL.")
    provenance: str | None = Field(
        None,
        description="Where the weights come from when autotune builds them locally (package, "
        "file, conversion); shown by `autotune models`.",
    )
    licence: str | None = Field(None, description="The weights' licence (SPDX id), when stated.")
    tensor_parallel_size: dict[str, int] = Field(
        default_factory=lambda: {"default": 1},
        description="Typical tensor_parallel_size per device (mi300x, mi355x, h200: read for the "
        "detected GPU), else per platform (rocm, cuda, cpu), else default.",
    )
    mla_attention: bool = Field(
        False, description="MLA attention (Kimi, DeepSeek): ROCm AITER decode caps N at 3."
    )
    mtp_layers: int | None = Field(
        None, ge=1, description="num_nextn_predict_layers of the checkpoint, when it has MTP."
    )
    engine_args: dict[str, Any] = Field(
        default_factory=dict, description="vLLM engine args this model needs (e.g. max_model_len)."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment the engine needs (e.g. ROCm switches)."
    )
    methods: dict[Method, MethodEntry] = Field(
        default_factory=dict, description="Methods that apply, each with its published draft."
    )

    @model_validator(mode="after")
    def _curves_within_bounds(self) -> ModelEntry:
        for method, entry in self.methods.items():
            rule_bound = max_n(method, self.rule_context(method))
            bound = min(b for b in (entry.n_bound(), rule_bound) if b is not None)
            for i, curve in enumerate(entry.acceptance_curves):
                past = [n for n in curve.acceptance_length_by_n if n > bound]
                if past:
                    raise ValueError(
                        f"methods.{method}.acceptance_curves.{i}.acceptance_length_by_n: "
                        f"N={past[0]} is past the method's bound N <= {bound}"
                    )
        return self

    def rule_context(self, method: str, platform: str | None = None) -> RuleContext:
        entry = self.methods.get(method)
        return RuleContext(
            mtp_layers=self.mtp_layers,
            block_size=entry.block_size if entry else None,
            mla_attention=self.mla_attention,
            platform=platform,
        )


class Catalog(StrictModel):
    """All catalog models by alias."""

    models: dict[str, ModelEntry] = Field(description="Catalog entries by alias.")
    aliases: dict[str, str] = Field(
        default_factory=dict, description="Extra names → the alias they stand for."
    )

    def resolve(self, name: str) -> tuple[str, ModelEntry] | None:
        """The (alias, entry) for an alias or extra name; None for paths and HF ids."""
        alias = self.aliases.get(name, name)
        entry = self.models.get(alias)
        return (alias, entry) if entry else None

    def find_by_model(self, model: str) -> tuple[str, ModelEntry] | None:
        """The catalog entry whose target is ``model`` (an HF id), if any."""
        for alias, entry in self.models.items():
            if entry.model == model:
                return alias, entry
        return None


def tensor_parallel_for(tp: dict[str, int], platform: str, device: str | None = None) -> int:
    """A catalog ``tensor_parallel_size`` for this machine: the detected device's key (``mi300x``,
    ``mi355x``, ``h200``), else the platform's (``rocm``, ``cuda``, ``cpu``), else ``default``."""
    for key in (device, platform, "default"):
        if key and key in tp:
            return tp[key]
    return next(iter(tp.values()), 1)


@functools.cache
def load_catalog() -> Catalog:
    """The catalog shipped with the package (cached)."""
    return parse_catalog(resources.files("autotune.catalog").joinpath("models.yaml").read_text())


def parse_catalog(text: str, source: str = _SOURCE) -> Catalog:
    """A catalog from YAML text; SpecError (one line: the file, the field, what is wrong)."""
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: fast read-only commands
        return Catalog.model_validate(yaml.load(text, Loader=loader))
    except ValidationError as exc:  # a packaging bug, but say where
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        raise SpecError(" ".join(msg.split()), source=source, field=loc) from None


def acceptance_curves(model: str, alias: str | None = None) -> dict[str, list[AcceptanceCurve]]:
    """The published curves by method for a catalog model (its alias, any name the catalog
    resolves, or its target's HF id); empty for a model the catalog does not hold."""
    catalog = load_catalog()
    found = (catalog.resolve(alias) if alias else None) or catalog.resolve(model)
    found = found or catalog.find_by_model(model)
    if found is None:
        return {}
    return {
        m: list(e.acceptance_curves) for m, e in found[1].methods.items() if e.acceptance_curves
    }


@dataclass(frozen=True)
class CatalogMethod:
    """One method of a catalog model, with the N range autotune searches for it."""

    alias: str
    model: str
    tensor_parallel_size: dict[str, int]
    method: str | None
    draft: str | None
    n_max: int | None
    """None: no method, or a DSpark draft whose N is its trained block (read from its config)."""
    n_is_block: bool = False
    """The method's N is its draft's block (``MethodRule.n_is_block``)."""


def catalog_methods() -> list[CatalogMethod]:
    """Every (model, method) of the catalog with its N bound (what `autotune models` lists):
    the smaller of the catalog's ``n_max`` and what the method's rules allow for that model."""
    out = []
    for alias, entry in load_catalog().models.items():
        tp = dict(entry.tensor_parallel_size)
        if not entry.methods:
            out.append(CatalogMethod(alias, entry.model, tp, None, None, None))
        for method, m in entry.methods.items():
            ctx = RuleContext(
                mtp_layers=entry.mtp_layers,
                block_size=m.block_size,
                mla_attention=entry.mla_attention,
            )
            hi: int | None = min(m.n_max or max_n(method, ctx), max_n(method, ctx))
            block = METHODS[method].n_is_block
            if block and m.block_size is None:
                hi = None
            out.append(CatalogMethod(alias, entry.model, tp, method, m.draft, hi, block))
    return out
