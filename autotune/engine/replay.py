"""The ``replay`` backend: serves a recorded landscape as if it were engines.

Starting a config costs its recorded ``engine_start_s``; a measurement costs its recorded
``measure_s`` and returns one recorded repeat, without replacement: each config draws a cell's
recorded repeats in a seeded permutation, so k replayed repeats of a cell recorded k times are
exactly the recorded ones and show the recorded spread. A replay never serves a recorded repeat
twice (a copy would count as new evidence, narrowing intervals on nothing): a draw past a cell's
recorded repeats is an EngineError, and the search asks for none (:func:`recorded_repeats`
tells it how many there are). The draws an engine made are a function of the config's measurements
so far, which the job hands over (``resume_after``: a reopened trial's own and the config's earlier
trials'), not of the engine instance, so a restarted driver or another Ray actor draws exactly
what one uninterrupted engine would. By default no time
passes: the costs are reported, and the tuner's engine-second accounting adds them up. With
``time_scale`` the engine also sleeps for the recorded times multiplied by it (e.g. 0.001), so
several replay engines in a Ray pool overlap in wall time the way real engines would: the scale
tests and ``make bench-scale`` run on it. Nothing is invented: a config or cell the landscape did
not record fails like an engine would.

A config is (method, draft, N, knobs). A landscape without the ``params`` column recorded no
knobs, so there a config is matched by (method, draft, N) alone: the knobs it was recorded with
are the study's, which the file did not keep.
"""

from __future__ import annotations

import functools
import random
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from autotune.engine._base import (
    Engine,
    EngineConfig,
    EngineInfo,
    Measurement,
    MeasureSettings,
    PreparedWorkload,
)
from autotune.engine.readers.landscape import (
    Config,
    LandscapePoint,
    digest,
    has_params,
    read_landscape,
)
from autotune.errors import EngineError
from autotune.spec.knobs import params_key

REPLAY_DRAFTS = 1_000_000
"""A landscape records acceptance rates, not counts: replayed counters are the rates scaled to
this many drafts, so a_i and the acceptance length survive to six digits."""


MAX_TIME_SCALE = 1000.0
"""Largest ``time_scale`` (with recorded times capped by the landscape reader, every sleep
stays finite and within what ``time.sleep`` takes)."""


class ReplayEngine(Engine):
    """Answers from a landscape CSV; one engine config at a time, like a real engine."""

    def __init__(self, landscape: Path | str, seed: int = 0, time_scale: float = 0.0):
        if not 0 <= time_scale <= MAX_TIME_SCALE:  # also refuses nan
            raise ValueError(f"time_scale must lie in [0, {MAX_TIME_SCALE:g}], not {time_scale}")
        self.time_scale = time_scale
        self.path = Path(landscape)
        self.points = read_landscape(self.path)
        self.digest = digest(self.path)
        self.model = self.points[0].model
        self.seed = seed
        self._with_params = has_params(self.path)
        self._by_config: dict[Config, list[LandscapePoint]] = defaultdict(list)
        for p in self.points:
            self._by_config[p.config].append(p)
        self._current: Config | None = None
        self._key = ""
        self._drawn: Counter[tuple[str, int]] = Counter()
        """(workload, concurrency) -> the recorded repeats of the started config drawn so far
        (this engine's and those ``resume_after`` was told of)."""

    def workload_digest(self, workload: str) -> str:
        return f"landscape:{self.digest}:{workload}"

    def start(self, config: EngineConfig) -> EngineInfo:
        knobs = params_key(config.method_params) if self._with_params else ""
        key = (config.method, config.draft, config.num_speculative_tokens, knobs)
        rows = self._by_config.get(key)
        if not rows:
            with_knobs = f", knobs {knobs}" if knobs else ""
            raise EngineError(
                f"the landscape {self.path.name} has no {config.label()} "
                f"(draft {config.draft}{with_knobs})"
            )
        self._current = key
        self._key = config.key()
        self._drawn = Counter()
        start_s = statistics.median(p.engine_start_s for p in rows)
        self._sleep(start_s)
        return EngineInfo(
            engine_start_s=start_s,
            vllm_version=f"replay:{self.path.name}",
            device_name="replayed landscape",
            device_arch="replay",
            platform="replay",
        )

    def resume_after(self, measured: Sequence[Measurement]) -> None:
        for m in measured:  # the draws an uninterrupted engine made for these cells
            self._drawn[(m.workload, m.concurrency)] += 1

    def _rows(self, workload: str, concurrency: int) -> list[LandscapePoint]:
        assert self._current is not None
        rows = [
            p
            for p in self._by_config[self._current]
            if p.workload == workload and p.concurrency == concurrency
        ]
        return sorted(rows, key=lambda r: r.repeat)

    def measure(
        self,
        workload: PreparedWorkload,
        concurrency: int,
        repeat: int,
        settings: MeasureSettings,
    ) -> Measurement:
        if self._current is None:
            raise EngineError("replay engine not started")
        rows = self._rows(workload.name, concurrency)
        if not rows:
            raise EngineError(
                f"the landscape has no {workload.name} at concurrency {concurrency} for "
                f"{self._current[0]} N={self._current[2]}"
            )
        p = self._draw(workload.name, concurrency, rows)
        self._sleep(p.measure_s)
        accepted = tuple(round(a * REPLAY_DRAFTS) for a in p.acceptance_per_pos)
        drafts = REPLAY_DRAFTS if p.acceptance_per_pos else 0
        n_out = p.output_throughput_tok_s * p.measure_s
        return Measurement(
            workload=workload.name,
            workload_digest=workload.digest,
            concurrency=concurrency,
            repeat=repeat,
            seed=workload.seed,
            num_requests=0,
            num_prompt_tokens=0,
            num_output_tokens=round(n_out),
            measure_s=p.measure_s,
            output_throughput_tok_s=p.output_throughput_tok_s,
            request_throughput_req_s=0.0,
            num_drafts=drafts,
            num_draft_tokens=drafts * p.num_speculative_tokens,
            num_accepted_tokens=sum(accepted),
            accepted_per_pos=accepted,
            max_inflight=concurrency,
            p99_tpot_ms=p.p99_tpot_ms,
            p99_ttft_ms=p.p99_ttft_ms,
            p99_itl_ms=p.p99_itl_ms,
        )

    def _draw(self, workload: str, concurrency: int, rows: list[LandscapePoint]) -> LandscapePoint:
        """The next recorded repeat of the cell in the config's seeded permutation. Each
        config has its own seeded order: one shared order would give every config the same
        repeat order. Past the last recorded repeat nothing is served: a copy is no evidence."""
        k = self._drawn[(workload, concurrency)]
        if k >= len(rows):
            assert self._current is not None
            raise EngineError(
                f"the landscape {self.path.name} recorded {len(rows)} repeat(s) of "
                f"{self._current[0]} N={self._current[2]} {workload} at concurrency "
                f"{concurrency}; a replay serves each once"
            )
        self._drawn[(workload, concurrency)] = k + 1
        return _permutation(f"{self.seed}:{self._key}:{workload}:{concurrency}", rows)[-1 - k]

    def stop(self) -> None:
        self._current = None

    def _sleep(self, recorded_s: float) -> None:
        if self.time_scale > 0:
            time.sleep(recorded_s * self.time_scale)


def _permutation(seed: str, rows: Sequence[LandscapePoint]) -> list[LandscapePoint]:
    """The cell's recorded repeats in the seeded order a replay draws them (from the end)."""
    order = sorted(rows, key=lambda r: r.repeat)
    random.Random(seed).shuffle(order)
    return order


@functools.lru_cache(maxsize=16)
def _recorded(path: str, mtime_ns: int) -> tuple[bool, Mapping[tuple[Config, str, int], int]]:
    counts: Counter[tuple[Config, str, int]] = Counter()
    for p in read_landscape(Path(path)):
        counts[(p.config, p.workload, p.concurrency)] += 1
    return has_params(Path(path)), dict(counts)


def recorded_repeats(landscape: Path | str, config: EngineConfig) -> dict[tuple[str, int], int]:
    """(workload, concurrency) -> how many repeats the landscape recorded of ``config`` there
    (matched as :meth:`ReplayEngine.start` matches it): the most a replay can serve."""
    path = Path(landscape)
    with_params, counts = _recorded(str(path), path.stat().st_mtime_ns)
    knobs = params_key(config.method_params) if with_params else ""
    key = (config.method, config.draft, config.num_speculative_tokens, knobs)
    return {(w, c): n for (k, w, c), n in counts.items() if k == key}
