"""``autotune check --measure``: the deployed config's acceptance and speedup measured now,
judged against the study's (pure arithmetic; ``autotune.verify.remeasure`` measures).

Acceptance at temperature 0 is nearly deterministic, so it is gated tightly: the pooled
acceptance length and every position's a_i = accepted_per_pos[i] / num_drafts must stay within
``acceptance_tolerance`` (relative, default 5 %, as vLLM's own acceptance-length test) of the
study's for the same config. Throughput is not: the speedup over the baseline is judged against
the start-to-start noise the study measured (the baseline's drift between its two engine starts,
``measurement.drift_check``), never against a tolerance tighter than that noise; without a drift
check the speedup is shown, not judged, unless a tolerance is given.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_ACCEPTANCE_TOLERANCE = 0.05
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

    @property
    def passed(self) -> bool:
        return not self.fell and not self.length_fell


def compare_acceptance(study: Acceptance, now: Acceptance, tolerance: float) -> AcceptanceCheck:
    s, m = study.per_pos, now.per_pos
    fell = tuple(i + 1 for i in range(min(len(s), len(m))) if m[i] < s[i] * (1.0 - tolerance))
    sl, ml = study.length, now.length
    length_fell = sl is not None and (ml is None or ml < sl * (1.0 - tolerance))
    return AcceptanceCheck(sl, ml, s, m, tolerance, fell, length_fell)


@dataclass(frozen=True)
class LevelSpeedup:
    concurrency: int
    study: float | None
    measured: float | None
    study_tok_s: float | None = None
    measured_tok_s: float | None = None

    @property
    def change(self) -> float | None:
        """measured / study - 1."""
        if not self.study or self.measured is None:
            return None
        return self.measured / self.study - 1.0


@dataclass(frozen=True)
class SpeedupCheck:
    levels: tuple[LevelSpeedup, ...]
    tolerance: float | None
    """The band a speedup may fall by (fraction), None: not judged."""
    noise: float | None
    """The study's start-to-start noise (largest baseline drift), None: not measured."""
    noise_source: str
    """What the band is, in words, for the output."""

    def fell(self) -> tuple[int, ...]:
        if self.tolerance is None:
            return ()
        tol = self.tolerance
        return tuple(
            lv.concurrency for lv in self.levels if lv.change is not None and lv.change < -tol
        )

    @property
    def passed(self) -> bool:
        return not self.fell()


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def speedups(
    study_config: Sequence[Any],
    study_baseline: Sequence[Any],
    now_config: Sequence[Any],
    now_baseline: Sequence[Any],
) -> tuple[LevelSpeedup, ...]:
    """Per concurrency level: median tok/s of the config over the baseline's (pooled over the
    baseline's runs), in the study and now."""
    levels = sorted({r.concurrency for r in now_config})
    out = []
    for c in levels:

        def med(runs: Sequence[Any], level: int = c) -> float | None:
            return _median([r.output_throughput_tok_s for r in runs if r.concurrency == level])

        sc, sb, mc, mb = med(study_config), med(study_baseline), med(now_config), med(now_baseline)
        out.append(
            LevelSpeedup(
                c,
                sc / sb if sc and sb else None,
                mc / mb if mc and mb else None,
                sc,
                mc,
            )
        )
    return tuple(out)


def speedup_band(
    drift_pcts: Sequence[float], user_pct: float | None
) -> tuple[float | None, float | None, str]:
    """(band, noise, words): the band is the study's start-to-start noise (the largest |drift|
    of its baseline between two engine starts) or the user's tolerance, whichever is wider."""
    noise = max((abs(d) for d in drift_pcts), default=None)
    if noise is None:
        if user_pct is None:
            return (
                None,
                None,
                (
                    "nothing: the study measured no start-to-start noise (its baseline ran on "
                    "one engine only: measurement.drift_check off, or the study stopped before "
                    "it); give --speedup-tolerance to judge it"
                ),
            )
        return (
            user_pct / 100,
            None,
            (f"--speedup-tolerance {user_pct:g}% (the study measured no start-to-start noise)"),
        )
    noise_f = noise / 100
    if user_pct is not None and user_pct / 100 > noise_f:
        return (
            user_pct / 100,
            noise_f,
            (
                f"--speedup-tolerance {user_pct:g}% (wider than the study's start-to-start noise "
                f"{noise:.1f}%)"
            ),
        )
    why = (
        f"; --speedup-tolerance {user_pct:g}% is tighter than that noise"
        if user_pct is not None
        else ""
    )
    return (
        noise_f,
        noise_f,
        (
            f"the study's start-to-start noise {noise:.1f}% (its baseline's largest drift between "
            f"two engine starts, the drift check){why}"
        ),
    )


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

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["mode"] = MODE
        data["passed"] = self.passed
        data["acceptance"]["passed"] = self.acceptance.passed
        if self.speedup is not None:
            data["speedup"]["passed"] = self.speedup.passed
            data["speedup"]["fell_at_concurrency"] = list(self.speedup.fell())
        result: dict[str, Any] = json.loads(json.dumps(data))  # tuples as lists, as stored
        return result


def _f(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def render(r: MeasuredCheck) -> str:
    a = r.acceptance
    versions = ", ".join(r.study_vllm_versions) or "?"
    lines = [
        f"check --measure {r.model} / {r.workload} (study {r.study}): {r.label} measured now on "
        f"vLLM {r.vllm_version} (study: vLLM {versions})",
        f" acceptance vs the study's {r.reference_label} (tolerance {a.tolerance * 100:g}%):",
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
        lines.append(f" speedup over the baseline, judged against {sp.noise_source}:")
        lines.append(f"  {'concurrency':<12} {'study x':>8} {'now x':>8} {'change':>8}")
        for lv in sp.levels:
            ch = "-" if lv.change is None else f"{lv.change * 100:+.1f}%"
            lines.append(f"  {lv.concurrency:<12} {_f(lv.study):>8} {_f(lv.measured):>8} {ch:>8}")
        if sp.tolerance is None:
            lines.append("  speedup: shown, not judged")
        elif sp.passed:
            lines.append(f"  speedup: ok (no level fell more than {sp.tolerance * 100:.1f}%)")
        else:
            lines.append(
                f"  speedup: FELL more than {sp.tolerance * 100:.1f}% at concurrency "
                f"{', '.join(map(str, sp.fell()))}"
            )
    lines.append(f" choice (stored numbers): {r.choice_reason}")
    lines.extend(f" note: {n}" for n in r.notes)
    lines.append("passed" if r.passed else "FAILED")
    return "\n".join(lines)


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
    if r.speedup is not None and not r.speedup.passed:
        why.append(
            f"speedup fell more than {(r.speedup.tolerance or 0) * 100:.1f}% at concurrency "
            f"{', '.join(map(str, r.speedup.fell()))}"
        )
    if not r.choice_ok:
        why.append(r.choice_reason)
    return f"{r.label} on vLLM {r.vllm_version}: " + "; ".join(why)


def history_line(created: str, data: dict[str, Any]) -> str:
    """One line per stored measured check, for ``report`` and ``check``."""
    acc = data.get("acceptance", {})
    state = "passed" if data.get("passed") else "FAILED"
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
