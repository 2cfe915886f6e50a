"""The spec of ``studies/*.yaml``: one model, its workloads, the methods and N to search, budget.

The schema is checked here; the checks that need the catalog or the workload files (aliases,
drafts, method rules) run in ``autotune.spec.loader.resolve_study``.
"""

from __future__ import annotations

import itertools
import math
from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator, field_validator, model_validator

from autotune.spec._base import Bool, Float, Int, StrictModel
from autotune.spec.methods import GLOBAL_MAX_N, Method
from autotune.spec.slo import SLOSpec

MAX_REF_CHARS = 512
"""Longest model id, draft reference or workload name (the store's column widths)."""

MAX_CONCURRENCY = 65_536
"""Highest concurrency level a study may ask for (requests in flight on one engine)."""

MAX_CONTEXT_LENGTH = 16_777_216
"""Longest context-length bucket a study may ask for (prompt tokens)."""


class NRange(StrictModel):
    """An inclusive range of num_speculative_tokens."""

    min: Int = Field(1, ge=1, le=GLOBAL_MAX_N, description="Smallest N to try.")
    max: Int = Field(ge=1, le=GLOBAL_MAX_N, description="Largest N to try.")

    @model_validator(mode="after")
    def _ordered(self) -> NRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self

    def values(self) -> list[int]:
        return list(range(self.min, self.max + 1))


def _knob_setting(value: Any) -> Any:
    """A knob's value (integer, boolean, finite number or short string) or a non-empty list of
    them; one message for anything else (a union type would print one error per member)."""

    def scalar(v: Any) -> bool:
        if isinstance(v, bool | int):
            return True
        if isinstance(v, float):
            return math.isfinite(v)
        return isinstance(v, str) and 1 <= len(v) <= 64

    if isinstance(value, list):
        if not 1 <= len(value) <= 16 or not all(scalar(v) for v in value):
            raise ValueError(
                "a list of knob values must hold 1 to 16 integers, booleans, numbers or strings"
            )
        return value
    if not scalar(value):
        raise ValueError(
            "a knob takes an integer, boolean, number or string (1-64 characters), or a list "
            "of them to search"
        )
    return value


KnobSetting = Annotated[
    int | bool | float | str | list[int | bool | float | str], PlainValidator(_knob_setting)
]
"""A knob's fixed value, or the list of values to search; types are kept as written (``"3"``
stays a string, ``true`` a boolean) and autotune.spec.knobs checks them per knob."""


class MethodSpec(StrictModel):
    """One speculative method to search, with its draft checkpoint and N range."""

    method: Method = Field(description="vLLM's speculative method name.")
    draft: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_REF_CHARS,
        description="Draft checkpoint (HF id or path; 'tiny:NAME' for autotune's CPU test "
        "drafts). Defaults to the catalog's published draft for this model and method.",
    )
    num_speculative_tokens: NRange | None = Field(
        None,
        description="N range to search. Defaults to 1..the catalog's n_max for the method. "
        "Chain drafters measure every smaller N from one run at the largest.",
    )
    params: dict[str, KnobSetting] = Field(
        default_factory=dict,
        max_length=16,
        description="Knobs of vLLM's SpeculativeConfig (autotune.spec.knobs), each a value or a "
        "list of values to search: prompt_lookup_min/max (ngram), parallel_drafting, "
        "rejection_sample_method, draft_tensor_parallel_size, suffix_decoding_*, "
        "dspark_draft_topk, enable_adaptive_verification. Every combination of listed values is "
        "one variant of the method.",
    )


class ModelSpec(StrictModel):
    """The target model and how its engine is started."""

    name: str = Field(
        min_length=1,
        max_length=MAX_REF_CHARS,
        description="Catalog alias (kimi, gemma4, qwen, minimax, tiny), or an HF id / local path.",
    )
    tensor_parallel_size: Int | None = Field(
        None, ge=1, le=64, description="GPUs per engine. Defaults to the catalog's for the model."
    )
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        max_length=64,
        description="Extra vLLM engine args (EngineArgs field names), merged over the catalog's. "
        "Args autotune sets itself (speculative_config, enable_prefix_caching, ...) and "
        "trust_remote_code (a top-level study key) are refused.",
    )
    env: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict,
        max_length=64,
        description="Environment for the engine process (e.g. VLLM_ROCM_USE_AITER=1); "
        "stored with every measurement. Only variables known to load no code (vLLM's own, "
        "OMP_NUM_THREADS, HF_HOME, ...) pass; any other (LD_PRELOAD, PYTHONPATH, ...) needs "
        "trust_remote_code: true at the top of the study.",
    )
    allow_rocm_mla_override: Bool = Field(
        False,
        description="Silence the warning for N > 3 on MLA models on ROCm (AITER's native MLA "
        "decode kernels stop at 4 query tokens; vLLM 0.32 runs more on a slower fallback).",
    )


class VLLMEngineSpec(StrictModel):
    """Measure on real vLLM engines, one per Ray actor."""

    kind: Literal["vllm"] = "vllm"
    client: Literal["harness", "server"] = Field(
        "harness",
        description="How each cell is measured. 'harness': closed-loop streamed requests on an "
        "in-process AsyncLLM (no HTTP; lowest overhead). 'server': `vllm serve` on loopback "
        "driven by `vllm bench serve` with the same prompts, lengths and concurrency, so the "
        "numbers are exactly the ones vLLM's own benchmark prints (the HTTP path costs "
        "throughput where the CPU is scarce).",
    )


class ReplayEngineSpec(StrictModel):
    """Serve a recorded landscape CSV as if it were engines (for search benchmarks)."""

    kind: Literal["replay"] = "replay"
    landscape: str = Field(description="Path to the landscape CSV, relative to the study file.")


class ImportedEngineSpec(StrictModel):
    """Measurements imported from a sweep another tool ran (``autotune import``): nothing to run,
    only to recommend and report from."""

    kind: Literal["imported"] = "imported"
    tool: Literal["vllm bench sweep serve", "sglang bench_speculative.py"] = Field(
        description="The tool whose output was imported."
    )
    path: str = Field(description="Absolute path of the imported sweep directory or file.")


EngineSpec = Annotated[
    VLLMEngineSpec | ReplayEngineSpec | ImportedEngineSpec, Field(discriminator="kind")
]


class BudgetSpec(StrictModel):
    """When the search stops spending engine time."""

    max_engine_configs: Int | None = Field(
        None,
        ge=1,
        description="At most this many engine configs (engine starts), baseline included.",
    )
    max_engine_hours: Float | None = Field(
        None, gt=0, le=1e6, description="At most this many engine-hours (start + measurement)."
    )
    max_wall_minutes: Float | None = Field(
        None,
        gt=0,
        le=1e6,
        description="Wall-clock minutes one `study run` (or `study resume`) may take: no config "
        "is started once the time so far plus the next config's expected time (the mean of "
        "this run's finished configs) would pass it; running ones finish, the study reads "
        "`stopped: wall budget`, and `study resume` continues with a new budget.",
    )


class MeasurementSpec(StrictModel):
    """How each (workload, concurrency, repeat) is measured on a warm engine."""

    warmup_requests: Int = Field(
        4, ge=0, le=100_000, description="Requests run before timing, on every new engine."
    )
    requests_per_concurrency: Int = Field(
        4,
        ge=1,
        le=10_000,
        description="Each measurement runs max(num_prompts, this × concurrency) requests, so "
        "the closed loop spends most of its time with exactly `concurrency` in flight.",
    )
    timeout_s: Float = Field(
        1800, gt=0, le=7 * 86_400, description="A measurement running longer fails its trial."
    )
    start_timeout_s: Float = Field(
        3600, gt=0, le=7 * 86_400, description="An engine taking longer to start fails its trial."
    )
    max_prompts: Int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="Cap on prompts per workload for this study (e.g. a quick CPU demo); the "
        "capped prompt set gets its own digest.",
    )
    max_tokens: Int | None = Field(
        None, ge=1, le=1_048_576, description="Cap on output tokens per request for this study."
    )
    max_spread_pct: Float = Field(
        10.0,
        gt=0,
        le=1000,
        description="Repeats whose throughput spread (max-min over median) exceeds this are "
        "measured again while the engine is warm (see remeasure_noisy) and, if still too wide, "
        "flagged noisy in reports and low-confidence in recommendations.",
    )
    remeasure_noisy: Bool = Field(
        True,
        description="Sequential stopping: after `repeats` runs of a level on a warm engine, "
        "measure it again while the 95% confidence interval of its median throughput is wider "
        "than ±precision_pct (a replay study keeps the older rule, repeats spread over "
        "max_spread_pct, unless it sets precision_pct), up to max_repeats runs or "
        "max_level_s seconds; false keeps exactly `repeats` per level.",
    )
    precision_pct: Float | None = Field(
        None,
        gt=0,
        le=100,
        description="Target half-width, in percent of the median, of the 95% confidence "
        "interval of a level's median throughput (t-interval on log throughput over the "
        "level's runs on one engine). Default 3 on real engines; a replay study uses the "
        "spread rule unless it sets this.",
    )
    max_repeats: Int | None = Field(
        None,
        ge=1,
        le=1000,
        description="Hard cap on runs of one level on one engine (default 3 x repeats; never "
        "below repeats).",
    )
    max_level_s: Float = Field(
        600.0,
        gt=0,
        le=7 * 86_400,
        description="Time cap on one level on one engine: no more runs once its measured "
        "seconds reach this.",
    )
    min_measure_s: Float = Field(
        0.0,
        ge=0,
        le=86_400,
        description="Each measurement keeps issuing requests (cycling the prompts) until at "
        "least its number of requests is done and this many seconds have passed, so decode "
        "dominates the timed window (0: off).",
    )
    drift_check: Bool | None = Field(
        None,
        description="When the search has nothing more to propose, start the baseline once "
        "more and measure it at every level: its drift between the two runs is reported and "
        "speedups use both. Default: on for real engines (engine kind vllm), off for replays.",
    )
    confirm_starts: Bool | None = Field(
        None,
        description="Confirmation across engine starts: once the search and the drift check "
        "are done, a level whose winner and runner-up (or the baseline) lie within the "
        "start-to-start spread the drift check measured gets one more engine start of the "
        "winner, then of the rival, measuring the close levels; the answer pools every start. "
        "One engine start is one sample of a quantity that moves 10-25% between starts. "
        "Needs the drift check (no spread measured: nothing to confirm). Default: on for real "
        "engines, off for replays.",
    )
    confirm_max_pairs: Int = Field(
        3,
        ge=0,
        le=64,
        description="At most this many (winner, rival) pairs are confirmed per study, the "
        "closest calls first; each costs up to two engine starts (0: none).",
    )


Sampler = Literal["model", "grid", "random", "tpe", "gp"]
Objective = Literal["output_throughput", "goodput"]


class StudySpec(StrictModel):
    """A study: tune speculative decoding for one model over some workloads."""

    name: str = Field(
        pattern=r"^[a-z0-9][a-z0-9_.-]*$", max_length=128, description="Study name (unique)."
    )
    description: str = Field("", max_length=10_000, description="What the study is for.")
    model: ModelSpec = Field(description="The target model.")
    workloads: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        min_length=1, max_length=64, description="Workload names (workloads/NAME.yaml)."
    )
    concurrency: list[Annotated[Int, Field(ge=1, le=MAX_CONCURRENCY)]] = Field(
        default_factory=lambda: [1, 8, 32],
        min_length=1,
        max_length=64,
        description="Concurrency levels (requests in flight). The best N usually falls as "
        "concurrency rises; all are measured on the same warm engine.",
    )
    context_lengths: list[Annotated[Int, Field(ge=1, le=MAX_CONTEXT_LENGTH)]] | None = Field(
        None,
        min_length=1,
        max_length=16,
        description="Context-length buckets (prompt tokens, increasing, each within the "
        "model's max_model_len with the output tokens): every workload is measured once per "
        "bucket, as the workload WORKLOAD@ctxL, with prompts grown from the workload's own text "
        "(its other prompts before each one, never random tokens) to about L tokens of the "
        "target's tokenizer. The best N moves with context: at long context decode is "
        "memory-bound again. Default: each workload as it is.",
    )
    methods: list[MethodSpec] = Field(
        default_factory=list,
        max_length=64,
        description="Methods to search. Defaults to every method the catalog lists for the model.",
    )
    baseline: Bool = Field(
        True, description="Measure the engine without speculation, so speedups are real ratios."
    )
    repeats: Int = Field(3, ge=1, le=20, description="Repeats per measurement (spread is stored).")
    objective: Objective = Field(
        "output_throughput",
        description="What a trial scores: 'output_throughput' (default), the geometric mean of "
        "output tokens/s over (workload, concurrency), so every cell counts by its relative "
        "change; 'goodput', the geometric mean of requests/s that met the `slo:` limits on "
        "TTFT and TPOT (vLLM bench serve's goodput), which then also ranks `recommend`. "
        "goodput needs an `slo:` with p99_tpot_ms or p99_ttft_ms and a vLLM engine.",
    )
    slo: SLOSpec | None = Field(
        None,
        description="p99 latency limits (TPOT, TTFT, ITL in ms; global or per workload): the "
        "recommendation is the best throughput among configs that meet them.",
    )
    budget: BudgetSpec = Field(default_factory=lambda: BudgetSpec(), description="When to stop.")
    sampler: Sampler = Field(
        "model",
        description="What proposes engine configs: 'model' (default) measures each method at its "
        "largest N, then only the configs the acceptance x cost model says could still beat the "
        "measured best at some level; 'grid' (every config), 'random', 'tpe' and 'gp' are "
        "Optuna's samplers, for comparison.",
    )
    seed: Int = Field(0, ge=0, le=2**32 - 1, description="Seed of the sampler.")
    trust_remote_code: Bool = Field(
        False,
        description="Consent to run code shipped with the model or draft checkpoints "
        "(vLLM's trust_remote_code) and to set code-loading environment variables "
        "(LD_PRELOAD, PYTHONPATH, ...) in model.env. Off unless set here or by the model's "
        "catalog entry (which covers the model's code, not model.env); never taken from "
        "model.engine_args.",
    )
    engine: EngineSpec = Field(default_factory=VLLMEngineSpec, description="Engine backend.")
    measurement: MeasurementSpec = Field(
        default_factory=lambda: MeasurementSpec(), description="Measurement protocol."
    )

    @field_validator("workloads")
    @classmethod
    def _unique_workloads(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("workload names must be unique")
        return v

    @field_validator("concurrency")
    @classmethod
    def _concurrency(cls, v: list[int]) -> list[int]:
        if any(c < 1 for c in v):
            raise ValueError("concurrency levels must be >= 1")
        if len(set(v)) != len(v):
            raise ValueError("concurrency levels must be unique")
        return sorted(v)

    @field_validator("context_lengths")
    @classmethod
    def _context_lengths(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(b <= a for a, b in itertools.pairwise(v)):
            raise ValueError("context lengths must be strictly increasing (e.g. [1024, 8192])")
        return v

    @model_validator(mode="after")
    def _unique_methods(self) -> StudySpec:
        seen = set()
        for m in self.methods:
            key = (m.method, m.draft)
            if key in seen:
                raise ValueError(f"method {m.method} with draft {m.draft} listed twice")
            seen.add(key)
        return self

    @model_validator(mode="after")
    def _slo_workloads(self) -> StudySpec:
        unknown = sorted(set(self.slo.workloads) - set(self.workloads)) if self.slo else []
        if unknown:
            raise ValueError(f"slo.workloads: {unknown[0]!r} is not one of the study's workloads")
        return self

    @model_validator(mode="after")
    def _goodput_needs_slo(self) -> StudySpec:
        if self.objective != "goodput":
            return self
        # vLLM's goodput judges each request's TTFT and TPOT; an ITL limit alone says nothing.
        judged = self.slo is not None and all(
            self.slo.for_workload(w).p99_tpot_ms is not None
            or self.slo.for_workload(w).p99_ttft_ms is not None
            for w in self.workloads
        )
        if not judged:
            raise ValueError(
                "objective: goodput needs an slo: block with p99_tpot_ms or p99_ttft_ms "
                "for every workload"
            )
        if self.engine.kind in ("replay", "imported"):
            raise ValueError(
                "objective: goodput needs per-request latencies, which a replayed landscape "
                "does not record; use objective: output_throughput with an slo:"
            )
        return self
