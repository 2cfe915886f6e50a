"""`make bench-fidelity`: how close autotune's in-process harness is to vLLM's own benchmark.

One engine config and the baseline, each measured two ways on the same prompts and output
lengths (the workload as a study prepares it, EOS ignored, greedy):

* autotune's harness: a ``VLLMEngine`` (``AsyncLLM`` in this process), closed loop with exactly
  C requests in flight, token counts from the stream, acceptance from vLLM's counters;
* ``vllm bench serve`` (through ``vllm.benchmarks.serve``'s own parser and ``main``) against
  ``vllm serve`` on loopback started with the same engine args (``autotune.verify.server``).

Both engines are up at once and the runs interleave (harness, server, harness, ...) per level,
``--repeats`` times, so drift in the machine's load hits both alike. Prints per config and level
the median tok/s of each path, their ratio (server / harness), the acceptance lengths and their
ratio, and the speedup over the baseline each path sees.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny", help="catalog alias or HF id [tiny]")
    p.add_argument("--workload", default="code")
    p.add_argument(
        "--config",
        default='{"method": "ngram", "num_speculative_tokens": 2, '
        '"prompt_lookup_min": 2, "prompt_lookup_max": 4}',
        help="the speculative config compared with the baseline (JSON)",
    )
    p.add_argument("--concurrency", default="1,4", help="comma-separated levels [1,4]")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-prompts", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--requests-per-concurrency", type=int, default=4)
    p.add_argument("--warmup-requests", type=int, default=2)
    p.add_argument("--json", dest="json_path", type=Path, help="also write the runs as JSON")
    args = p.parse_args(argv)
    # vLLM logs to stdout by default; keep stdout for the table (read when vLLM is imported).
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")

    from autotune.engine._base import EngineConfig, MeasureSettings
    from autotune.engine.resolution import engine_facts
    from autotune.engine.vllm.engine import VLLMEngine
    from autotune.spec.loader import resolve_study, validate
    from autotune.spec.study import StudySpec
    from autotune.verify.run import prepare_study_workload
    from autotune.verify.server import (
        Server,
        bench_argv,
        bench_serve,
        engine_kwargs,
        requests_file,
    )

    spec = json.loads(args.config)
    levels = [int(c) for c in args.concurrency.split(",")]
    study = validate(
        StudySpec,
        {
            "name": "fidelity",
            "model": {"name": args.model},
            "workloads": [args.workload],
            "concurrency": levels,
            "measurement": {"max_prompts": args.max_prompts, "max_tokens": args.max_tokens},
        },
        "bench/fidelity.py",
    )
    resolved = resolve_study(study, "bench/fidelity.py", engine=engine_facts())
    workload = prepare_study_workload(resolved, args.workload)
    settings = MeasureSettings(requests_per_concurrency=args.requests_per_concurrency)
    params = {k: v for k, v in spec.items() if k not in ("method", "num_speculative_tokens")}
    configs = {
        "baseline": EngineConfig(model=resolved.model, engine_args=resolved.engine_args),
        f"{spec['method']} N={spec['num_speculative_tokens']}": EngineConfig(
            model=resolved.model,
            method=spec["method"],
            num_speculative_tokens=spec["num_speculative_tokens"],
            draft=params.pop("model", None),
            method_params=params,
            engine_args=resolved.engine_args,
        ),
    }
    runs: dict[str, dict[int, dict[str, list[tuple[float, float | None]]]]] = {}
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="autotune-fidelity-") as tmp:
        work = Path(tmp)
        for label, config in configs.items():
            harness = VLLMEngine(seed=resolved.spec.seed)
            harness.start(config)
            try:
                with Server(
                    engine_kwargs(config, resolved.spec.seed), log=work / "server.log"
                ) as srv:
                    print(f"{label}: {srv.command()}", file=sys.stderr)
                    harness.warmup(workload, args.warmup_requests)
                    for r in range(args.repeats):
                        for c in levels:
                            m = harness.measure(workload, c, r, settings)
                            n = settings.num_requests(workload, c)
                            data = requests_file(workload, n, work)
                            s = bench_serve(
                                bench_argv(
                                    srv, data, concurrency=c, num_requests=n,
                                    temperature=workload.temperature, seed=workload.seed + r,
                                    warmups=args.warmup_requests if r == 0 else 0,
                                    chat_template=workload.chat_template,
                                ),
                                c,
                            )  # fmt: skip
                            cell = runs.setdefault(label, {}).setdefault(c, {})
                            cell.setdefault("harness", []).append(
                                (m.output_throughput_tok_s, m.mean_acceptance_length)
                            )
                            cell.setdefault("server", []).append(
                                (s.output_tok_s, s.acceptance_length)
                            )
                            print(
                                f"{label} c={c} repeat {r}: harness "
                                f"{m.output_throughput_tok_s:.1f} tok/s, server "
                                f"{s.output_tok_s:.1f} tok/s",
                                file=sys.stderr,
                            )
            finally:
                harness.stop()
    print(render(runs, levels, time.time() - t0, args.repeats))
    if args.json_path:
        args.json_path.write_text(json.dumps(runs, indent=2))
    return 0


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def render(
    runs: dict[str, dict[int, dict[str, list[tuple[float, float | None]]]]],
    levels: list[int],
    seconds: float,
    repeats: int,
) -> str:
    labels = list(runs)
    base = labels[0]
    lines = [
        f"harness vs vllm bench serve → vllm serve: medians of {repeats} interleaved repeats "
        f"({seconds:.0f} s)",
        f"{'config':<12} {'conc':>4} {'harness tok/s':>13} {'server tok/s':>12} "
        f"{'tok/s ratio':>11} {'harness AL':>10} {'server AL':>9} {'AL ratio':>8} "
        f"{'harness x':>9} {'server x':>8}",
    ]
    for label in labels:
        for c in levels:
            h = _median([t for t, _ in runs[label][c]["harness"]])
            s = _median([t for t, _ in runs[label][c]["server"]])
            h_al = _median([a for _, a in runs[label][c]["harness"]])
            s_al = _median([a for _, a in runs[label][c]["server"]])
            hb = _median([t for t, _ in runs[base][c]["harness"]])
            sb = _median([t for t, _ in runs[base][c]["server"]])
            lines.append(
                f"{label:<12} {c:>4} {_fmt(h, '.1f'):>13} {_fmt(s, '.1f'):>12} "
                f"{_fmt(s / h if s and h else None, '.3f'):>11} {_fmt(h_al, '.2f'):>10} "
                f"{_fmt(s_al, '.2f'):>9} "
                f"{_fmt(s_al / h_al if s_al and h_al else None, '.3f'):>8} "
                f"{_fmt(h / hb if h and hb else None, '.2f'):>9} "
                f"{_fmt(s / sb if s and sb else None, '.2f'):>8}"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
