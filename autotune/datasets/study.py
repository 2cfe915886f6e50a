"""What ``study create`` checks and builds from a study's workloads before anything is written:
every workload loaded as it will be measured, prompts that look like random tokens refused, and
the context-length buckets built with their real token counts."""

from __future__ import annotations

from autotune.errors import SpecError
from autotune.spec.loader import ResolvedStudy


def check_prompts(resolved: ResolvedStudy) -> None:
    """Load every workload of the study as it will be measured (a bad request log fails here,
    before anything is written) and refuse one whose prompts look like random tokens
    (:mod:`autotune.datasets.prompt_check`). Hub datasets (``kind: hf``) are left to the run:
    the hub may be reachable only there."""
    from autotune.datasets import prepare
    from autotune.datasets.prompt_check import random_prompts

    for name in resolved.workloads:
        spec, base_dir = resolved.measured_workload(name)
        if spec.source.kind == "hf":
            continue
        origin = f"workload {name}"
        prepared = prepare(spec, base_dir, origin=origin)
        verdict = random_prompts([p.text for p in prepared.prompts])
        if verdict is not None:
            raise SpecError(verdict.line(), source=origin, field="source")


def build_context_buckets(resolved: ResolvedStudy, source: str) -> ResolvedStudy:
    """The study with its context-length buckets built (``autotune.datasets.context``) and their
    real token counts recorded, so a workload too short for a bucket is refused at create."""
    if not resolved.spec.context_lengths or resolved.landscape is not None:
        return resolved
    from autotune.datasets.context import load_target_tokenizer, prepare_measured
    from autotune.spec.context import split_bucket
    from autotune.spec.loader import ContextBucket

    tokenizer = load_target_tokenizer(resolved)
    buckets: dict[str, ContextBucket] = {}
    for name in resolved.measured_names():
        prepared, stats = prepare_measured(resolved, name, tokenizer, origin=source)
        buckets[name] = ContextBucket(
            workload=split_bucket(name)[0],
            context_length=stats.context_length,
            num_prompts=stats.num_prompts,
            prompt_tokens_mean=stats.prompt_tokens_mean,
            prompt_tokens_min=stats.prompt_tokens_min,
            prompt_tokens_max=stats.prompt_tokens_max,
            digest=prepared.digest,
        )
    return resolved.model_copy(update={"context_buckets": buckets})
