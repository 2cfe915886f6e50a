"""The done-when table of issue #31 on bench/stress.py's ``low-c-noise`` family (vllm#53436's
run-to-run noise: CV 10 % at c=1, 20 % at c=2, 7.5 % at c=4, 0.5 % from c=8; 10 recorded
repeats a cell): per landscape seed, strategy, study repeats and bench seed, each level's final
answer under the margin rule (:func:`autotune.bench.search.final_answers`) as its shortfall from
the level's true best, in percent, marked ``u`` where the answer says *undecided* and ``t``
where it is a tie. A level meets the bar when its shortfall is within 8 % or it says undecided.

Usage: .venv/bin/python bench/noise_table.py [--members 3] [--seeds 1] [--repeats 10 --repeats 3]
       [--strategy model --strategy grid]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import warnings
from pathlib import Path

from rich.console import Console
from rich.table import Table

from autotune.bench.search import final_answers

HERE = Path(__file__).resolve().parent
BAR_PCT = 8.0
"""The issue's bar: within 8 % of the level's best, or the answer says undecided."""


def _stress():
    spec = importlib.util.spec_from_file_location("stress", HERE / "stress.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=3, help="landscape seeds of the family")
    parser.add_argument("--seeds", type=int, default=1, help="bench seeds per landscape")
    parser.add_argument("--repeats", type=int, action="append", default=None)
    parser.add_argument("--strategy", action="append", default=None)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)
    stress = _stress()
    ms = stress._synthetic()
    strategies = args.strategy or ["model", "grid"]
    repeats = args.repeats or [stress.LOW_C_NOISE_REPEATS]
    table: Table | None = None
    missed = total = undecided = missed_before = 0
    worst = worst_before = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for member in range(args.members):
            spec, _ = stress.family_landscape("low-c-noise", member)
            path = ms.write(stress._with_block_configs(spec, Path(tmp)), Path(tmp))
            for strategy in strategies:
                for r in repeats:
                    for seed in range(args.seeds):
                        answers = final_answers(path, strategy, seed, r)
                        if table is None:
                            table = Table(
                                title="low-c-noise: shortfall from each level's best, % "
                                "(u: undecided, t: tie; * misses the bar)"
                            )
                            for col in ("landscape", "strategy", "repeats", "seed"):
                                table.add_column(col)
                            for a in answers:
                                table.add_column(f"{a.workload} c={a.concurrency}", justify="right")
                        cells = []
                        for a in answers:
                            ok = a.shortfall_pct <= BAR_PCT or a.verdict == "undecided"
                            missed += not ok
                            total += 1
                            undecided += a.verdict == "undecided"
                            worst = max(worst, a.shortfall_pct if a.verdict != "undecided" else 0)
                            worst_before = max(worst_before, a.chosen_shortfall_pct)
                            missed_before += a.chosen_shortfall_pct > BAR_PCT
                            mark = {"undecided": "u", "tie": "t"}.get(a.verdict, "")
                            cells.append(f"{a.shortfall_pct:.1f}{mark}{'' if ok else '*'}")
                        row = (spec.name, strategy, str(r), str(seed), *cells)
                        print(" | ".join(row), file=sys.stderr, flush=True)
                        table.add_row(*row)
    if table is not None:
        Console(width=200).print(table)
    print(
        f"{total - missed}/{total} levels within {BAR_PCT:g} % of the best or undecided; "
        f"{undecided} undecided; worst shortfall of a decided or tied answer {worst:.1f} %"
    )
    print(
        f"today's choosing rule (autotune.recommend.choose) on the same measurements: "
        f"{missed_before}/{total} levels more than {BAR_PCT:g} % short, worst {worst_before:.1f} %"
    )


if __name__ == "__main__":
    main()
