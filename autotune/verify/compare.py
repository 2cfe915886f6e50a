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
    # Dynamic SD only: the table against true off (a third server, no speculative_config)
    table_n: int | None = None
    """The N the table runs at this level (0: speculation off by the table)."""
    study_off_tok_s: float | None = None
    server_off_tok_s: float | None = None
    off_margin_pct: float | None = None
    """``100·(table/off − 1)`` of the served medians (positive: the table is ahead)."""
    off_verdict: str | None = None
    """:func:`autotune.evidence.decide.verdict` of the table against off at this level."""

    @property
    def off_within_noise(self) -> bool | None:
        """Whether the table is no worse than off here beyond noise: a tie, undecided, or ahead
        (None outside a Dynamic SD verification)."""
        if self.off_verdict is None or self.off_margin_pct is None:
            return None
        return not (self.off_verdict == "decided" and self.off_margin_pct < 0)

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
    off_command: str = ""
    """Dynamic SD only: the plain server (no speculative_config) the table is measured against."""
    dsd_answer: dict[str, Any] | None = None
    """Dynamic SD only (:func:`dsd_answer`): ``recommended`` (``table``, ``route`` or
    ``undecided``), the ``crossing`` concurrency, and the ``reason`` in words."""

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


def table_n_at(table: Sequence[Sequence[int]], concurrency: int, cap: int | None = None) -> int:
    """The N a ``num_speculative_tokens_per_batch_size`` table runs at batch size
    ``concurrency``, by vLLM's lookup (``build_dynamic_sd_schedule_lookup``,
    vllm/v1/spec_decode/dynamic/utils.py): the row whose ``[lo, hi]`` holds it; in a gap between
    rows or past the last one, the N of the row before carries forward; never above ``cap``
    (the config's ``num_speculative_tokens``)."""
    rows = sorted(table, key=lambda row: row[0])
    n = next((int(row[2]) for row in reversed(rows) if row[0] <= concurrency), 0)
    return n if cap is None else min(n, cap)


def off_verdict(table_runs: Sequence[float], off_runs: Sequence[float]) -> tuple[float, str]:
    """(margin %, verdict) of the table's served runs against off's at one level, by the shared
    rule (:func:`autotune.evidence.decide.verdict`, the interval of the ratio from both sides'
    :func:`~autotune.evidence.decide.halfwidth_log`: unbounded with one run each, so one run
    never decides what a tie band does not)."""
    import math

    from autotune.evidence.decide import halfwidth_log, margin_pct, verdict

    a, b = statistics.median(table_runs), statistics.median(off_runs)
    margin = margin_pct(a, b)
    width = math.hypot(halfwidth_log(table_runs), halfwidth_log(off_runs))
    contains = a > 0 and b > 0 and abs(math.log(a / b)) <= width
    return margin, verdict(margin, contains)


def dsd_answer(table: Sequence[Sequence[int]], levels: Sequence[LevelCheck]) -> dict[str, Any]:
    """The deployment a served Dynamic SD table supports: the table, where every level it runs
    with N = 0 ties with true off or is ahead of it; routing by load where a 0-band decidedly
    loses to off (the speculative deployment below the crossing, the first concurrency of the
    table's first 0-band, and a plain one, no ``--speculative-config``, from it up); and
    *undecided* where a 0-band trails off by more than the tie band but the interval still
    holds 1 (too few runs to tell): rerun with more repeats."""
    zero = [lv for lv in levels if lv.table_n == 0]
    losing = [lv for lv in zero if lv.off_within_noise is False]
    trailing = [
        lv
        for lv in zero
        if lv.off_verdict == "undecided" and lv.off_margin_pct is not None and lv.off_margin_pct < 0
    ]
    crossing = next((int(row[0]) for row in table if row[2] == 0), None)
    if not zero:
        return {
            "recommended": "table",
            "crossing": None,
            "reason": "the table drafts at every measured level (no 0-band to compare with off)",
        }
    if losing:
        words = ", ".join(f"c={lv.concurrency} {lv.off_margin_pct:+.1f}%" for lv in losing)
        return {
            "recommended": "route",
            "crossing": crossing,
            "reason": (
                f"its 0-bands decidedly lose to true off ({words}): the drafter still runs and "
                f"the KV lookahead stays reserved at N=0; run the speculative deployment below "
                f"concurrency {crossing} and a plain one (no --speculative-config) from "
                f"{crossing} up, routing requests by load"
            ),
        }
    if trailing:
        words = ", ".join(
            f"c={lv.concurrency} {lv.off_margin_pct:+.1f}% with {lv.server_runs} "
            f"run{'s' if lv.server_runs != 1 else ''} a side"
            for lv in trailing
        )
        return {
            "recommended": "undecided",
            "crossing": crossing,
            "reason": (
                f"its 0-bands trail true off within noise ({words}): rerun with more --repeats "
                f"before deploying the table; routing by load (plain from concurrency "
                f"{crossing} up) cannot lose to off there"
            ),
        }
    words = ", ".join(
        f"c={lv.concurrency} {lv.off_margin_pct:+.1f}% {lv.off_verdict}"
        for lv in zero
        if lv.off_margin_pct is not None
    )
    return {
        "recommended": "table",
        "crossing": crossing,
        "reason": f"its 0-bands tie with true off or beat it ({words})",
    }


def dsd_line(v: Verification) -> str | None:
    """The served Dynamic SD answer in one line (None for a fixed verification)."""
    if v.dsd_answer is None:
        return None
    a = v.dsd_answer
    if a.get("recommended") == "route":
        return f"Dynamic SD table vs true off: route by load, {a.get('reason')}"
    if a.get("recommended") == "undecided":
        return f"Dynamic SD table vs true off: undecided, {a.get('reason')}"
    return f"Dynamic SD table vs true off: the table is recommended; {a.get('reason')}"


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
    dsd = v.dsd_answer is not None
    lines = [
        f"verify {v.model} / {v.workload} (study {v.study}): {v.label} vs {ref}"
        + (f" and vs {OFF_PROSE}" if dsd else "")
        + ", served by vllm serve, driven by vllm bench serve",
        f" {'concurrency':<12} {'study tok/s':>11} {'server tok/s':>12} {'study AL':>8} "
        f"{'server AL':>9} {'study x':>7} {'server x':>8} {'diff %':>7}  ok"
        + (f"  {'N':>2} {'off tok/s':>9} {'vs off':>7}  verdict" if dsd else ""),
    ]
    for lv in v.levels:
        ok = "yes" if lv.within(v.tolerance) else "NO"
        row = (
            f" {lv.concurrency:<12} {_num(lv.study_tok_s, '.1f'):>11} "
            f"{_num(lv.server_tok_s, '.1f'):>12} {_num(lv.study_al, '.2f'):>8} "
            f"{_num(lv.server_al, '.2f'):>9} {_num(lv.study_speedup, '.2f'):>7} "
            f"{_num(lv.server_speedup, '.2f'):>8} {_pct(lv.deviation):>7}  {ok:<3}"
        )
        if dsd:
            margin = "-" if lv.off_margin_pct is None else f"{lv.off_margin_pct:+.1f}%"
            row += (
                f"  {_num(lv.table_n, 'd'):>2} {_num(lv.server_off_tok_s, '.1f'):>9} "
                f"{margin:>7}  {lv.off_verdict or '-'}"
            )
        lines.append(row.rstrip())
    verdict = "within" if v.passed else "NOT within"
    lines.append(
        f"server-path speedup {verdict} {v.tolerance * 100:g}% of the study's at every level"
        if v.passed
        else f"server-path speedup {verdict} {v.tolerance * 100:g}% of the study's at "
        f"concurrency {', '.join(str(lv.concurrency) for lv in v.failures())}"
    )
    if (line := dsd_line(v)) is not None:
        lines.append(line)
    lines.extend(v.notes)
    return "\n".join(lines)


def summary_line(v: Verification, when: str = "") -> str:
    """One line for ``report`` and ``check``."""
    devs = [lv.deviation for lv in v.levels if lv.deviation is not None]
    worst = max(devs, key=abs) if devs else None
    state = "passed" if v.passed else "FAILED"
    at = f" on {when}" if when else ""
    answer = v.dsd_answer
    served = ""
    if answer is not None:
        served = {
            "route": f"; vs true off: route by load (plain from concurrency "
            f"{answer.get('crossing')})",
            "undecided": "; vs true off: undecided (rerun with more --repeats)",
        }.get(str(answer.get("recommended")), "; vs true off: the table is recommended")
    return (
        f"verified through vllm serve{at}: {v.label} vs "
        f"{OFF_PROSE if v.mode == 'fixed' else v.reference_label} ({v.workload}), {state}, "
        f"largest speedup difference {_pct(worst)}% (tolerance {v.tolerance * 100:g}%)" + served
    )


def dumps(v: Verification) -> str:
    return json.dumps(v.to_json(), indent=2, sort_keys=True)
