"""The ``slo:`` block of a study: p99 latency limits a recommended config must meet.

Serving teams pick the fastest config whose tail latency stays within a service-level objective
(vLLM's ``bench serve`` reports goodput against such limits; its ``auto_tune.sh`` caps latency).
Limits are in milliseconds on the p99 of TTFT, TPOT and ITL as autotune measures them
(``autotune.engine.stats``), global or per workload; a workload's own limits override the
global ones field by field.

The keys are spelled as vLLM's benchmark JSON spells the same numbers (``p99_tpot_ms``,
``p99_ttft_ms``, ``p99_itl_ms``), as are the measurement columns and landscape columns. The
spelling of earlier autotune versions (``tpot_p99_ms`` ...) is read as an alias, so study files
and stored studies written with it still load; nothing writes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import AliasChoices, Field, model_validator

from autotune.spec._base import Float, StrictModel

OLD_SLO_KEYS = {
    "p99_tpot_ms": "tpot_p99_ms",
    "p99_ttft_ms": "ttft_p99_ms",
    "p99_itl_ms": "itl_p99_ms",
}
"""Each SLO key's spelling before vLLM's was adopted, still read (never written)."""


def _alias(key: str) -> AliasChoices:
    return AliasChoices(key, OLD_SLO_KEYS[key])


class SLOLimits(StrictModel):
    """p99 latency limits in milliseconds; an unset limit does not constrain."""

    p99_tpot_ms: Float | None = Field(
        None,
        validation_alias=_alias("p99_tpot_ms"),
        gt=0,
        description="Largest p99 time per output token (after the first), in ms. "
        "vLLM's spelling; the earlier `tpot_p99_ms` is still read.",
    )
    p99_ttft_ms: Float | None = Field(
        None,
        validation_alias=_alias("p99_ttft_ms"),
        gt=0,
        description="Largest p99 time to first token, in ms. "
        "vLLM's spelling; the earlier `ttft_p99_ms` is still read.",
    )
    p99_itl_ms: Float | None = Field(
        None,
        validation_alias=_alias("p99_itl_ms"),
        gt=0,
        description="Largest p99 inter-token latency (gap between chunks), in ms. "
        "vLLM's spelling; the earlier `itl_p99_ms` is still read.",
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
                "an slo: block sets at least one of p99_tpot_ms, p99_ttft_ms or p99_itl_ms"
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

    p99_tpot_ms: float | None = None
    p99_ttft_ms: float | None = None
    p99_itl_ms: float | None = None

    def limits(self) -> dict[str, float]:
        """The set limits by metric name (``p99_tpot_ms`` etc., the measurement columns)."""
        named = {
            "p99_tpot_ms": self.p99_tpot_ms,
            "p99_ttft_ms": self.p99_ttft_ms,
            "p99_itl_ms": self.p99_itl_ms,
        }
        return {k: v for k, v in named.items() if v is not None}

    def __bool__(self) -> bool:
        return bool(self.limits())

    def describe(self) -> str:
        """``p99 TPOT <= 50 ms, p99 TTFT <= 2000 ms``."""
        names = {"p99_tpot_ms": "TPOT", "p99_ttft_ms": "TTFT", "p99_itl_ms": "ITL"}
        return ", ".join(f"p99 {names[k]} <= {v:g} ms" for k, v in self.limits().items())
