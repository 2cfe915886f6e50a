"""``vllm bench serve`` against a loopback :class:`~autotune.engine.server.process.Server`: the
study's prompts as the benchmark's custom dataset, its flags, the client run in this process
(``vllm.benchmarks.serve``'s own ``add_cli_args`` and ``main``) and a :class:`Measurement` read
from its result.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.engine._base import Measurement, PreparedWorkload
from autotune.engine.server.process import Server
from autotune.errors import EngineError


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
