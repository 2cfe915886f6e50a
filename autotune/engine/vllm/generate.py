"""Greedy generation on vLLM's offline ``LLM`` API: the target's own answers to a prepared
workload, for exports that hand the measured prompts to training (``autotune export
--speculators-data --with-responses``). The one place besides the Engine backends that starts
a vLLM engine, so every engine start goes through the engine layer."""

from __future__ import annotations

import os
from dataclasses import dataclass

from autotune.engine._base import EngineConfig, PreparedWorkload
from autotune.errors import EngineError


@dataclass(frozen=True)
class Generation:
    """One greedy response of the target, as token ids (what the engine saw and produced)."""

    prompt_ids: list[int]
    output_ids: list[int]
    finish_reason: str | None
    text: str


def generate_greedy(config: EngineConfig, prepared: PreparedWorkload) -> list[Generation]:
    """The target's greedy responses to ``prepared``, one per prompt.

    The engine starts with ``config``'s engine args, TP and environment (``build_engine_kwargs``,
    as every trial does; the config is expected to be the baseline, no speculative config) and
    gets each prompt as a study sends it: chat-templated token ids when the workload uses the
    template, else the raw text. Each response is at most the prompt's ``max_tokens`` long and,
    unlike a measurement, stops at the end-of-sequence token, since a deployed target never
    generates past it.
    """
    try:
        from vllm import LLM, SamplingParams
    except ImportError as exc:
        raise EngineError(f"vllm is not importable: {exc}") from None
    from autotune.engine.platform import gpu_runtime
    from autotune.engine.vllm.args import build_engine_kwargs, render_prompts
    from autotune.engine.vllm.env import applied_env
    from autotune.engine.vllm.failures import one_line_reason

    environ = {**os.environ, **config.env}
    kwargs = build_engine_kwargs(
        config, platform=gpu_runtime(), seed=prepared.seed, environ=environ
    )
    with applied_env(config.env):  # vLLM and its engine process read them at start
        try:
            llm = LLM(**kwargs)
        except Exception as exc:
            raise EngineError(f"engine did not start: {one_line_reason(exc)}") from None
        tokenizer = llm.get_tokenizer()
        inputs = render_prompts(tokenizer, prepared)
        params = [
            SamplingParams(temperature=0.0, max_tokens=p.max_tokens, seed=prepared.seed)
            for p in prepared.prompts
        ]
        try:
            outputs = llm.generate(inputs, params, use_tqdm=False)
        except Exception as exc:
            raise EngineError(f"generating the responses failed: {one_line_reason(exc)}") from None
        generations = []
        for out in outputs:
            prompt_ids = list(out.prompt_token_ids or [])
            done = out.outputs[0]
            ids = prompt_ids + list(done.token_ids)
            generations.append(
                Generation(
                    prompt_ids=prompt_ids,
                    output_ids=list(done.token_ids),
                    finish_reason=done.finish_reason,
                    text=tokenizer.decode(ids, skip_special_tokens=False),
                )
            )
        del llm  # shuts its engine process down now
        return generations
