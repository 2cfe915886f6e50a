"""Per-position acceptance priors for the model strategy: the published acceptance curves of a
study's model and method, scaled by what the study's own engines measured, and each prior's
prediction error on the study's own data.

A prior is one published curve of mean acceptance length AL(N) (the catalog's
``acceptance_curves``, autotune/catalog/models.yaml, and the results of
autotune/catalog/published.yaml that state AL at two or more N for one source, dataset and
concurrency). Its per-position acceptance is a_i = AL(i) - AL(i - 1) from (0, 1.0), linear
between the published N (every position of a segment accepts alike) and 0 past the largest
published N (the source says nothing of longer drafts, so the prior adds nothing there).

A study measures E(N) = a_1 + ... + a_N at each N it ran, from its engines' per-position counts
(``accepted_per_pos`` over ``num_drafts``, pooled over concurrency levels: acceptance is nearly
flat across load, TensorRT-LLM #16914, SGLang #16818). The prior is scaled to what was measured:
E(n) = s · E_prior(n), s = sum over measured N of E(N) / sum of E_prior(N), so an unmeasured N's
acceptance follows the published shape, not a scalar α extrapolated with
(1 - α^(N+1)) / (1 - α) (issue #36: that overstates AL at N=8 by 9-62 % on InferenceX's curves).

The prediction error is real and out of sample: at each measured N, the AL the prior predicts
when scaled by the *other* measured N only (the published curve unscaled when only one N was
measured) against the AL measured there. Of several priors, the one of smallest error is used.

The strategy uses a prior only where the fitted model extrapolates acceptance (an N of a
prefix-consistent drafter beyond its longest measured run, any unmeasured N of the others), and
only for the centre it orders candidates by: the bounds that prune stay the model's
(:mod:`autotune.search.model_bounds`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from autotune.perf import Prediction
from autotune.spec.catalog import acceptance_curves, load_catalog
from autotune.spec.methods import METHODS
from autotune.spec.published import load_published
from autotune.store import MeasurementRecord


@dataclass(frozen=True)
class AcceptancePrior:
    """One published AL(N) curve of a model and method."""

    method: str
    label: str
    """Where it is from: dataset, condition and source, as short as stays unambiguous."""
    al_by_n: tuple[tuple[int, float], ...]
    """(N, AL) in N order, as published."""

    def accepted(self, n: int) -> float:
        """E_prior(n): linear in AL between published N (from (0, 1.0)), flat past the last."""
        prev_n, prev_al = 0, 1.0
        for k, al in self.al_by_n:
            if n <= k:
                return prev_al - 1.0 + (al - prev_al) * (n - prev_n) / (k - prev_n)
            prev_n, prev_al = k, al
        return prev_al - 1.0

    def per_position(self, n: int) -> tuple[float, ...]:
        """a_1..a_n of the prior (each at most 1)."""
        return tuple(
            min(max(self.accepted(i) - self.accepted(i - 1), 0.0), 1.0) for i in range(1, n + 1)
        )


@dataclass(frozen=True)
class PriorCheck:
    """A prior's out-of-sample prediction at one measured N."""

    n: int
    predicted_al: float
    measured_al: float

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted_al - self.measured_al) / self.measured_al


@dataclass(frozen=True)
class PriorFit:
    """A prior scaled to a study's measured acceptance, with its prediction error there."""

    prior: AcceptancePrior
    scale: float
    checks: tuple[PriorCheck, ...]
    measured: tuple[int, ...] = ()
    """The N whose acceptance was measured (what the scale rests on)."""

    def accepted(self, n: int) -> float:
        """Predicted E(n): the prior's shape times the measured scale, at most n."""
        return min(float(n), self.scale * self.prior.accepted(n))

    @property
    def error_pct(self) -> float:
        """Root mean square of the checks' errors, in percent of the measured AL."""
        if not self.checks:
            return math.inf
        return math.sqrt(sum(c.error_pct**2 for c in self.checks) / len(self.checks))


def priors_for(model: str, alias: str | None, method: str) -> list[AcceptancePrior]:
    """The published AL curves of ``model`` (its catalog alias, any name the catalog resolves,
    or its HF id) and ``method``: the catalog's acceptance curves, then the published results
    stating AL at two or more N for one source, dataset, draft and concurrency."""
    out = [
        AcceptancePrior(
            method,
            f"{c.dataset}{f' ({c.condition})' if c.condition else ''}, {c.source}",
            tuple(sorted((int(n), float(al)) for n, al in c.acceptance_length_by_n.items())),
        )
        for c in acceptance_curves(model, alias).get(method, ())
    ]
    catalog = load_catalog()
    found = (catalog.resolve(alias) if alias else None) or catalog.resolve(model)
    found = found or catalog.find_by_model(model)
    names = {model, *((found[0], found[1].model) if found else ())}
    groups: dict[tuple[str, str, str | None, int | None], dict[int, float]] = defaultdict(dict)
    for r in load_published().results:
        if r.method != method or not ({r.model, r.alias} & names):
            continue
        if r.num_speculative_tokens is None or r.mean_acceptance_length is None:
            continue
        key = (r.source, r.dataset, r.draft, r.concurrency)
        groups[key][r.num_speculative_tokens] = r.mean_acceptance_length
    for (source, dataset, _, conc), by_n in groups.items():
        if len(by_n) >= 2:
            where = f" at c={conc}" if conc is not None else ""
            out.append(
                AcceptancePrior(method, f"{dataset}{where}, {source}", tuple(sorted(by_n.items())))
            )
    return out


def measured_accepted(rows: Iterable[MeasurementRecord]) -> dict[int, float]:
    """N -> E(N) measured: per position, the accepted counts over the drafts, pooled over every
    row of that N (rows of one method and draft, one workload; rows without counts skipped)."""
    counts: dict[int, list[float]] = {}
    drafts: dict[int, int] = defaultdict(int)
    for r in rows:
        n = r.num_speculative_tokens
        if n <= 0 or r.num_drafts <= 0 or len(r.accepted_per_pos) != n:
            continue
        acc = counts.setdefault(n, [0.0] * n)
        for i, a in enumerate(r.accepted_per_pos):
            acc[i] += a
        drafts[n] += r.num_drafts
    return {n: sum(min(a / drafts[n], 1.0) for a in acc) for n, acc in counts.items()}


def fit_prior(prior: AcceptancePrior, measured: Mapping[int, float]) -> PriorFit | None:
    """``prior`` scaled to the ``measured`` E(N), with its leave-one-out checks; None when
    nothing was measured or the prior accepts nothing at the measured N."""
    ns = sorted(measured)
    if not ns:
        return None
    scale = _scale(prior, {n: measured[n] for n in ns})
    if scale is None:
        return None
    checks = []
    for n in ns:
        others = {m: measured[m] for m in ns if m != n}
        s = _scale(prior, others) if others else 1.0
        if s is None:
            continue
        predicted = 1.0 + min(float(n), s * prior.accepted(n))
        checks.append(PriorCheck(n, predicted, 1.0 + measured[n]))
    return PriorFit(prior, scale, tuple(checks), tuple(ns))


def best_fit(priors: Sequence[AcceptancePrior], measured: Mapping[int, float]) -> PriorFit | None:
    """The fit of smallest prediction error (the first listed on a tie); None without any."""
    fits = [f for f in (fit_prior(p, measured) for p in priors) if f is not None]
    return min(fits, key=lambda f: f.error_pct) if fits else None


def extrapolated(method: str, n: int, measured_ns: Iterable[int]) -> bool:
    """Whether the fitted model extrapolates E(n): for a prefix-consistent drafter n lies
    beyond its longest measured N (shorter N are measured prefixes), for the others n was not
    measured (a run's a_i holds for its own N only)."""
    ns = set(measured_ns)
    rule = METHODS.get(method)
    if rule is not None and rule.prefix_consistent:
        return bool(ns) and n > max(ns)
    return n not in ns


def ranked_throughput(method: str, n: int, pred: Prediction, fit: PriorFit | None) -> float:
    """The throughput an unmeasured config is ranked by: the model's centre ``pred``, or where
    the model extrapolates E(n) (:func:`extrapolated`) and a prior was fitted, the same step
    cost with the prior's E(n) (at a fixed step time throughput is c · (1 + E) / t_step),
    kept inside the model's range [low, high]."""
    al = pred.mean_acceptance_length
    if fit is None or pred.measured or not al or not extrapolated(method, n, fit.measured):
        return pred.throughput_tok_s
    centre = pred.throughput_tok_s * (1 + fit.accepted(n)) / al
    return min(max(centre, pred.low), pred.high)


def explain_lines(
    model: str, alias: str | None, workload: str, rows: Sequence[MeasurementRecord]
) -> list[str]:
    """``recommend --explain``'s lines on the acceptance priors: per measured method and
    draft, the prior used, its scale and its prediction error at every measured N."""
    groups: dict[tuple[str, str | None], list[MeasurementRecord]] = defaultdict(list)
    for r in rows:
        if r.workload == workload and r.num_speculative_tokens > 0:
            groups[(r.method, r.draft)].append(r)
    out = []
    for (method, draft), group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        priors = priors_for(model, alias, method)
        if not priors:
            continue
        fit = best_fit(priors, measured_accepted(group))
        if fit is None:
            continue
        checks = ", ".join(
            f"N={c.n} {c.predicted_al:.2f} vs {c.measured_al:.2f} ({c.error_pct:+.1f}%)"
            for c in fit.checks
        )
        name = f"{method}{f' {draft}' if draft else ''}"
        out.append(
            f"acceptance prior  {name}: {fit.prior.label}; scale {fit.scale:.2f}; "
            f"predicted AL vs measured (each N from the others): {checks}"
        )
    return out


def _scale(prior: AcceptancePrior, measured: Mapping[int, float]) -> float | None:
    expected = sum(prior.accepted(n) for n in measured)
    return sum(measured.values()) / expected if expected > 0 else None
