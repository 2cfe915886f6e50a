"""The plain records the performance model takes (:class:`Point`) and gives (:class:`Prediction`).

Both are frozen dataclasses, so the tuner can build points from the store or from a landscape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotune.spec.methods import BASELINE


@dataclass(frozen=True)
class Point:
    """One measured (method, N, concurrency) cell of one workload: one repeat or a robust center.

    The baseline is ``method="none"`` (:data:`autotune.spec.methods.BASELINE`) with
    ``num_speculative_tokens=0`` and no acceptance.
    """

    method: str
    num_speculative_tokens: int
    concurrency: int
    output_throughput_tok_s: float
    acceptance_per_pos: tuple[float, ...] = ()
    """a_i = accepted at position i / num_drafts, one per position (N values); empty for the
    baseline or when the run made no drafts."""
    num_repeats: int = 1
    """How many repeats the throughput summarizes; also the point's weight when pooling."""
    spread: float = 0.0
    """Relative spread of the repeats' throughput, (max - min) / median (the measure of the
    study's ``max_spread_pct``); 0 when unknown or for a single repeat."""

    def __post_init__(self) -> None:
        n = self.num_speculative_tokens
        acc = tuple(float(a) for a in self.acceptance_per_pos)
        object.__setattr__(self, "acceptance_per_pos", acc)
        where = f"{self.method} N={n} c={self.concurrency}"
        if (self.method == BASELINE) != (n == 0):
            raise ValueError(f"{where}: N = 0 means the baseline, whose method is {BASELINE!r}")
        if n < 0:
            raise ValueError(f"{where}: num_speculative_tokens must be >= 0")
        if self.concurrency < 1:
            raise ValueError(f"{where}: concurrency must be >= 1")
        tput = self.output_throughput_tok_s
        if not (math.isfinite(tput) and tput > 0):
            raise ValueError(f"{where}: output_throughput_tok_s must be > 0, got {tput}")
        if acc and len(acc) != n:
            raise ValueError(f"{where}: {len(acc)} acceptance positions for N={n}")
        if any(not (0.0 <= a <= 1.0) for a in acc):
            raise ValueError(f"{where}: acceptance_per_pos values must lie in [0, 1]")
        if self.num_repeats < 1:
            raise ValueError(f"{where}: num_repeats must be >= 1")
        if not (math.isfinite(self.spread) and self.spread >= 0):
            raise ValueError(f"{where}: spread must be >= 0, got {self.spread}")

    @property
    def is_baseline(self) -> bool:
        return self.method == BASELINE


@dataclass(frozen=True)
class Prediction:
    """Predicted (or measured) output throughput of one (method, N, concurrency) cell.

    ``low``/``high`` bound the throughput: for a measured cell the repeats' spread, otherwise
    every value the measured points and the model's assumptions allow (see ``autotune.perf``).
    An unknown cell (nothing to predict from) has a NaN center, ``low = 0`` and ``high = inf``.
    """

    throughput_tok_s: float
    low: float
    high: float
    speedup_vs_baseline: float | None
    """throughput_tok_s / the measured baseline at the same concurrency; None without one."""
    measured: bool
    mean_acceptance_length: float | None = None
    """1 + E(N) used for this cell (vLLM's convention); None for the baseline or when unknown."""

    @property
    def known(self) -> bool:
        return math.isfinite(self.throughput_tok_s)


UNKNOWN = Prediction(math.nan, 0.0, math.inf, None, measured=False)
"""The prediction for a cell the model has no information about."""
