"""The ``slo:`` block of a study: p99 latency limits a recommended config must meet.

Serving teams pick the fastest config whose tail latency stays within a service-level objective
(vLLM's ``bench serve`` reports goodput against such limits; its ``auto_tune.sh`` caps latency).
Limits are in milliseconds on the p99 of TTFT, TPOT and ITL as autotune measures them
(``autotune.engine.stats``), global or per workload; a workload's own limits override the
global ones field by field.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field, model_validator

from autotune.spec._base import Float, StrictModel


class SLOLimits(StrictModel):
    """p99 latency limits in milliseconds; an unset limit does not constrain."""

    tpot_p99_ms: Float | None = Field(
        None, gt=0, description="Largest p99 time per output token (after the first), in ms."
    )
    ttft_p99_ms: Float | None = Field(
        None, gt=0, description="Largest p99 time to first token, in ms."
    )
    itl_p99_ms: Float | None = Field(
        None, gt=0, description="Largest p99 inter-token latency (gap between chunks), in ms."
    )


class SLOSpec(SLOLimits):
    """Global limits plus per-workload overrides."""

    workloads: dict[str, SLOLimits] = Field(
        default_factory=dict,
        description="Per-workload limits, overriding the global ones field by field.",
    )

    @model_validator(mode="after")
    def _says_something(self) -> SLOSpec:
        # A block that sets no limit anywhere (`slo: {}`, or only empty workload entries) would
        # read as "judged under an SLO" while constraining nothing. An empty workload entry
        # beside global limits is fine: it inherits them.
        limits = [self.model_dump(exclude={"workloads"}, exclude_none=True)]
        limits += [w.model_dump(exclude_none=True) for w in self.workloads.values()]
        if not any(limits):
            raise ValueError(
                "an slo: block sets at least one of tpot_p99_ms, ttft_p99_ms or itl_p99_ms"
            )
        return self

    def for_workload(self, workload: str) -> SLO:
        """The limits that apply to ``workload`` (a context bucket ``WORKLOAD@ctxL`` takes its
        workload's)."""
        from autotune.spec.context import base_workload

        own = self.workloads.get(workload) or self.workloads.get(base_workload(workload))
        pick = own.model_dump(exclude_none=True) if own else {}
        merged = {**self.model_dump(exclude={"workloads"}, exclude_none=True), **pick}
        return SLO(**merged)


@dataclass(frozen=True)
class SLO:
    """Resolved p99 limits in ms for one workload (None: no limit on that metric)."""

    tpot_p99_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p99_ms: float | None = None

    def limits(self) -> dict[str, float]:
        """The set limits by metric name (``tpot_ms_p99`` etc., the measurement columns)."""
        named = {
            "tpot_ms_p99": self.tpot_p99_ms,
            "ttft_ms_p99": self.ttft_p99_ms,
            "itl_ms_p99": self.itl_p99_ms,
        }
        return {k: v for k, v in named.items() if v is not None}

    def __bool__(self) -> bool:
        return bool(self.limits())

    def describe(self) -> str:
        """``p99 TPOT <= 50 ms, p99 TTFT <= 2000 ms``."""
        names = {"tpot_ms_p99": "TPOT", "ttft_ms_p99": "TTFT", "itl_ms_p99": "ITL"}
        return ", ".join(f"p99 {names[k]} <= {v:g} ms" for k, v in self.limits().items())
