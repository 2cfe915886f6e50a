"""`make bench-stress`: the search strategies on landscapes nobody tuned them on.

Draws ``--count`` random landscapes from bench/make_synthetic.py's building blocks (the cited
acceptance curves, the assumed step-cost model): a random subset of drafters, random N ranges,
concurrency levels, workloads, cost parameters (each scaled by a random factor in [1/3, 3]),
engine-start and noise levels, each from its own seed. They are written to a temporary directory
and never committed: they exist to catch a strategy fitted to the repository's own landscapes.
Prints one row per landscape (model, tpe and grid: engine-seconds to target / grid, and final
regret) and a summary line per strategy.

Usage: .venv/bin/python bench/stress.py [--count 12] [--seeds 2] [--strategy model ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from autotune.bench.search import grid_and_oracle, run_bench, summarize

HERE = Path(__file__).resolve().parent


def _synthetic():
    spec = importlib.util.spec_from_file_location("make_synthetic", HERE / "make_synthetic.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def random_landscape(seed: int):  # -> make_synthetic.Landscape
    """One random landscape; every choice comes from ``seed``."""
    ms = _synthetic()
    rng = np.random.default_rng(1000 + seed)
    pool = [
        ("mtp", None, False, ms.QWEN27_MTP),
        ("dflash", "z-lab/Qwen3.5-27B-DFlash", True, ms.QWEN27_DFLASH),
        ("mtp", None, False, ms.QWEN35_MTP),
        ("dflash", "z-lab/Qwen3.5-35B-A3B-DFlash", True, ms.QWEN35_DFLASH),
        ("eagle3", "RedHatAI/eagle3", False, ms.MAVERICK_EAGLE3),
    ]
    picks = rng.choice(len(pool), size=int(rng.integers(1, 4)), replace=False)
    drafters, methods = [], set()
    # Workloads every picked drafter has a curve for; acceptance keyed by a neutral name.
    for i in sorted(int(p) for p in picks):
        method, draft, parallel, curves = pool[i]
        if method in methods:
            continue
        methods.add(method)
        names = sorted(curves)
        n_max = int(rng.choice([3, 4, 5, 7, 8, 10, 15]))
        acc = {
            f"w{j}": curves[names[j % len(names)]][: min(n_max, len(curves[names[0]]))]
            for j in range(2)
        }
        start = float(rng.uniform(30, 900))
        drafters.append(ms.Drafter(method, draft, parallel, acc, engine_start_s=start))
    levels = sorted({int(c) for c in rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256], 4)})
    workloads = ("w0", "w1")[: int(rng.integers(1, 3))]
    base = ms.LANDSCAPES[int(rng.integers(0, len(ms.LANDSCAPES)))].cost
    scale = {
        f.name: float(np.exp(rng.uniform(-math.log(3), math.log(3))))
        for f in dataclasses.fields(base)
        if f.name not in ("dense_share", "experts", "experts_per_token")
    }
    cost = dataclasses.replace(base, **{k: getattr(base, k) * v for k, v in scale.items()})
    noise = float(rng.choice([0.25, 0.5, 1.0, 2.0]))
    return ms.Landscape(
        name=f"stress-{seed}",
        model="org/stress",
        shape="random (bench/stress.py)",
        sources=("see bench/make_synthetic.py",),
        acceptance_note="cited curves, reassigned to neutral workloads",
        cost_note="random scaling of a repository landscape's assumed cost",
        workloads=workloads,
        concurrency=tuple(levels),
        cost=cost,
        drafters=tuple(drafters),
        baseline_start_s=float(np.median([d.engine_start_s for d in drafters])),
        noise_pct=noise,
        seed=seed,
    ), noise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=12)
    parser.add_argument("--first", type=int, default=0, help="seed of the first landscape")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--strategy", action="append", default=None)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)  # Optuna's, once per TPE run
    strategies = args.strategy or ["model", "tpe", "grid"]
    ms = _synthetic()
    table = Table(title="random landscapes: engine-seconds to target / grid (final regret %)")
    for col in ("landscape", "configs", "levels", "tol", "oracle", *strategies):
        table.add_column(col, justify="right")
    ratios: dict[str, list[float]] = {s: [] for s in strategies}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.first, args.first + args.count):
            spec, noise = random_landscape(seed)
            path = ms.write(spec, Path(tmp))
            # The tolerance a landscape's noise allows: ~2 sigma, never below 1 %.
            tol = max(1.0, math.ceil(2 * noise))
            results = run_bench(path, strategies, args.seeds, tol)
            grid_s, oracle_s = grid_and_oracle(path)
            by = {s.strategy: s for s in summarize(results)}
            cells = []
            for s in strategies:
                r = by[s].median_to_target_ratio
                ratios[s].append(math.inf if r is None else r)
                text = "never" if r is None else f"{r:.2f}"
                cells.append(f"{text} ({by[s].worst_final_regret_pct:.1f})")
            configs = 1 + sum(min(len(a) for a in d.acceptance.values()) for d in spec.drafters)
            table.add_row(
                spec.name,
                str(configs),
                str(len(spec.workloads) * len(spec.concurrency)),
                f"{tol:g}%",
                f"{oracle_s / grid_s:.2f}",
                *cells,
            )
    Console(width=160).print(table)
    for s, values in ratios.items():
        finite = [v for v in values if math.isfinite(v)]
        med = statistics.median(values)
        print(
            f"{s}: reached on {len(finite)}/{len(values)} landscapes; median ratio "
            f"{'never' if math.isinf(med) else f'{med:.3f}'}"
        )


if __name__ == "__main__":
    main()
