"""The real backend: one vLLM ``AsyncLLM`` engine, measured with closed-loop streamed requests
(the load generator: :mod:`autotune.engine.vllm.load`).

The engine runs on a private asyncio event loop in a background thread owned by
:class:`VLLMEngine`, so callers (the Ray actor) use plain blocking methods. vLLM is imported
lazily, inside the methods that need it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from autotune.engine._base import (
    Engine,
    EngineConfig,
    EngineInfo,
    Measurement,
    MeasureSettings,
    PreparedWorkload,
)
from autotune.engine.degeneracy import degeneracy
from autotune.engine.platform import detect_platform
from autotune.engine.stats import RequestTiming, request_latencies_ms, summarize
from autotune.engine.vllm.args import build_engine_kwargs, render_prompts
from autotune.engine.vllm.counters import CounterDelta, CounterSnapshot, delta, read_snapshot
from autotune.engine.vllm.env import AppliedEnv
from autotune.engine.vllm.failures import one_line_reason
from autotune.engine.vllm.load import closed_loop
from autotune.engine.vllm.stderr import StderrTail
from autotune.errors import EngineError

logger = logging.getLogger(__name__)

T = TypeVar("T")

COUNTER_SETTLE_S = 2.0
"""How long to wait for vLLM's last stats record of a run to land before calling it an error."""


# --- plumbing: the event loop thread ------------------------------------------------------


class _LoopThread:
    """An asyncio event loop running in a daemon thread; blocking callers submit coroutines."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="autotune-vllm-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def close(self, timeout: float = 10.0) -> None:
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=timeout) if tasks else None

        if self.loop.is_running():
            try:
                self.run(cancel_all(), timeout=timeout + 1)
            except Exception:  # closing must not fail because a task misbehaved
                logger.debug("cancelling the engine loop's tasks failed", exc_info=True)
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()


# --- the engine -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _RunResult:
    timings: list[RequestTiming]
    measure_s: float
    max_inflight: int
    counters: CounterDelta

    @property
    def output_tokens(self) -> int:
        return sum(t.output_tokens for t in self.timings)


class VLLMEngine(Engine):
    """One vLLM engine (``AsyncLLM``) in this process, measured warm.

    Not thread-safe: one caller at a time (the Ray actor runs its methods one by one). ``start``
    applies ``config.env`` to this process's environment for the engine's lifetime (vLLM and its
    child processes read it at start) and ``stop`` restores it.
    """

    def __init__(self, *, seed: int = 0, warmup_timeout_s: float = 1800.0) -> None:
        self._seed = seed
        self._warmup_timeout_s = warmup_timeout_s
        self._engine: Any = None
        self._loop: _LoopThread | None = None
        self._stderr: StderrTail | None = None
        self._env = AppliedEnv()
        self._rendered: dict[str, list[Any]] = {}
        self._runs = 0
        self.config: EngineConfig | None = None
        self.info: EngineInfo | None = None

    # -- lifecycle --

    def start(self, config: EngineConfig) -> EngineInfo:
        if self._engine is not None:
            raise EngineError("engine already started; stop() it before starting another")
        try:
            import vllm
            from vllm.platforms import current_platform
        except ImportError as exc:
            raise EngineError(f"vllm is not importable: {exc}") from None
        try:
            kwargs = build_engine_kwargs(
                config,
                platform=_vllm_platform_name(current_platform),
                seed=self._seed,
                environ={**os.environ, **config.env},
            )
        except EngineError:
            raise
        except Exception as exc:  # e.g. building a tiny:NAME checkpoint failed
            raise EngineError(f"engine did not start: {one_line_reason(exc)}") from None
        self._env.apply(config.env)
        self._loop = _LoopThread()
        self._stderr = StderrTail()
        self._stderr.start()
        t0 = time.perf_counter()
        try:
            self._engine = self._loop.run(_create_engine(kwargs))
        except Exception as exc:
            self._stderr.release(wait_s=2.0)
            reason = one_line_reason(exc, self._stderr.lines())
            logger.warning("vLLM engine did not start: %s", reason, exc_info=exc)
            self._teardown()
            raise EngineError(f"engine did not start: {reason}") from None
        except BaseException:
            self._stderr.release()
            self._teardown()
            raise
        engine_start_s = time.perf_counter() - t0
        self._stderr.release()
        try:
            platform, device_name, device_arch = detect_platform()
        except Exception as exc:
            self.stop()
            raise EngineError(f"cannot identify the device: {one_line_reason(exc)}") from None
        self.config = config
        self.info = EngineInfo(
            engine_start_s=engine_start_s,
            vllm_version=str(vllm.__version__),
            device_name=device_name,
            device_arch=device_arch,
            platform=platform,
        )
        return self.info

    def stop(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None and self._loop is not None:
            try:
                self._loop.run(_shutdown_engine(engine), timeout=120)
            except Exception:
                logger.warning("vLLM engine shutdown failed", exc_info=True)
        # Dropping the last reference runs AsyncLLM.__del__ now, while the interpreter is whole.
        del engine
        self._teardown()

    def _teardown(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        self._engine = None
        self._rendered.clear()
        self.config = None
        self._env.restore()

    # -- measuring --

    def warmup(self, workload: PreparedWorkload, num_requests: int) -> None:
        if num_requests <= 0:
            return
        self._run_sync(workload, num_requests, num_requests, workload.seed, self._warmup_timeout_s)

    def measure(
        self,
        workload: PreparedWorkload,
        concurrency: int,
        repeat: int,
        settings: MeasureSettings,
    ) -> Measurement:
        if concurrency < 1:
            raise EngineError(f"concurrency must be >= 1, got {concurrency}")
        num_requests = settings.num_requests(workload, concurrency)
        seed = workload.seed + repeat
        run = self._run_sync(
            workload, concurrency, num_requests, seed, settings.timeout_s, settings.min_measure_s
        )
        latency = summarize(run.timings)
        guard = degeneracy([(t.token_ids, t.max_tokens) for t in run.timings])
        out_tokens = run.output_tokens
        # With min_measure_s the loop may run more requests than asked for: count what ran.
        num_requests = len(run.timings)
        return Measurement(
            workload=workload.name,
            workload_digest=workload.digest,
            concurrency=concurrency,
            repeat=repeat,
            seed=seed,
            num_requests=num_requests,
            num_prompt_tokens=sum(t.prompt_tokens for t in run.timings),
            num_output_tokens=out_tokens,
            measure_s=run.measure_s,
            output_throughput_tok_s=out_tokens / run.measure_s,
            request_throughput_req_s=num_requests / run.measure_s,
            median_ttft_ms=latency.median_ttft_ms,
            p99_ttft_ms=latency.p99_ttft_ms,
            median_tpot_ms=latency.median_tpot_ms,
            p99_tpot_ms=latency.p99_tpot_ms,
            median_itl_ms=latency.median_itl_ms,
            p99_itl_ms=latency.p99_itl_ms,
            num_drafts=run.counters.num_drafts,
            num_draft_tokens=run.counters.num_draft_tokens,
            num_accepted_tokens=run.counters.num_accepted_tokens,
            accepted_per_pos=run.counters.accepted_per_pos,
            max_inflight=run.max_inflight,
            request_latencies_ms=request_latencies_ms(run.timings),
            loop_share=guard.loop_share,
            distinct_4gram_ratio=guard.distinct_4gram_ratio,
            loop_at_max_tokens_share=guard.loop_at_max_tokens_share,
        )

    def _run_sync(
        self,
        workload: PreparedWorkload,
        concurrency: int,
        num_requests: int,
        seed: int,
        timeout_s: float,
        min_measure_s: float = 0.0,
    ) -> _RunResult:
        if self._engine is None or self._loop is None:
            raise EngineError("engine is not started")
        if not workload.prompts:
            raise EngineError(f"workload {workload.name} has no prompts")
        self._runs += 1
        coro = self._run(
            workload, concurrency, num_requests, seed, timeout_s, f"at{self._runs}", min_measure_s
        )
        try:
            # The timeout lives inside the loop (it cancels and aborts the requests); this outer
            # one only guards against a loop blocked in a synchronous call.
            return self._loop.run(coro, timeout=timeout_s + 60)
        except EngineError:
            raise
        except (TimeoutError, concurrent.futures.TimeoutError):
            raise EngineError(f"measurement did not finish within {timeout_s:g} s") from None
        except Exception as exc:
            raise EngineError(f"measurement failed: {one_line_reason(exc)}") from None

    async def _run(
        self,
        workload: PreparedWorkload,
        concurrency: int,
        num_requests: int,
        seed: int,
        timeout_s: float,
        tag: str,
        min_measure_s: float = 0.0,
    ) -> _RunResult:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        prompts = self._render(workload)
        params: dict[int, Any] = {}

        def request(i: int) -> tuple[str, Any, Any]:
            # Request i cycles the prompts: past num_requests (min_measure_s) the loop goes on
            # with the same prompts in the same order.
            index = i % len(prompts)
            max_tokens = workload.prompts[index].max_tokens
            if max_tokens not in params:
                params[max_tokens] = SamplingParams(
                    temperature=workload.temperature,
                    max_tokens=max_tokens,
                    ignore_eos=True,
                    seed=seed,
                    output_kind=RequestOutputKind.DELTA,
                )
            return (f"{tag}-{i}", prompts[index], params[max_tokens])

        before = read_snapshot()
        try:
            timings, measure_s, max_inflight = await asyncio.wait_for(
                closed_loop(self._engine, request, num_requests, concurrency, min_measure_s),
                timeout_s,
            )
        except asyncio.TimeoutError:
            raise EngineError(
                f"measurement did not finish within {timeout_s:g} s "
                f"({workload.name}, concurrency {concurrency}, {num_requests} requests)"
            ) from None
        output_tokens = sum(t.output_tokens for t in timings)
        counters = await _settled_delta(before, output_tokens)
        asked = sum(workload.prompts[i % len(prompts)].max_tokens for i in range(len(timings)))
        if output_tokens < asked:
            # ignore_eos is set, so only the context length (max_model_len) stops a request early.
            logger.warning(
                "%s: %d of %d output tokens asked for were generated (max_model_len reached?)",
                workload.name,
                output_tokens,
                asked,
            )
        return _RunResult(timings, measure_s, max_inflight, counters)

    def _render(self, workload: PreparedWorkload) -> list[Any]:
        """The prompts as sent: chat-templated token ids when the workload asks for the
        template and the tokenizer has one, else the raw text (vLLM tokenizes it)."""
        if workload.digest in self._rendered:
            return self._rendered[workload.digest]
        tokenizer = self._engine.get_tokenizer() if workload.chat_template else None
        rendered = render_prompts(tokenizer, workload)
        self._rendered[workload.digest] = rendered
        return rendered


def _vllm_platform_name(current_platform: Any) -> str:
    if current_platform.is_rocm():
        return "rocm"
    if current_platform.is_cuda():
        return "cuda"
    if current_platform.is_cpu():
        return "cpu"
    return str(getattr(current_platform, "device_type", "unknown"))


async def _create_engine(kwargs: dict[str, Any]) -> Any:
    # Built inside the loop so AsyncLLM binds its output handler to this loop.
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))


async def _shutdown_engine(engine: Any) -> None:
    engine.shutdown()


async def _settled_delta(before: CounterSnapshot, output_tokens: int) -> CounterDelta:
    """The counter delta of a run, once vLLM's stats for its last step are recorded.

    vLLM records an engine step's stats in the same output-handler pass that delivers its tokens,
    so they are normally in place when the last request returns. The check that
    ``vllm:generation_tokens`` moved by exactly the tokens streamed proves it (no other requests
    run on this engine), and covers a pass split into chunks (``VLLM_V1_OUTPUT_PROC_CHUNK_SIZE``).
    """
    deadline = time.monotonic() + COUNTER_SETTLE_S
    while True:
        try:
            counters = delta(before, read_snapshot())
        except ValueError as exc:
            raise EngineError(f"spec-decode counters unusable: {exc}") from None
        if counters.generation_tokens == output_tokens:
            return counters
        if counters.generation_tokens > output_tokens or time.monotonic() > deadline:
            raise EngineError(
                f"counters out of step: vllm:generation_tokens moved by "
                f"{counters.generation_tokens}, but {output_tokens} tokens were streamed"
            )
        await asyncio.sleep(0.02)
