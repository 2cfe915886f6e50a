"""The answer at a request rate (`recommend --request-rate R`): the concurrency each config would
run at under R requests/s, by Little's law, and the config with the lowest latency there.

A closed-loop measurement at concurrency c keeps exactly c requests in flight and measures a
request throughput X(c); by Little's law its mean request latency is L(c) = c / X(c). Served an
arrival rate R in steady state, a config runs at the concurrency where c = R · L(c), i.e. where
X(c) = R. L is interpolated linearly in c between the measured levels (the median X over the
repeats at each); below the lowest level, when it is 1, a request mostly runs alone and its
latency is the one measured at 1 (c = R · L(1) < 1). A config whose solution lies outside the
measured levels is not judged (it would run where nothing was measured); a rate none can be
judged at is refused.

Every config delivers R requests/s in steady state, so what differs is latency: the answer is the
config with the lowest mean latency at R (the lowest concurrency), and configs within its noise
are not told apart by the one rule recommend judges by (:func:`autotune.evidence.decide.verdict`:
within 1 %, or undecided where the 95% interval of the ratio of latencies,
:func:`autotune.evidence.scores.median_ci_halfwidth_pct`, still contains 1; a 2× gap never),
the preferred of them answering (:func:`autotune.evidence.decide.preference`: off, then the
smaller N, then no draft model).

A traffic whose rate moves over the day is a mix of rates, shares of time at each
(``--request-rate 0.5:0.2,2:0.5,8:0.3``): each config runs at its concurrency c_i at each rate
R_i, so over the mix it holds Σ w_i c_i requests in flight on average and serves Σ w_i R_i, and
by Little's law again a request's mean latency is their ratio. The answer is the config with
the lowest such latency; only configs judged at every rate of the mix are compared, the
interval of each is its widest over the rates.

Assumptions: steady state (R below every judged config's capacity, no queue growth); latency at
a concurrency is what the closed loop measured there, whatever the arrival process (Poisson
arrivals add queueing variance this ignores); the workload's prompts and output lengths are the
deployment's.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.errors import SpecError
from autotune.evidence.cells import Evidence, Rows
from autotune.evidence.decide import halfwidth_log, margin_pct, preference, verdict
from autotune.evidence.scores import STATABLE_PCT, labels_of
from autotune.spec.methods import config_id

if TYPE_CHECKING:
    from autotune.store.records import MeasurementRecord as MeasuredRow


@dataclass(frozen=True)
class ConfigAtRate:
    """One config served ``request_rate_req_s``: where it would run and its latency there."""

    config: str
    speculative_config: dict[str, Any] | None
    num_speculative_tokens: int
    draft: str | None
    concurrency: float
    """c = R · L(c): the mean number of requests in flight."""
    mean_latency_ms: float
    """L at that concurrency (= c / R)."""
    levels: tuple[int, int]
    """The measured levels it was interpolated between (equal: at or below the lowest)."""
    ci_log: float
    """Half-width, log units, of the 95% interval of its request throughput at those levels
    (the wider of the two; inf: a level with one repeat)."""

    def ties_with(self, other: ConfigAtRate) -> bool:
        """Whether ``other``'s latency is not told apart from this one's by the one rule
        (:func:`autotune.evidence.decide.verdict`: a tie inside 1 %, or undecided where the 95%
        interval of the two latencies' ratio still contains 1; a 2× gap is always decided)."""
        width = math.hypot(self.ci_log, other.ci_log)
        contains_one = abs(math.log(self.mean_latency_ms / other.mean_latency_ms)) <= width
        # Lower latency is better: the margin of this config over ``other``, as for throughputs.
        margin = margin_pct(other.mean_latency_ms, self.mean_latency_ms)
        return verdict(margin, contains_one) != "decided"

    def tie_pct(self, other: ConfigAtRate) -> float:
        """± percent of the 95% interval of the two latencies' ratio (inf: unmeasured noise)."""
        width = math.hypot(self.ci_log, other.ci_log)
        return 100.0 * math.expm1(width) if math.isfinite(width) else math.inf

    def tie_text(self, other: ConfigAtRate) -> str:
        """``within ±4.2%``, or ``undecided`` past :data:`STATABLE_PCT` (as ties print)."""
        pct = self.tie_pct(other)
        return "undecided" if not pct <= STATABLE_PCT else f"within ±{pct:.1f}%"

    def as_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "speculative_config": self.speculative_config,
            "concurrency": round(self.concurrency, 4),
            "mean_latency_ms": round(self.mean_latency_ms, 3),
            "interpolated_between": list(self.levels),
        }


@dataclass(frozen=True)
class RateAnswer:
    workload: str
    request_rate_req_s: float
    best: ConfigAtRate
    tied_with: tuple[ConfigAtRate, ...]
    configs: tuple[ConfigAtRate, ...]
    """Every judged config, lowest latency first."""
    beyond: tuple[str, ...]
    """Configs that would run outside the measured levels at this rate (not judged)."""
    levels: tuple[int, ...]
    mix: tuple[tuple[float, float], ...] = ()
    """(rate, share of time) for a mix of rates; empty for one rate."""

    @property
    def off(self) -> ConfigAtRate | None:
        return next((c for c in self.configs if c.speculative_config is None), None)

    @property
    def latency_vs_off(self) -> float | None:
        """Off's mean latency over the answer's at this rate (> 1: the answer is faster)."""
        off = self.off
        return None if off is None else off.mean_latency_ms / self.best.mean_latency_ms

    def line(self) -> str:
        b = self.best
        where = f"at {self.request_rate_req_s:g} requests/s"
        if self.mix:
            where = (
                f"at the rate mix {mix_text(self.mix)} ({self.request_rate_req_s:.3g} "
                "requests/s on average)"
            )
        text = (
            f"{where} {b.config} would run at {'a mean ' if self.mix else ''}concurrency "
            f"{b.concurrency:.2f} with a mean latency of {b.mean_latency_ms:,.0f} ms "
            f"(Little's law on the measured levels {', '.join(map(str, self.levels))})"
        )
        off = self.off
        if off is not None and off is not b:
            text += f"; off at {off.concurrency:.2f} and {off.mean_latency_ms:,.0f} ms"
        if self.tied_with:
            text += "; tied with " + ", ".join(
                f"{t.config} ({b.tie_text(t)})" for t in self.tied_with
            )
        if self.beyond:
            text += "; beyond the measured levels at this rate: " + ", ".join(self.beyond)
        return text

    def to_json(self) -> dict[str, Any]:
        vs_off = self.latency_vs_off
        return {
            "source": "measured",
            "workload": self.workload,
            "request_rate_req_s": round(self.request_rate_req_s, 6),
            "request_rate_mix": [list(pair) for pair in self.mix] or None,
            "speculative_config": self.best.speculative_config,
            "config": self.best.config,
            "concurrency": round(self.best.concurrency, 4),
            "mean_latency_ms": round(self.best.mean_latency_ms, 3),
            "latency_vs_off": None if vs_off is None else round(vs_off, 4),
            "tie": bool(self.tied_with),
            "tied_with": [
                {
                    "config": t.config,
                    "latency_ratio": round(t.mean_latency_ms / self.best.mean_latency_ms, 4),
                    "within_pct": (
                        None
                        if (p := self.best.tie_pct(t)) > STATABLE_PCT or not math.isfinite(p)
                        else round(p, 3)
                    ),
                    "undecided": not self.best.tie_pct(t) <= STATABLE_PCT,
                }
                for t in self.tied_with
            ],
            "configs": [c.as_json() for c in self.configs],
            "beyond_measured_levels": list(self.beyond),
            "measured_levels": list(self.levels),
        }


def concurrency_at(rate: float, levels: Sequence[int], latency_s: Sequence[float]) -> float | None:
    """The c with c = rate · L(c), L interpolated linearly in c between ``levels`` (ascending)
    and ``latency_s`` (the mean latency at each); below the lowest level, when it is 1, c =
    rate · L(1). None: no solution within the measured levels."""
    if rate * latency_s[0] <= levels[0]:
        c = rate * latency_s[0]
        return c if levels[0] == 1 or math.isclose(c, levels[0]) else None
    points = list(zip(levels, latency_s, strict=True))
    for (c0, l0), (c1, l1) in itertools.pairwise(points):
        slope = (l1 - l0) / (c1 - c0)
        # c = rate·(l0 + (c - c0)·slope)  =>  c·(1 - rate·slope) = rate·(l0 - c0·slope)
        denom = 1.0 - rate * slope
        if denom <= 0:
            continue
        c = rate * (l0 - c0 * slope) / denom
        if c0 <= c <= c1 or math.isclose(c, c1):
            return min(c, c1)
    return None


def mix_text(mix: Sequence[tuple[float, float]]) -> str:
    """``0.5:0.2,2:0.8``: a mix of rates as ``--request-rate`` takes it."""
    return ",".join(f"{r:g}:{w:.3g}" for r, w in mix)


def answer_at_rate(rows: Rows, workload: str, rate: float | Mapping[float, float]) -> RateAnswer:
    """The answer for ``workload`` served ``rate`` requests/s, or a mix of rates ({rate: share
    of time}, shares summing to 1; module docstring). Raises :class:`SpecError` (exit 2) when
    no measurement records a request throughput or when the rate (a rate of the mix) lies beyond
    the measured levels for every config."""
    mix = sorted(rate.items()) if isinstance(rate, Mapping) else [(float(rate), 1.0)]
    mean_rate = sum(r * w for r, w in mix)
    cell = Evidence.of(rows).workload(workload)
    names = labels_of(cell)
    by_config: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    first: dict[str, MeasuredRow] = {}
    for r in cell:
        if r.request_throughput_req_s > 0:
            key = config_id(r.speculative_config)
            by_config[key][r.concurrency].append(r.request_throughput_req_s)
            first.setdefault(key, r)
    if not by_config:
        raise SpecError(
            f"no measurement of {workload} records a request throughput (a replayed landscape "
            "has none): --request-rate needs a study measured on an engine or imported",
            source="--request-rate",
        )
    all_levels = tuple(sorted({c for per in by_config.values() for c in per}))
    judged: list[ConfigAtRate] = []
    beyond: list[str] = []
    most = max(len(v) for per in by_config.values() for v in per.values())
    for key, per in by_config.items():
        r0 = first[key]
        label = names(r0.speculative_config, prose=True)
        levels = [c for c in all_levels if c in per]
        if levels != list(all_levels) or any(len(per[c]) < min(2, most) for c in levels):
            continue  # a config not measured at every level, or screened: not judged
        latency = [c / statistics.median(per[c]) for c in levels]
        at = [c for r, _ in mix if (c := concurrency_at(r, levels, latency)) is not None]
        if len(at) < len(mix):
            beyond.append(label)
            continue
        where = [
            (
                max((lv for lv in levels if lv <= c), default=levels[0]),
                next((lv for lv in levels if lv >= c), levels[0]),
            )
            for c in at
        ]
        c = sum(ci * w for ci, (_, w) in zip(at, mix, strict=True))
        judged.append(
            ConfigAtRate(
                config=label,
                speculative_config=r0.speculative_config,
                num_speculative_tokens=r0.num_speculative_tokens,
                draft=r0.draft,
                concurrency=c,
                mean_latency_ms=1000.0 * c / mean_rate,
                levels=(min(lo for lo, _ in where), max(hi for _, hi in where)),
                ci_log=max(max(halfwidth_log(per[lo]), halfwidth_log(per[hi])) for lo, hi in where),
            )
        )
    if not judged:
        capacity = max(statistics.median(v) for per in by_config.values() for v in per.values())
        what = (
            f"{mix[0][0]:g} requests/s lies"
            if len(mix) == 1
            else f"a rate of the mix {mix_text(mix)} lies"
        )
        raise SpecError(
            f"{what} beyond the measured levels of {workload} "
            f"({', '.join(map(str, all_levels))}) for every config (the most any sustained: "
            f"{capacity:.3g} requests/s); autotune does not extrapolate",
            source="--request-rate",
        )
    judged.sort(key=lambda x: x.mean_latency_ms)
    top = judged[0]
    group = [x for x in judged if x is top or top.ties_with(x)]
    best = min(group, key=preference)
    return RateAnswer(
        workload=workload,
        request_rate_req_s=mean_rate,
        mix=tuple(mix) if len(mix) > 1 else (),
        best=best,
        tied_with=tuple(x for x in group if x is not best),
        configs=tuple(judged),
        beyond=tuple(sorted(beyond)),
        levels=all_levels,
    )
