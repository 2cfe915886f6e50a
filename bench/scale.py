"""`make bench-scale`: does wall time fall with the number of engine slots?

Replays a landscape through the real tuner loop, store and Ray pool (``RayPool`` with the replay
engine) on a local Ray cluster with 1, 2, 4 and 8 *logical* GPUs. Each replay engine sleeps for
its recorded ``engine_start_s`` and ``measure_s`` times ``--time-scale`` (default 1/100), so
engines on different slots overlap in wall time the way real engines do, and no vLLM is needed.
Prints one row per slot count: wall time of the study, engine starts, engine-seconds (recorded,
unscaled), the busy fraction of the slots (scaled engine time / (slots x wall)) and the most
engines seen running at once (from the engine windows stored with the trials); the last line is
``scale: 8 slots vs 1: wall ratio R, busy B%``.

Usage: .venv/bin/python bench/scale.py [--landscape FILE] [--slots 1 2 4 8] [--tp 1]
       [--time-scale 0.01] [--sampler model]
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
    slots: int
    wall_s: float
    engine_starts: int
    failed: int
    engine_seconds: float
    busy: float
    peak_engines: int
    devices: int


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
    landscape: Path, slots: int, tp: int, time_scale: float, sampler: str, workdir: Path
) -> ScaleRow:
    import ray

    store = Store(f"sqlite:///{workdir / f'scale-{slots}.db'}")
    data = study_from_landscape(landscape, f"scale-{slots}", sampler=sampler)
    data["model"]["tensor_parallel_size"] = tp
    api.create_study(store, data=data, source=str(landscape))
    # The cluster is started before the clock: its start-up is not the study's wall time.
    ray.init(address="local", num_gpus=slots * tp, include_dashboard=False, log_to_driver=False)
    try:
        t0 = time.perf_counter()
        summary = api.run_study(
            store, f"scale-{slots}", num_gpus=slots * tp, replay_time_scale=time_scale
        )
        wall = time.perf_counter() - t0
    finally:
        ray.shutdown()
    trials = store.trials(store.get_study(f"scale-{slots}"))
    busy = summary.engine_seconds * time_scale / (slots * wall)
    devices = {d for t in trials for d in (t.device_ids or "").split(",") if d}
    return ScaleRow(
        slots=slots,
        wall_s=wall,
        engine_starts=len(trials),
        failed=summary.trials_failed,
        engine_seconds=summary.engine_seconds,
        busy=busy,
        peak_engines=peak_overlap(trials),
        devices=len(devices),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landscape", type=Path, default=DEFAULT_LANDSCAPE)
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--tp", type=int, default=1, help="tensor_parallel_size of every engine")
    parser.add_argument("--time-scale", type=float, default=0.01)
    parser.add_argument("--sampler", default="model")
    args = parser.parse_args(argv)

    rows: list[ScaleRow] = []
    print(
        f"bench-scale: {args.landscape.name}, sampler {args.sampler}, TP {args.tp}, "
        f"engine times x {args.time_scale:g}, logical GPUs = slots x TP",
        flush=True,
    )
    header = (
        f"{'slots':>5}  {'wall s':>7}  {'starts':>6}  {'failed':>6}  {'engine-s':>9}  "
        f"{'busy %':>6}  {'peak engines':>12}  {'devices used':>12}"
    )
    print(header, flush=True)
    with tempfile.TemporaryDirectory(prefix="autotune-scale-") as tmp:
        for slots in args.slots:
            row = run_once(args.landscape, slots, args.tp, args.time_scale, args.sampler, Path(tmp))
            rows.append(row)
            print(
                f"{row.slots:>5}  {row.wall_s:>7.1f}  {row.engine_starts:>6}  {row.failed:>6}  "
                f"{row.engine_seconds:>9,.0f}  {100 * row.busy:>6.1f}  {row.peak_engines:>12}  "
                f"{row.devices:>12}",
                flush=True,
            )
    one = next((r for r in rows if r.slots == 1), None)
    top = max(rows, key=lambda r: r.slots)
    if one is None or top is one:
        print("scale: need 1 slot and more to compare", flush=True)
        return 0
    extra = 100 * (top.engine_seconds / one.engine_seconds - 1)
    print(
        f"engine-seconds {top.slots} slots vs 1: {extra:+.0f}%",
        flush=True,
    )
    print(
        f"scale: {top.slots} slots vs 1: wall ratio {top.wall_s / one.wall_s:.2f}, "
        f"busy {100 * top.busy:.0f}%",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
