"""``autotune check --measure``: the deployed config's acceptance and speedup measured now,
judged against the study's (pure arithmetic; ``autotune.verify.remeasure`` measures).

Acceptance at temperature 0 is deterministic (greedy verification accepts exactly the tokens
the target would emit), so it is judged exactly: the pooled acceptance length and every
position's a_i = accepted_per_pos[i] / num_drafts must stay within ``acceptance_tolerance``
(relative, default 5 %, as vLLM's own acceptance-length test) of the study's for the same
config, with no allowance for sampling noise. At a temperature above 0 a position falls only
when it is beyond the tolerance and the 95 % interval of the difference of the two proportions
(:func:`compare_acceptance`, ``sampled=True``) excludes no fall.

Throughput is not deterministic. The speedup over the baseline is measured from interleaved
repeats (target, baseline, target, baseline, ... on two warm engines, so a load that comes and
goes slows both alike) and judged by the shared rule :func:`autotune.evidence.decide.verdict`
(:func:`judge_level`): the paired ratios' median against the study's speedup, the tie band the
speedup tolerance (the study's start-to-start noise where its drift check measured it, else
``--speedup-tolerance``, else :data:`DEFAULT_SPEEDUP_TOLERANCE_PCT`), the interval that of the
ratios' median and of the study's own runs. A level passes when the speedup did not fall beyond
the band, fails when the fall is decided, and is *undecided* while the interval still contains
the study's speedup: more pairs are measured until it decides, up to a cap; still undecided at
the cap, the check says "undecided (noisy runner): rerun" (its own exit code, 3).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

Z95 = 1.959964
"""The normal quantile of a two-sided 95 % interval."""
DEFAULT_ACCEPTANCE_TOLERANCE = 0.05
DEFAULT_SPEEDUP_TOLERANCE_PCT = 10.0
"""The speedup's tie band when the study measured no start-to-start noise and none is given:
``autotune verify``'s CPU default for a server-path speedup against the study's."""
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
class LevelSpeedup:
    concurrency: int
    study: float | None
    measured: float | None
    study_tok_s: float | None = None
    measured_tok_s: float | None = None
    pairs: int = 0
    """Interleaved (target, baseline) pairs measured at this level (0: not paired)."""
    verdict: str | None = None
    """:func:`autotune.evidence.decide.verdict` of now against the study (paired levels)."""
    interval_pct: float | None = None
    """± percent of the 95 % interval of now / study (None: unbounded)."""
    outcome: str = ""
    """``ok``, ``fell`` or ``undecided`` (paired levels; "" judged by the band alone)."""
    band_pct: float | None = None
    """The tie band this level was judged with (paired levels)."""
    baseline_drift_pct: float | None = None
    """This check's baseline against the study's at this level, ``100·(now/study − 1)``: one
    more start-to-start drift of the same config (paired levels)."""

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

    max_pairs: int = 0
    """The cap on interleaved pairs per level (0: not paired)."""

    def fell(self) -> tuple[int, ...]:
        if self.tolerance is None:
            return ()
        tol = self.tolerance
        return tuple(
            lv.concurrency
            for lv in self.levels
            if (lv.outcome == "fell")
            or (not lv.outcome and lv.change is not None and lv.change < -tol)
        )

    def undecided(self) -> tuple[int, ...]:
        """Levels still undecided at the cap: the runner was too noisy to tell."""
        return tuple(lv.concurrency for lv in self.levels if lv.outcome == "undecided")

    @property
    def passed(self) -> bool:
        return not self.fell() and not self.undecided()


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
    drift_pcts: Sequence[float], user_pct: float | None, default_pct: float | None = None
) -> tuple[float | None, float | None, str]:
    """(band, noise, words): the band is the study's start-to-start noise (the largest |drift|
    of its baseline between two engine starts) or the user's tolerance, whichever is wider;
    with neither, ``default_pct`` (None: the speedup is not judged)."""
    noise = max((abs(d) for d in drift_pcts), default=None)
    if noise is None:
        if user_pct is None and default_pct is not None:
            return (
                default_pct / 100,
                None,
                (
                    f"a tie band of {default_pct:g}% (the default: the study measured no "
                    f"start-to-start noise; --speedup-tolerance sets it)"
                ),
            )
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
class LevelJudgment:
    """One level's paired ratios judged against the study's speedup."""

    margin_pct: float
    """``100·(median ratio now / study speedup − 1)``."""
    interval_log: float
    """Half-width of the 95 % interval of that ratio, in log units (``inf``: unbounded)."""
    verdict: str
    outcome: str
    """``ok`` (no fall beyond the band), ``fell`` (a decided fall) or ``undecided``."""


def _t95(dof: int) -> float:
    from scipy.special import stdtrit  # as autotune.evidence.scores: no scipy.stats import

    return float(stdtrit(dof, 0.975))


def judge_level(
    ratios: Sequence[float],
    study_speedup: float,
    study_config: Sequence[float],
    study_baseline: Sequence[float],
    band_pct: float,
    now_config: Sequence[float] = (),
    now_baseline: Sequence[float] = (),
) -> LevelJudgment:
    """The paired ratios (target/baseline tok/s of each interleaved pair) against the study's
    speedup by :func:`autotune.evidence.decide.verdict`, the tie band ``band_pct``.

    The interval combines the ratios' own (a t-interval of their log mean, as
    :func:`autotune.evidence.scores.median_ci_halfwidth_pct`) with the study's: its target's and
    baseline's intervals where it ran each at least twice, otherwise the noise a ratio of one
    unpaired run of each carries as this check measured it: the spread of ``now_config`` and
    ``now_baseline`` run by run (``t·√(s_a² + s_b²)``; the paired ratios' spread when those are
    not given). The study ran its configs on engines started one after the other, so its one
    ratio has the unpaired noise, not the pairs'.
    """
    from autotune.evidence.decide import halfwidth_log, margin_pct, verdict

    logs = [math.log(r) for r in ratios if r > 0]
    n = len(logs)
    median = statistics.median(ratios)
    margin = margin_pct(median, study_speedup)
    if n < 2:
        width = math.inf
    else:
        sd = statistics.stdev(logs)
        t = _t95(n - 1)
        k = min(len(study_config), len(study_baseline))
        if k >= 2:
            study_w = math.hypot(halfwidth_log(study_config), halfwidth_log(study_baseline))
        else:
            unpaired = [
                statistics.stdev([math.log(x) for x in xs])
                for xs in (now_config, now_baseline)
                if len(xs) >= 2 and all(x > 0 for x in xs)
            ]
            study_w = t * (math.hypot(*unpaired) if len(unpaired) == 2 else sd)
        width = math.hypot(t * sd / math.sqrt(n), study_w)
    contains = abs(math.log(median / study_speedup)) <= width if median > 0 else False
    v = verdict(margin, contains, band_pct)
    if v == "tie" or margin >= 0:
        outcome = "ok"
    elif v == "decided":
        outcome = "fell"
    else:
        outcome = "undecided"
    return LevelJudgment(margin, width, v, outcome)


def paired_level(
    concurrency: int,
    study_config: Sequence[Any],
    study_baseline: Sequence[Any],
    pairs: Sequence[tuple[Any, Any]],
    band_pct: float,
    *,
    widen_by_drift: bool = False,
) -> LevelSpeedup:
    """A level's :class:`LevelSpeedup` from its interleaved (target, baseline) measurements.

    ``widen_by_drift`` (the study measured no start-to-start noise of its own): the band is at
    least this check's baseline drift from the study's at this level, since the baseline
    started again here is a second engine start of the study's baseline, what the drift check
    compares."""

    def tok(runs: Sequence[Any]) -> list[float]:
        return [r.output_throughput_tok_s for r in runs if r.concurrency == concurrency]

    st, sb = tok(study_config), tok(study_baseline)
    ratios = [
        a.output_throughput_tok_s / b.output_throughput_tok_s
        for a, b in pairs
        if b.output_throughput_tok_s > 0
    ]
    study = statistics.median(st) / statistics.median(sb) if st and sb else None
    now = statistics.median(ratios) if ratios else None
    now_base = _median([b.output_throughput_tok_s for _, b in pairs])
    drift = 100.0 * (now_base / statistics.median(sb) - 1.0) if sb and now_base else None
    if widen_by_drift and drift is not None:
        band_pct = max(band_pct, abs(drift))
    common = dict(
        band_pct=band_pct,
        baseline_drift_pct=drift,
        concurrency=concurrency,
        study=study,
        measured=now,
        study_tok_s=statistics.median(st) if st else None,
        measured_tok_s=_median([a.output_throughput_tok_s for a, _ in pairs]),
        pairs=len(pairs),
    )
    if study is None or not ratios:
        return LevelSpeedup(**common)  # type: ignore[arg-type]
    j = judge_level(
        ratios,
        study,
        st,
        sb,
        band_pct,
        [a.output_throughput_tok_s for a, _ in pairs],
        [b.output_throughput_tok_s for _, b in pairs],
    )
    width = 100.0 * math.expm1(j.interval_log) if math.isfinite(j.interval_log) else None
    return LevelSpeedup(
        **common,  # type: ignore[arg-type]
        verdict=j.verdict,
        interval_pct=width,
        outcome=j.outcome,
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
                f"; interleaved target/baseline pairs until the interval decides (at most "
                f"{sp.max_pairs} per level):"
                if paired
                else ":"
            )
        )
        head = f"  {'concurrency':<12} {'study x':>8} {'now x':>8} {'change':>8}"
        if paired:
            head += f" {'pairs':>5} {'band':>6} {'interval':>9}  verdict"
        lines.append(head)
        for lv in sp.levels:
            ch = "-" if lv.change is None else f"{lv.change * 100:+.1f}%"
            row = f"  {lv.concurrency:<12} {_f(lv.study):>8} {_f(lv.measured):>8} {ch:>8}"
            if paired:
                width = "-" if lv.interval_pct is None else f"±{lv.interval_pct:.1f}%"
                band = "-" if lv.band_pct is None else f"{lv.band_pct:.1f}%"
                row += (
                    f" {lv.pairs:>5} {band:>6} {width:>9}  {lv.verdict or '-'}: {lv.outcome or '-'}"
                )
            lines.append(row)
        if sp.tolerance is None:
            lines.append("  speedup: shown, not judged")
        elif sp.passed:
            widest = max((lv.band_pct or 0.0 for lv in sp.levels), default=0.0)
            lines.append(
                f"  speedup: ok (no level fell beyond its band, "
                f"{max(widest, sp.tolerance * 100):.1f}% at the widest)"
                if paired
                else f"  speedup: ok (no level fell more than {sp.tolerance * 100:.1f}%)"
            )
        elif sp.fell():
            lines.append(
                f"  speedup: FELL more than {sp.tolerance * 100:.1f}% at concurrency "
                f"{', '.join(map(str, sp.fell()))}"
            )
        else:
            lines.append(
                f"  speedup: undecided (noisy runner) at concurrency "
                f"{', '.join(map(str, sp.undecided()))} after {sp.max_pairs} pairs: rerun"
            )
    lines.append(f" choice (stored numbers): {r.choice_reason}")
    lines.extend(f" note: {n}" for n in r.notes)
    lines.append(
        {"passed": "passed", "failed": "FAILED"}.get(r.outcome, "UNDECIDED (noisy runner): rerun")
    )
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
    if r.outcome == "undecided" and r.speedup is not None:
        why.append(
            f"undecided (noisy runner): rerun; the speedup at concurrency "
            f"{', '.join(map(str, r.speedup.undecided()))} was neither within "
            f"{(r.speedup.tolerance or 0) * 100:.1f}% of the study's nor decidedly below it "
            f"after {r.speedup.max_pairs} interleaved pairs"
        )
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
