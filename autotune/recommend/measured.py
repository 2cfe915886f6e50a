"""``autotune check --measure``: the deployed config's acceptance and speedup measured now,
judged against the study's (pure arithmetic; ``autotune.verify.remeasure`` measures).

Acceptance at temperature 0 is deterministic (greedy verification accepts exactly the tokens
the target would emit), so it is judged exactly: the pooled acceptance length and every
position's a_i = accepted_per_pos[i] / num_drafts must stay within ``acceptance_tolerance``
(relative, default 5 %, as vLLM's own acceptance-length test) of the study's for the same
config, with no allowance for sampling noise. At a temperature above 0 a position falls only
when it is beyond the tolerance and the 95 % interval of the difference of the two proportions
(:func:`compare_acceptance`, ``sampled=True``) excludes no fall.

Throughput is not deterministic: the speedup over the baseline is measured from interleaved
repeats and judged by the gate's one-sided rule (:mod:`autotune.recommend.speedup_gate`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from autotune.recommend.speedup_gate import SpeedupCheck

Z95 = 1.959964
"""The normal quantile of a two-sided 95 % interval."""
DEFAULT_ACCEPTANCE_TOLERANCE = 0.05
UNDECIDED_EXIT = 3
"""``check --measure``'s exit code when a level's speedup stays undecided at the cap."""
MODE = "check-measure"
"""The ``mode`` under which a measured check is stored in the verifications table."""


@dataclass(frozen=True)
class Acceptance:
    """Pooled counters of some runs of one config."""

    num_drafts: int
    accepted_per_pos: tuple[int, ...]

    @property
    def per_pos(self) -> tuple[float, ...]:
        if self.num_drafts <= 0:
            return ()
        return tuple(a / self.num_drafts for a in self.accepted_per_pos)

    @property
    def length(self) -> float | None:
        """vLLM's mean acceptance length, 1 + accepted / drafts."""
        if self.num_drafts <= 0:
            return None
        return 1.0 + sum(self.accepted_per_pos) / self.num_drafts


def pooled(runs: Sequence[Any]) -> Acceptance:
    """Sum of drafts and of accepted tokens per position over runs (measurements or rows)."""
    n = max((len(r.accepted_per_pos) for r in runs), default=0)
    per = [0] * n
    drafts = 0
    for r in runs:
        if len(r.accepted_per_pos) != n:
            continue
        drafts += r.num_drafts
        for i, a in enumerate(r.accepted_per_pos):
            per[i] += a
    return Acceptance(drafts, tuple(per))


@dataclass(frozen=True)
class AcceptanceCheck:
    study_length: float | None
    measured_length: float | None
    study_per_pos: tuple[float, ...]
    measured_per_pos: tuple[float, ...]
    tolerance: float
    fell: tuple[int, ...]
    """1-based positions whose a_i fell more than ``tolerance`` below the study's."""
    length_fell: bool
    sampled: bool = False
    """Judged by interval (temperature above 0) rather than exactly."""

    @property
    def passed(self) -> bool:
        return not self.fell and not self.length_fell


def compare_acceptance(
    study: Acceptance, now: Acceptance, tolerance: float, *, sampled: bool = False
) -> AcceptanceCheck:
    """Exact (temperature 0, ``sampled`` False): a position falls when its rate is more than
    ``tolerance`` below the study's. Sampled: only when, besides, the upper end of the 95 %
    interval of ``now − study`` (two proportions over their drafts) is below
    ``−tolerance·study``; the length likewise, with the positions' pooled interval."""
    s, m = study.per_pos, now.per_pos

    def slack(i: int) -> float:
        if not sampled:
            return 0.0
        var = s[i] * (1 - s[i]) / max(study.num_drafts, 1) + m[i] * (1 - m[i]) / max(
            now.num_drafts, 1
        )
        return Z95 * math.sqrt(var)

    fell = tuple(
        i + 1 for i in range(min(len(s), len(m))) if m[i] + slack(i) < s[i] * (1.0 - tolerance)
    )
    sl, ml = study.length, now.length
    length_slack = math.hypot(*(slack(i) for i in range(min(len(s), len(m))))) if sampled else 0
    length_fell = sl is not None and (ml is None or ml + length_slack < sl * (1.0 - tolerance))
    return AcceptanceCheck(sl, ml, s, m, tolerance, fell, length_fell, sampled)


@dataclass(frozen=True)
class MeasuredCheck:
    """One ``check --measure``: what ran, how it compared, and the stored choice check."""

    study: str
    model: str
    workload: str
    label: str
    speculative_config: dict[str, Any] | None
    reference_label: str
    """The study's config the acceptance is compared with (the same config, or its nearest)."""
    vllm_version: str
    study_vllm_versions: tuple[str, ...]
    acceptance: AcceptanceCheck
    speedup: SpeedupCheck | None
    """None with --acceptance-only."""
    choice_ok: bool
    choice_reason: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return (
            self.acceptance.passed
            and (self.speedup is None or self.speedup.passed)
            and self.choice_ok
        )

    @property
    def outcome(self) -> str:
        """``passed``, ``failed`` (a decided regression, or the choice check), or
        ``undecided`` (nothing failed, but a level's speedup stayed undecided at the cap)."""
        if self.passed:
            return "passed"
        failed = (
            not self.acceptance.passed
            or not self.choice_ok
            or (self.speedup is not None and bool(self.speedup.fell()))
        )
        return "failed" if failed else "undecided"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["mode"] = MODE
        data["passed"] = self.passed
        data["outcome"] = self.outcome
        data["acceptance"]["passed"] = self.acceptance.passed
        if self.speedup is not None:
            data["speedup"]["passed"] = self.speedup.passed
            data["speedup"]["fell_at_concurrency"] = list(self.speedup.fell())
            data["speedup"]["undecided_at_concurrency"] = list(self.speedup.undecided())
        result: dict[str, Any] = json.loads(json.dumps(data))  # tuples as lists, as stored
        return result


def _f(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def render(r: MeasuredCheck) -> str:
    a = r.acceptance
    versions = ", ".join(r.study_vllm_versions) or "?"
    how = "by interval, sampled" if a.sampled else "exactly, temperature 0"
    lines = [
        f"check --measure {r.model} / {r.workload} (study {r.study}): {r.label} measured now on "
        f"vLLM {r.vllm_version} (study: vLLM {versions})",
        f" acceptance vs the study's {r.reference_label} (tolerance {a.tolerance * 100:g}%, "
        f"judged {how}):",
        f"  {'':<22} {'study':>6} {'now':>6}",
        f"  {'acceptance length':<22} {_f(a.study_length):>6} {_f(a.measured_length):>6}"
        + ("  FELL" if a.length_fell else ""),
    ]
    for i in range(max(len(a.study_per_pos), len(a.measured_per_pos))):
        s = a.study_per_pos[i] if i < len(a.study_per_pos) else None
        m = a.measured_per_pos[i] if i < len(a.measured_per_pos) else None
        mark = "  FELL" if i + 1 in a.fell else ""
        lines.append(f"  {f'position {i + 1}':<22} {_f(s):>6} {_f(m):>6}{mark}")
    if a.passed:
        lines.append("  acceptance: ok")
    else:
        where = ", ".join(map(str, a.fell))
        lines.append(
            "  acceptance: REGRESSION"
            + (f" at position {where}" if a.fell else "")
            + (" (acceptance length)" if a.length_fell and not a.fell else "")
        )
    sp = r.speedup
    if sp is not None:
        paired = any(lv.pairs for lv in sp.levels)
        lines.append(
            f" speedup over the baseline, judged against {sp.noise_source}"
            + (
                f"; interleaved target/baseline pairs until the 95% interval of now/study lies "
                f"wholly above or below the band's edge (at most {sp.max_pairs} per level):"
                if paired
                else ":"
            )
        )
        head = f"  {'concurrency':<12} {'study x':>8} {'now x':>8} {'change':>8}"
        if paired:
            head += f" {'pairs':>5} {'band':>6} {'interval':>9} {'starts':>8}  verdict"
        lines.append(head)
        for lv in sp.levels:
            ch = "-" if lv.change is None else f"{lv.change * 100:+.1f}%"
            row = f"  {lv.concurrency:<12} {_f(lv.study):>8} {_f(lv.measured):>8} {ch:>8}"
            if paired:
                width = "-" if lv.interval_pct is None else f"±{lv.interval_pct:.1f}%"
                starts = "-" if lv.start_noise_pct is None else f"±{lv.start_noise_pct:.1f}%"
                band = "-" if lv.band_pct is None else f"-{lv.band_pct:.1f}%"
                why = f" ({lv.undecided_by})" if lv.undecided_by else ""
                row += f" {lv.pairs:>5} {band:>6} {width:>9} {starts:>8}  {lv.verdict or '-'}{why}"
            lines.append(row)
        if sp.tolerance is None:
            lines.append("  speedup: shown, not judged")
        elif sp.passed:
            lines.append(
                f"  speedup: ok (at every level the 95% interval lies above a fall of "
                f"{sp.tolerance * 100:.1f}%)"
                if paired
                else f"  speedup: ok (no level fell more than {sp.tolerance * 100:.1f}%)"
            )
        elif sp.fell():
            lines.append(
                f"  speedup: FELL more than {sp.tolerance * 100:.1f}% at concurrency "
                f"{', '.join(map(str, sp.fell()))}"
            )
        else:
            lines.append(f"  speedup: {undecided_words(sp)}")
    lines.append(f" choice (stored numbers): {r.choice_reason}")
    lines.extend(f" note: {n}" for n in r.notes)
    lines.append(
        {"passed": "passed", "failed": "FAILED"}.get(r.outcome, "UNDECIDED (noisy runner): rerun")
    )
    return "\n".join(lines)


def undecided_words(sp: SpeedupCheck) -> str:
    """Why the speedup is undecided, and what to do: rerun (the pairs were too noisy) or measure
    the study's noise / widen the band (the start-to-start noise alone spans the band's edge)."""
    band = f"{(sp.tolerance or 0) * 100:.1f}%"
    starts, rest = (
        sp.undecided_by_starts(),
        [c for c in sp.undecided() if c not in sp.undecided_by_starts()],
    )
    parts = []
    if rest:
        parts.append(
            f"undecided (noisy runner): rerun; at concurrency {', '.join(map(str, rest))} the "
            f"95% interval still spanned a fall of {band} after {sp.max_pairs} interleaved pairs"
        )
    if starts:
        parts.append(
            f"undecided at concurrency {', '.join(map(str, starts))}: the noise of the engine "
            f"starts alone (the study's runs and the start-to-start drift) spans a fall of "
            f"{band}, and more pairs cannot narrow it; rerun on a quiet runner, measure the "
            f"study with repeats and measurement.drift_check, or give a wider "
            f"--speedup-tolerance"
        )
    return "; ".join(parts)


def failure_line(r: MeasuredCheck) -> str:
    """The one line a failed check exits with."""
    why = []
    if not r.acceptance.passed:
        pos = ", ".join(map(str, r.acceptance.fell))
        why.append(
            f"acceptance fell more than {r.acceptance.tolerance * 100:g}% "
            + (f"at position {pos}" if pos else "(acceptance length)")
            + f" ({_f(r.acceptance.measured_length)} vs the study's "
            f"{_f(r.acceptance.study_length)})"
        )
    if r.speedup is not None and r.speedup.fell():
        why.append(
            f"speedup fell more than {(r.speedup.tolerance or 0) * 100:.1f}% at concurrency "
            f"{', '.join(map(str, r.speedup.fell()))}"
        )
    if not r.choice_ok:
        why.append(r.choice_reason)
    if r.outcome == "undecided" and r.speedup is not None:
        why.append(undecided_words(r.speedup))
    return f"{r.label} on vLLM {r.vllm_version}: " + "; ".join(why)


def history_line(created: str, data: dict[str, Any]) -> str:
    """One line per stored measured check, for ``report`` and ``check``."""
    acc = data.get("acceptance", {})
    state = "passed" if data.get("passed") else "FAILED"
    if data.get("outcome") == "undecided":
        state = "UNDECIDED (noisy runner)"
    sp = data.get("speedup") or {}
    worst = [lv for lv in sp.get("levels", ()) if lv.get("measured") is not None]
    speed = (
        ", speedup " + " ".join(f"c={lv['concurrency']} {lv['measured']:.2f}x" for lv in worst)
        if worst
        else ""
    )
    return (
        f"check --measure on {created}, vLLM {data.get('vllm_version', '?')}: {data.get('label')} "
        f"{state}, acceptance length {_f(acc.get('measured_length'))} (study "
        f"{_f(acc.get('study_length'))}){speed}"
    )
