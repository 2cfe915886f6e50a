"""TTFT / TPOT / ITL from per-request timings, checked against hand-computed values."""

from __future__ import annotations

import pytest

from autotune.engine.stats import LatencySummary, RequestTiming, percentile_ms, summarize

# A: 6 tokens in 4 chunks (one chunk carried 3 tokens, as under speculative decoding).
A = RequestTiming(sent=0.0, chunk_times=(0.10, 0.15, 0.25, 0.30), output_tokens=6)
# B: a single output token: a TTFT, but no TPOT and no ITL.
B = RequestTiming(sent=1.0, chunk_times=(1.20,), output_tokens=1)
# C: 2 tokens in 2 chunks.
C = RequestTiming(sent=2.0, chunk_times=(2.30, 2.32), output_tokens=2)


def test_per_request_conventions() -> None:
    assert A.ttft_s == pytest.approx(0.10)
    assert A.e2e_s == pytest.approx(0.30)
    # vLLM's TPOT: (e2e - ttft) / (output tokens - 1), not per chunk.
    assert A.tpot_s == pytest.approx(0.20 / 5)
    assert A.itls_s == pytest.approx([0.05, 0.10, 0.05])
    assert B.tpot_s is None
    assert B.itls_s == []
    assert C.tpot_s == pytest.approx(0.02)


def test_a_request_without_tokens_has_no_latencies() -> None:
    empty = RequestTiming(sent=0.0, chunk_times=(), output_tokens=0)
    assert (empty.ttft_s, empty.e2e_s, empty.tpot_s, empty.itls_s) == (None, None, None, [])


def test_summary_pools_requests_with_linear_percentiles() -> None:
    s = summarize([A, B, C])
    # TTFT [0.1, 0.2, 0.3]: median 0.2; p99 at rank 0.99 * 2 = 1.98 -> 0.2 + 0.98 * 0.1.
    assert s.median_ttft_ms == pytest.approx(200.0)
    assert s.p99_ttft_ms == pytest.approx(298.0)
    # TPOT only for requests with > 1 token: [0.04, 0.02].
    assert s.median_tpot_ms == pytest.approx(30.0)
    assert s.p99_tpot_ms == pytest.approx(39.8)
    # ITL pooled over all requests: [0.02, 0.05, 0.05, 0.10]; p99 at rank 2.97.
    assert s.median_itl_ms == pytest.approx(50.0)
    assert s.p99_itl_ms == pytest.approx(98.5)


def test_order_of_requests_does_not_matter() -> None:
    assert summarize([C, A, B]) == summarize([A, B, C])


def test_nothing_observed_gives_none_not_zero() -> None:
    assert percentile_ms([], 99) is None
    assert summarize([]) == LatencySummary(None, None, None, None, None, None)
    only_single_tokens = summarize([B])
    assert only_single_tokens.median_ttft_ms == pytest.approx(200.0)
    assert only_single_tokens.median_tpot_ms is None
    assert only_single_tokens.p99_itl_ms is None
