"""Per-request timings of a streamed run, summarised as TTFT / TPOT / ITL percentiles in ms.

The conventions are those of ``vllm bench serve`` so autotune's latencies read like vLLM's:
TTFT = first streamed chunk - send; TPOT = (e2e - TTFT) / (output tokens - 1), only for requests
with more than one output token; ITL = the gaps between successive chunks (a chunk may carry
several tokens under speculative decoding); percentiles by ``numpy.percentile`` (linear). Where
vLLM would print 0 for an empty list (no request had two tokens), this gives None.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RequestTiming:
    """One request as the client saw it. Times are seconds on one monotonic clock."""

    sent: float
    """When the request was sent."""
    chunk_times: tuple[float, ...]
    """When each streamed chunk carrying at least one new token arrived, in order."""
    output_tokens: int
    prompt_tokens: int = 0
    token_ids: tuple[int, ...] = ()
    """The output's token ids (the degeneracy guard reads them); empty where the client has
    none."""
    max_tokens: int = 0
    """The output length the request asked for."""

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_times[0] - self.sent if self.chunk_times else None

    @property
    def e2e_s(self) -> float | None:
        """Send to last chunk, like ``vllm bench serve``'s latency."""
        return self.chunk_times[-1] - self.sent if self.chunk_times else None

    @property
    def tpot_s(self) -> float | None:
        ttft, e2e = self.ttft_s, self.e2e_s
        if ttft is None or e2e is None or self.output_tokens <= 1:
            return None
        return (e2e - ttft) / (self.output_tokens - 1)

    @property
    def itls_s(self) -> list[float]:
        times = self.chunk_times
        return [b - a for a, b in itertools.pairwise(times)]


@dataclass(frozen=True)
class LatencySummary:
    """p50 and p99 of TTFT, TPOT and ITL over a run, in milliseconds; None when nothing was
    observed."""

    median_ttft_ms: float | None
    p99_ttft_ms: float | None
    median_tpot_ms: float | None
    p99_tpot_ms: float | None
    median_itl_ms: float | None
    p99_itl_ms: float | None


def percentile_ms(values_s: Sequence[float], q: float) -> float | None:
    """The q-th percentile of seconds, in ms; None for an empty list."""
    if not values_s:
        return None
    return float(np.percentile(np.asarray(values_s, dtype=float), q)) * 1000.0


def summarize(timings: Sequence[RequestTiming]) -> LatencySummary:
    """Pool the requests of one run into TTFT, TPOT and ITL percentiles."""
    ttfts = [t for t in (r.ttft_s for r in timings) if t is not None]
    tpots = [t for t in (r.tpot_s for r in timings) if t is not None]
    itls = [gap for r in timings for gap in r.itls_s]
    return LatencySummary(
        median_ttft_ms=percentile_ms(ttfts, 50),
        p99_ttft_ms=percentile_ms(ttfts, 99),
        median_tpot_ms=percentile_ms(tpots, 50),
        p99_tpot_ms=percentile_ms(tpots, 99),
        median_itl_ms=percentile_ms(itls, 50),
        p99_itl_ms=percentile_ms(itls, 99),
    )


def request_latencies_ms(
    timings: Sequence[RequestTiming],
) -> tuple[tuple[float | None, float | None], ...]:
    """Per request (TTFT, TPOT) in ms, as ``vllm bench serve`` judges goodput: TPOT is 0 for a
    one-token reply, both are None for a request that streamed nothing (it did not complete)."""
    out: list[tuple[float | None, float | None]] = []
    for t in timings:
        ttft = t.ttft_s
        if ttft is None:
            out.append((None, None))
            continue
        tpot = t.tpot_s
        out.append((ttft * 1000.0, 0.0 if tpot is None else tpot * 1000.0))
    return tuple(out)
