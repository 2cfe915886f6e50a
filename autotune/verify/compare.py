"""The verification's arithmetic and its table: server-path numbers beside the study's.

Pure code (no vLLM, no server), so the parsing of ``vllm bench serve`` results, the speedup
comparison and the rendering are unit-tested on their own.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from autotune.spec.labels import OFF_PROSE

DEFAULT_TOLERANCE = 0.10
"""Allowed relative difference between the server-path speedup and the study's (CPU default)."""


@dataclass(frozen=True)
class ServerRun:
    """One ``vllm bench serve`` run against one ``vllm serve``, at one concurrency level."""

    concurrency: int
    output_tok_s: float
    completed: int
    failed: int
    duration_s: float
    acceptance_length: float | None = None
    acceptance_per_pos: tuple[float, ...] = ()


def parse_bench_result(result: Mapping[str, Any], concurrency: int) -> ServerRun:
    """A :class:`ServerRun` from the dict ``vllm.benchmarks.serve.main`` returns (the same as
    its ``--save-result`` JSON). vLLM reports acceptance only when the server drafted."""
    if "output_throughput" not in result:
        raise ValueError("vllm bench serve returned no output_throughput")
    al = result.get("spec_decode_acceptance_length")
    return ServerRun(
        concurrency=concurrency,
        output_tok_s=float(result["output_throughput"]),
        completed=int(result.get("completed", 0)),
        failed=int(result.get("failed", 0) or 0),
        duration_s=float(result.get("duration", 0.0)),
        acceptance_length=float(al) if al is not None else None,
        acceptance_per_pos=tuple(
            float(a) for a in result.get("spec_decode_per_position_acceptance_rates") or ()
        ),
    )


@dataclass(frozen=True)
class LevelCheck:
    """One concurrency level: the verified config and its reference, in the study and served.

    The reference is the baseline (no speculation) for a fixed config, the best fixed N for a
    Dynamic SD table. Throughputs are medians over the runs.
    """

    concurrency: int
    study_tok_s: float | None
    study_reference_tok_s: float | None
    study_al: float | None
    server_tok_s: float
    server_reference_tok_s: float
    server_al: float | None
    server_runs: int = 1

    @property
    def study_speedup(self) -> float | None:
        if not self.study_tok_s or not self.study_reference_tok_s:
            return None
        return self.study_tok_s / self.study_reference_tok_s

    @property
    def server_speedup(self) -> float | None:
        if not self.server_reference_tok_s:
            return None
        return self.server_tok_s / self.server_reference_tok_s

    @property
    def deviation(self) -> float | None:
        """server-path speedup / study speedup - 1."""
        study, server = self.study_speedup, self.server_speedup
        if study is None or server is None:
            return None
        return server / study - 1.0

    def within(self, tolerance: float) -> bool:
        dev = self.deviation
        return dev is None or abs(dev) <= tolerance


@dataclass(frozen=True)
class Verification:
    """A verified recommendation: what was served, and per level how it compared."""

    study: str
    model: str
    workload: str
    mode: str
    """``fixed``: the recommended config vs the baseline; ``dsd``: the Dynamic SD table vs the
    best fixed N."""
    label: str
    reference_label: str
    speculative_config: dict[str, Any] | None
    reference_config: dict[str, Any] | None
    command: str
    reference_command: str
    tolerance: float
    levels: tuple[LevelCheck, ...]
    vllm_version: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return all(level.within(self.tolerance) for level in self.levels)

    def failures(self) -> list[LevelCheck]:
        return [level for level in self.levels if not level.within(self.tolerance)]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verification:
        fields = {k: v for k, v in data.items() if k != "passed"}
        fields["levels"] = tuple(LevelCheck(**lv) for lv in data.get("levels", ()))
        fields["notes"] = tuple(data.get("notes", ()))
        return cls(**fields)


def median_or_none(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f}"


def render(v: Verification) -> str:
    """The verification table: per level, throughput and acceptance length through the server
    vs in the study, and the two speedups."""
    ref = OFF_PROSE if v.mode == "fixed" else v.reference_label
    lines = [
        f"verify {v.model} / {v.workload} (study {v.study}): {v.label} vs {ref}, "
        f"served by vllm serve, driven by vllm bench serve",
        f" {'concurrency':<12} {'study tok/s':>11} {'server tok/s':>12} {'study AL':>8} "
        f"{'server AL':>9} {'study x':>7} {'server x':>8} {'diff %':>7}  ok",
    ]
    for lv in v.levels:
        ok = "yes" if lv.within(v.tolerance) else "NO"
        lines.append(
            f" {lv.concurrency:<12} {_num(lv.study_tok_s, '.1f'):>11} "
            f"{_num(lv.server_tok_s, '.1f'):>12} {_num(lv.study_al, '.2f'):>8} "
            f"{_num(lv.server_al, '.2f'):>9} {_num(lv.study_speedup, '.2f'):>7} "
            f"{_num(lv.server_speedup, '.2f'):>8} {_pct(lv.deviation):>7}  {ok}"
        )
    verdict = "within" if v.passed else "NOT within"
    lines.append(
        f"server-path speedup {verdict} {v.tolerance * 100:g}% of the study's at every level"
        if v.passed
        else f"server-path speedup {verdict} {v.tolerance * 100:g}% of the study's at "
        f"concurrency {', '.join(str(lv.concurrency) for lv in v.failures())}"
    )
    lines.extend(v.notes)
    return "\n".join(lines)


def summary_line(v: Verification, when: str = "") -> str:
    """One line for ``report`` and ``check``."""
    devs = [lv.deviation for lv in v.levels if lv.deviation is not None]
    worst = max(devs, key=abs) if devs else None
    state = "passed" if v.passed else "FAILED"
    at = f" on {when}" if when else ""
    return (
        f"verified through vllm serve{at}: {v.label} vs "
        f"{OFF_PROSE if v.mode == 'fixed' else v.reference_label} ({v.workload}), {state}, "
        f"largest speedup difference {_pct(worst)}% (tolerance {v.tolerance * 100:g}%)"
    )


def dumps(v: Verification) -> str:
    return json.dumps(v.to_json(), indent=2, sort_keys=True)
