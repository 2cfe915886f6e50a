"""The context-length axis in a report: one section per bucket (``WORKLOAD@ctxL``) with its
target, its prompts' real token counts and the recommended config at each concurrency level,
so whether the answer moves with context reads off the report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from autotune.spec.context import split_bucket


@dataclass(frozen=True)
class BucketSection:
    """One bucket of a study's report."""

    workload: str
    """The measured workload (``code@ctx512``)."""
    base: str
    context_length: int
    prompt_tokens_per_request: float | None
    """Mean prompt tokens per request as the engine counted them (all its measurements)."""
    built: Mapping[str, Any] | None
    """The bucket as built at ``study create`` (``ContextBucket`` fields), when the study has it."""
    best: tuple[tuple[int, str, float | None], ...]
    """Per concurrency level: the recommended config and its speedup."""

    def line(self) -> str:
        parts = [f"{self.workload}: bucket of {self.context_length} prompt tokens"]
        if self.built:
            parts.append(
                f"{self.built['num_prompts']} prompts of {self.built['prompt_tokens_mean']:,.0f} "
                f"tokens on average ({self.built['prompt_tokens_min']:,}-"
                f"{self.built['prompt_tokens_max']:,})"
            )
        if self.prompt_tokens_per_request is not None:
            parts.append(f"{self.prompt_tokens_per_request:,.0f} per request as measured")
        best = ", ".join(
            f"c={c} {config}" + (f" ({s:.2f}x)" if s is not None else "")
            for c, config, s in self.best
        )
        return "; ".join(parts) + f"\n  best: {best}"

    def as_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "base_workload": self.base,
            "context_length": self.context_length,
            "prompt_tokens_per_request": self.prompt_tokens_per_request,
            "built": dict(self.built) if self.built else None,
            "best": [
                {"concurrency": c, "config": config, "speedup": s} for c, config, s in self.best
            ],
        }


def bucket_sections(
    df: pd.DataFrame, summary: pd.DataFrame, built: Mapping[str, Mapping[str, Any]]
) -> list[BucketSection]:
    """A section per context bucket measured in ``df`` (the measurements frame), in workload
    then context order; ``summary`` gives the recommended configs, ``built`` the study's
    ``context_buckets``. Empty for a study without buckets."""
    found = []
    for name in sorted(set(df["workload"])):
        base, length = split_bucket(str(name))
        if length is not None:
            found.append((base, length, str(name)))
    sections = []
    for base, length, name in sorted(found):
        rows = df[df["workload"] == name]
        requests = rows["num_requests"].sum()
        tokens = rows["num_prompt_tokens"].sum()
        # A replayed landscape records no prompt tokens.
        per_request = float(tokens / requests) if requests and tokens else None
        chosen = summary[(summary["workload"] == name) & summary["recommended"]]
        best = tuple(
            (
                int(r["concurrency"]),
                str(r["config"]),
                None if pd.isna(r["speedup"]) else float(r["speedup"]),
            )
            for r in chosen.sort_values("concurrency").to_dict("records")
        )
        sections.append(BucketSection(name, base, length, per_request, built.get(name), best))
    return sections
