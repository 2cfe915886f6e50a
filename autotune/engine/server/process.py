"""``vllm serve`` on loopback, in its own process group: the server's argv from the harness's
engine args, its start (``/health``) and its stop, and why it failed when it did. Used by the
server-path backend (:mod:`autotune.engine.server.engine`) and ``autotune verify``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.engine._base import (
    EngineConfig,
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
    from autotune.engine.vllm.args import build_engine_kwargs

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
    from autotune.engine.vllm.failures import reason_from_lines

    try:
        lines = log.read_text(errors="replace").splitlines()[-400:]
    except OSError:
        return "no log"
    return reason_from_lines(lines) or (lines[-1].strip() if lines else "no output")
