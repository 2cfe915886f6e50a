"""The model catalog: aliases (kimi, gemma4, qwen, minimax, tiny) → HF ids, drafts, N bounds.

The data lives in ``autotune/catalog/models.yaml`` (one file, not code); this module gives it a
strict schema and the lookups the rest of autotune uses.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import yaml
from pydantic import Field, ValidationError

from autotune.errors import SpecError
from autotune.spec._base import StrictModel
from autotune.spec.methods import Method, RuleContext


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


class ModelEntry(StrictModel):
    """One target model: where it lives, how it is served, which drafts apply."""

    model: str = Field(description="HF id or local path of the target model ('tiny:NAME' local).")
    description: str = Field(description="One line for `autotune models`.")
    source: str | None = Field(None, description="Model card URL.")
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

    def rule_context(self, method: str, platform: str | None = None) -> RuleContext:
        entry = self.methods.get(method)  # type: ignore[call-overload]
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
def detected_device_key() -> str | None:
    """The catalog key of this host's first GPU (None on a CPU), detected once per process."""
    from autotune.engine.platform import detect_device_name, device_key

    name = detect_device_name()
    return device_key(name) if name else None


@functools.cache
def load_catalog() -> Catalog:
    """The catalog shipped with the package (cached)."""
    text = resources.files("autotune.catalog").joinpath("models.yaml").read_text()
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: fast read-only commands
        return Catalog.model_validate(yaml.load(text, Loader=loader))
    except ValidationError as exc:  # a packaging bug, but say where
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise SpecError(err["msg"], source="autotune/catalog/models.yaml", field=loc) from None
