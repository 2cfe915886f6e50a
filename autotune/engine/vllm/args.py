"""What a vLLM engine is started with and sent: the ``AsyncEngineArgs`` keywords of an engine
config (:func:`build_engine_kwargs`, the same for the in-process engine, ``vllm serve`` and
response generation) and the prompts as rendered for it (:func:`render_prompts`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from autotune.engine._base import EngineConfig, PreparedWorkload
from autotune.errors import EngineError

GiB = 1 << 30

RESERVED_ENGINE_ARGS: dict[str, str] = {
    "model": "comes from the engine config's model",
    "speculative_config": "comes from the engine config's method, draft and N",
    "tensor_parallel_size": "comes from the engine config's tensor_parallel_size",
    "enable_prefix_caching": "the measurement protocol turns prefix caching off",
    "disable_log_stats": "the spec-decode counters need vLLM's stats",
    "distributed_executor_backend": "a TP > 1 engine runs vLLM's mp executor inside its Ray "
    "actor (see autotune.cluster.ray_pool)",
}
"""Engine args autotune sets itself: a user value would break the protocol or the config key."""

CPU_DEFAULTS: dict[str, Any] = {
    "dtype": "bfloat16",
    "enforce_eager": True,
    # On CPU this is the share of RAM vLLM may reserve; the KV cache size is set separately.
    "gpu_memory_utilization": 0.3,
}
"""Engine args vLLM's CPU build needs on a shared machine, applied only where the user gave none."""

CPU_KV_CACHE_BYTES = 1 * GiB
"""CPU KV cache when neither ``kv_cache_memory_bytes`` nor ``VLLM_CPU_KVCACHE_SPACE`` is set."""


def resolve_ref(ref: str) -> str:
    """Resolve a ``tiny:NAME`` model reference to a local checkpoint; other refs pass through."""
    from autotune.engine.models import resolve_model

    return resolve_model(ref)


def build_engine_kwargs(
    config: EngineConfig,
    *,
    platform: str,
    seed: int = 0,
    environ: Mapping[str, str] | None = None,
    resolve: Callable[[str], str] = resolve_ref,
) -> dict[str, Any]:
    """The keyword arguments of ``AsyncEngineArgs`` for ``config``, exactly as ``vllm serve``
    would get them with ``--speculative-config``, plus the protocol's fixed settings.

    ``environ`` is the environment the engine will see (for ``VLLM_CPU_KVCACHE_SPACE``).
    """
    environ = os.environ if environ is None else environ
    user = dict(config.engine_args)
    for key, why in RESERVED_ENGINE_ARGS.items():
        if key in user:
            raise EngineError(f"engine_args.{key} cannot be set: {why}")
    spec = config.speculative_config()
    if spec is not None and isinstance(spec.get("model"), str):
        spec = {**spec, "model": resolve(spec["model"])}
    kwargs: dict[str, Any] = {
        "model": resolve(config.model),
        "speculative_config": spec,
        "tensor_parallel_size": config.tensor_parallel_size,
        "seed": seed,
        "enable_prefix_caching": False,
        "disable_log_stats": False,
    }
    if config.tensor_parallel_size > 1:
        # Inside a Ray actor vLLM would otherwise choose its Ray executor whenever a placement
        # group is current, and that executor rejects bundles of more than one GPU; the mp
        # executor's workers inherit the actor's visible devices instead.
        kwargs["distributed_executor_backend"] = "mp"
    if platform == "cpu":
        for key, value in CPU_DEFAULTS.items():
            user.setdefault(key, value)
        # vLLM's CPU build sizes its KV cache from VLLM_CPU_KVCACHE_SPACE when set; without it,
        # pin the size through the engine arg instead of editing the process environment.
        if "kv_cache_memory_bytes" not in user and not environ.get("VLLM_CPU_KVCACHE_SPACE"):
            user["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
    kwargs.update(user)
    return kwargs


def render_prompts(tokenizer: Any, workload: PreparedWorkload) -> list[Any]:
    """The prompts as the engine sends them: chat-templated token ids when the workload asks for
    the template and ``tokenizer`` has one, else the raw text (vLLM tokenizes it). Also what
    ``autotune export --speculators-data`` sends, so its responses answer the measured prompts.

    A prompt read from a chat log carries its whole history (``Prompt.messages``): the template
    renders all of it with ``add_generation_prompt=True``, as ``vllm serve`` renders a
    ``/v1/chat/completions`` request; without a template its flattened transcript is sent."""
    templated = workload.chat_template and getattr(tokenizer, "chat_template", None)
    rendered: list[Any] = []
    for prompt in workload.prompts:
        if templated:
            text = tokenizer.apply_chat_template(
                prompt.chat(), tokenize=False, add_generation_prompt=True
            )
            # The template already holds the special tokens (BOS), as in vLLM's chat server.
            ids = tokenizer.encode(text, add_special_tokens=False)
            rendered.append({"prompt_token_ids": list(ids)})
        else:
            rendered.append(prompt.text)
    return rendered


def dsd_schedule(rows: object, source: str) -> list[list[int]]:
    """A ``num_speculative_tokens_per_batch_size`` table as vLLM reads it (sorted ``[lo, hi, N]``
    rows), checked by vLLM's own parser (``validate_and_normalize_dynamic_sd_schedule``,
    vllm/v1/spec_decode/dynamic/utils.py); its refusal becomes one SpecError line."""
    from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

    from autotune.errors import SpecError

    try:
        schedule = validate_and_normalize_dynamic_sd_schedule(rows)
    except (TypeError, ValueError) as exc:
        raise SpecError(
            str(exc), source=source, field="num_speculative_tokens_per_batch_size"
        ) from None
    return [list(row) for row in schedule]
