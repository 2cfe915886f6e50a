"""The load generator of the in-process engine: closed-loop streamed requests, exactly
``concurrency`` in flight, timed per request (:class:`~autotune.engine.stats.RequestTiming`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from autotune.engine.stats import RequestTiming


async def closed_loop(
    engine: Any,
    request: Callable[[int], tuple[str, Any, Any]],
    num_requests: int,
    concurrency: int,
    min_measure_s: float = 0.0,
) -> tuple[list[RequestTiming], float, int]:
    """Send requests ``request(0), request(1), ...`` with exactly ``concurrency`` in flight:
    each worker sends one, streams it to the end, then sends the next, until ``num_requests``
    were sent and, with ``min_measure_s``, that many seconds have passed since the first (a
    longer window in which decode, not the first requests' prefill, dominates). Returns
    timings, wall seconds and the peak in flight."""
    timings: list[RequestTiming] = []
    next_index = 0
    inflight = 0
    max_inflight = 0
    t0 = time.perf_counter()

    def more() -> bool:
        return next_index < num_requests or time.perf_counter() - t0 < min_measure_s

    async def worker() -> None:
        nonlocal next_index, inflight, max_inflight
        while more():
            request_id, prompt, params = request(next_index)
            next_index += 1
            inflight += 1
            max_inflight = max(max_inflight, inflight)
            sent = time.perf_counter()
            chunks: list[float] = []
            token_ids: list[int] = []
            prompt_tokens = 0
            try:
                async for out in engine.generate(prompt, params, request_id=request_id):
                    now = time.perf_counter()
                    if not prompt_tokens and out.prompt_token_ids is not None:
                        prompt_tokens = len(out.prompt_token_ids)
                    new_ids = [t for o in out.outputs for t in o.token_ids]
                    if new_ids:
                        chunks.append(now)
                        token_ids.extend(new_ids)
            finally:
                inflight -= 1
            timings.append(
                RequestTiming(
                    sent,
                    tuple(chunks),
                    len(token_ids),
                    prompt_tokens,
                    tuple(token_ids),
                    int(params.max_tokens or 0),
                )
            )

    t0 = time.perf_counter()
    tasks = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        # One failed or we were cancelled (timeout): stop the others, which aborts their requests.
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return timings, time.perf_counter() - t0, max_inflight
