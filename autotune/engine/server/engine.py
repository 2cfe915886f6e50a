"""The server-path engine backend (``engine: {kind: vllm, client: server}``): each config is one
``vllm serve`` on loopback (:mod:`autotune.engine.server.process`), each measurement one
``vllm bench serve`` run against it (:mod:`autotune.engine.server.bench`).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from autotune.engine._base import (
    Engine,
    EngineConfig,
    EngineInfo,
    Measurement,
    MeasureSettings,
    PreparedWorkload,
)
from autotune.engine.server.bench import (
    bench_argv,
    measurement_from_bench,
    prerendered,
    requests_file,
    run_bench,
)
from autotune.engine.server.process import Server, engine_kwargs
from autotune.errors import EngineError


class VLLMServeEngine(Engine):
    """Measures through vLLM's own server and benchmark client, as a user checks a setting:
    ``vllm serve`` (loopback, its own process group) started with exactly the engine args the
    in-process harness would use, and ``vllm bench serve`` with the workload's prompts and output
    lengths at ``--max-concurrency`` = the level. Slower to start (the API server too) and, on a
    small machine, the HTTP path costs throughput; the numbers are those ``vllm bench serve``
    prints. Selected by ``engine: {kind: vllm, client: server}`` in a study.
    """

    def __init__(self, *, seed: int = 0, start_timeout_s: float = 3600.0, workdir: str = ""):
        self._seed = seed
        self._start_timeout_s = start_timeout_s
        self._workdir = Path(workdir) if workdir else None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._server: Server | None = None
        self._datasets: dict[tuple[str, int], Path] = {}
        self.config: EngineConfig | None = None

    def _dir(self) -> Path:
        if self._workdir is not None:
            self._workdir.mkdir(parents=True, exist_ok=True)
            return self._workdir
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="autotune-serve-")
        return Path(self._tmp.name)

    def start(self, config: EngineConfig) -> EngineInfo:
        if self._server is not None:
            raise EngineError("engine already started; stop() it before starting another")
        try:
            import vllm
        except ImportError as exc:
            raise EngineError(f"vllm is not importable: {exc}") from None
        from autotune.engine.platform import detect_platform

        try:
            kwargs = engine_kwargs(config, self._seed)
        except EngineError:
            raise
        except Exception as exc:
            from autotune.engine.vllm.failures import one_line_reason

            raise EngineError(f"engine did not start: {one_line_reason(exc)}") from None
        server = Server(
            kwargs,
            log=self._dir() / f"server-{config.key()}.log",
            start_timeout_s=self._start_timeout_s,
            env=config.env,
        )
        t0 = time.perf_counter()
        try:
            server.__enter__()
        except EngineError as exc:
            raise EngineError(f"engine did not start: {exc}") from None
        self._server = server
        self.config = config
        platform, device_name, device_arch = detect_platform()
        return EngineInfo(
            engine_start_s=time.perf_counter() - t0,
            vllm_version=str(vllm.__version__),
            device_name=device_name,
            device_arch=device_arch,
            platform=platform,
        )

    def _bench(
        self, workload: PreparedWorkload, concurrency: int, num_requests: int, seed: int
    ) -> dict[str, Any]:
        if self._server is None:
            raise EngineError("engine is not started")
        if not workload.prompts:
            raise EngineError(f"workload {workload.name} has no prompts")
        key = (workload.digest, num_requests)
        rendered = prerendered(workload)
        if key not in self._datasets:
            tokenizer = None
            if rendered:
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(self._server.model)
            self._datasets[key] = requests_file(workload, num_requests, self._dir(), tokenizer)
        argv = bench_argv(
            self._server,
            self._datasets[key],
            concurrency=concurrency,
            num_requests=num_requests,
            temperature=workload.temperature,
            seed=seed,
            warmups=0,
            chat_template=workload.chat_template and not rendered,
        )
        return run_bench(argv)

    def warmup(self, workload: PreparedWorkload, num_requests: int) -> None:
        if num_requests > 0:
            self._bench(workload, num_requests, num_requests, workload.seed)

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
        result = self._bench(workload, concurrency, num_requests, seed)
        return measurement_from_bench(
            result,
            workload,
            concurrency=concurrency,
            repeat=repeat,
            seed=seed,
            num_requests=num_requests,
        )

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self.config = None
        self._datasets.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
