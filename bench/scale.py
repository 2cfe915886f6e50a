"""`make bench-scale`: does wall time fall with the number of engine slots, for the model search
and the grid, side by side?

Replays a landscape through the real tuner loop and store with 1, 2, 4 and 8 engine slots, once
with each ``--sampler`` (default: ``model`` and ``grid``), all at one ``--time-scale``. Two
clocks:

- ``--clock ray`` (the default): the Ray pool (``RayPool`` with the replay engine) on a local
  Ray cluster with N *logical* GPUs; each replay engine sleeps for its recorded
  ``engine_start_s`` and ``measure_s`` times ``--time-scale`` (default 1/100), so engines on
  different slots overlap in wall time the way real engines do, and no vLLM is needed. Its wall
  times need a quiet machine.
- ``--clock virtual``: ``autotune.cluster.virtual.VirtualPool``, nothing sleeps; the wall time is
  the virtual clock's (recorded seconds times ``--time-scale``), the same on every run and under
  any load.

Prints one row per slot count, each sampler's columns beside the other's: wall time of the
study, engine starts (``cancelled`` ones, stopped early once the evidence ruled them out, in
brackets), engine-seconds (recorded, unscaled), the busy fraction of the slots (scaled engine
time / (slots x wall)) and the most engines seen running at once; then, per slot count above 1,
``model vs grid: wall W, engine-seconds E``.

Usage: .venv/bin/python bench/scale.py [--landscape FILE] [--slots 1 2 4 8] [--tp 1]
       [--time-scale 0.01] [--sampler model grid] [--clock ray|virtual]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from autotune import api
from autotune.search.landscape_study import study_from_landscape
from autotune.store import Store, TrialRecord

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LANDSCAPE = ROOT / "bench" / "landscapes" / "synthetic-qwen27b-dense.csv"


@dataclass(frozen=True)
class ScaleRow:
    sampler: str
    slots: int
    wall_s: float
    engine_starts: int
    cancelled: int
    failed: int
    engine_seconds: float
    busy: float
    peak_engines: int


def peak_overlap(trials: list[TrialRecord]) -> int:
    """The most engines whose windows (engine start .. trial end) overlapped."""
    edges: list[tuple[float, int]] = []
    for t in trials:
        if t.engine_started_at and t.finished_at:
            edges += [(t.engine_started_at, 1), (t.finished_at.timestamp(), -1)]
    peak = running = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):
        running += step
        peak = max(peak, running)
    return peak


def run_once(
    landscape: Path,
    slots: int,
    tp: int,
    time_scale: float,
    sampler: str,
    workdir: Path,
    clock: str = "ray",
) -> ScaleRow:
    name = f"scale-{sampler}-{slots}"
    store = Store(f"sqlite:///{workdir / f'{name}.db'}")
    data = study_from_landscape(landscape, name, sampler=sampler)
    data["model"]["tensor_parallel_size"] = tp
    api.create_study(store, data=data, source=str(landscape))
    if clock == "virtual":
        summary, wall, peak = _run_virtual(store, name, slots, time_scale)
    else:
        import ray

        # The cluster is started before the clock: its start-up is not the study's wall time.
        ray.init(address="local", num_gpus=slots * tp, include_dashboard=False, log_to_driver=False)
        try:
            t0 = time.perf_counter()
            summary = api.run_study(store, name, num_gpus=slots * tp, replay_time_scale=time_scale)
            wall = time.perf_counter() - t0
        finally:
            ray.shutdown()
        peak = -1
    trials = store.trials(store.get_study(name))
    store.dispose()
    busy = summary.engine_seconds * time_scale / (slots * wall) if wall > 0 else 0.0
    return ScaleRow(
        sampler=sampler,
        slots=slots,
        wall_s=wall,
        engine_starts=len(trials),
        cancelled=sum(t.state == "cancelled" for t in trials),
        failed=summary.trials_failed,
        engine_seconds=summary.engine_seconds,
        busy=busy,
        peak_engines=peak if peak >= 0 else peak_overlap(trials),
    )


def _run_virtual(
    store: Store, name: str, slots: int, time_scale: float
) -> tuple[object, float, int]:
    """The study on a :class:`VirtualPool` of ``slots``: (summary, scaled wall s, peak)."""
    from autotune.cluster.virtual import VirtualPool
    from autotune.engine.replay import ReplayEngine
    from autotune.search.tuner import Tuner
    from autotune.spec.loader import ResolvedStudy

    record = store.get_study(name)
    resolved = ResolvedStudy.from_json(record.resolved_json)
    landscape, seed = str(resolved.landscape), resolved.spec.seed
    pools: list[VirtualPool] = []

    def factory(_: ResolvedStudy) -> VirtualPool:
        pools.append(VirtualPool(slots, lambda: ReplayEngine(landscape, seed)))
        return pools[-1]

    store.ensure_optuna_schema()
    with store.lease(name):
        summary = Tuner(store, store.get_study(name), factory).run()
    return summary, pools[0].clock * time_scale, pools[0].peak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landscape", type=Path, default=DEFAULT_LANDSCAPE)
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--tp", type=int, default=1, help="tensor_parallel_size of every engine")
    parser.add_argument("--time-scale", type=float, default=0.01)
    parser.add_argument("--sampler", nargs="+", default=["model", "grid"])
    parser.add_argument("--clock", choices=["ray", "virtual"], default="ray")
    args = parser.parse_args(argv)

    print(
        f"bench-scale: {args.landscape.name}, {args.clock} clock, TP {args.tp}, "
        f"engine times x {args.time_scale:g} for every sampler, logical GPUs = slots x TP",
        flush=True,
    )
    cols = ("wall s", "starts", "engine-s", "busy %", "peak")
    width = (7, 9, 9, 6, 4)
    head = "  ".join(f"{c:>{w}}" for c, w in zip(cols, width, strict=True))
    print(f"{'':>5}  " + "  |  ".join(f"{s:^{len(head)}}" for s in args.sampler), flush=True)
    print(f"{'slots':>5}  " + "  |  ".join(head for _ in args.sampler), flush=True)
    rows: dict[tuple[str, int], ScaleRow] = {}
    with tempfile.TemporaryDirectory(prefix="autotune-scale-") as tmp:
        for slots in args.slots:
            cells = []
            for sampler in args.sampler:
                row = run_once(
                    args.landscape, slots, args.tp, args.time_scale, sampler, Path(tmp), args.clock
                )
                rows[(sampler, slots)] = row
                starts = f"{row.engine_starts}" + (f" ({row.cancelled})" if row.cancelled else "")
                cells.append(
                    f"{row.wall_s:>7.1f}  {starts:>9}  {row.engine_seconds:>9,.0f}  "
                    f"{100 * row.busy:>6.1f}  {row.peak_engines:>4}"
                )
            print(f"{slots:>5}  " + "  |  ".join(cells), flush=True)
    if "model" in args.sampler and "grid" in args.sampler:
        for slots in args.slots:
            m, g = rows[("model", slots)], rows[("grid", slots)]
            print(
                f"{slots} slots, model vs grid: wall {m.wall_s / g.wall_s:.2f}, "
                f"engine-seconds {m.engine_seconds / g.engine_seconds:.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
