"""The verification's use of ``vllm serve`` and ``vllm bench serve``: the plumbing lives in
:mod:`autotune.engine.server` (the server-path engine backend uses it too); this adds the
per-run summary the verification compares and its scratch folder."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from autotune.engine.server.bench import bench_argv, requests_file, run_bench
from autotune.engine.server.process import Server, engine_kwargs, free_port, server_argv
from autotune.verify.compare import ServerRun, parse_bench_result

__all__ = [
    "Server",
    "bench_argv",
    "bench_serve",
    "engine_kwargs",
    "free_port",
    "requests_file",
    "scratch_dir",
    "server_argv",
]


def bench_serve(argv: Sequence[str], concurrency: int) -> ServerRun:
    """Run vLLM's benchmark client in this process; its printout goes to stderr."""
    return parse_bench_result(run_bench(argv), concurrency)


@contextlib.contextmanager
def scratch_dir(keep: Path | None = None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="autotune-verify-") as d:
        yield Path(d)
