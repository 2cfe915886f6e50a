"""``autotune observe``: a live server's acceptance and concurrency beside the study's, and the
N the study's perf model predicts best for that traffic. Read-only: it only GETs ``/metrics``
and reads the store."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import NoResultError, SpecError
from autotune.observe.predict import LivePrediction, family_points, predict_live, study_acceptance
from autotune.observe.window import Window, observe_window
from autotune.spec.labels import OFF

_NOT_FAMILY = ("num_speculative_tokens", "num_speculative_tokens_per_batch_size")


@dataclass(frozen=True)
class Observation:
    study: str
    model: str
    workload: str
    speculative_config: dict[str, Any]
    window: Window
    study_acceptance_per_pos: tuple[float, ...]
    study_mean_acceptance_length: float | None
    prediction: LivePrediction | None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {
            "study": self.study,
            "model": self.model,
            "workload": self.workload,
            "speculative_config": self.speculative_config,
            "live": self.window.to_json(),
            "study_acceptance_per_pos": list(self.study_acceptance_per_pos),
            "study_mean_acceptance_length": self.study_mean_acceptance_length,
            "prediction": self.prediction.to_json() if self.prediction else None,
            "notes": list(self.notes),
        }


def family_key(config: Mapping[str, Any] | None) -> str:
    """Equal for configs that differ in N only (the same method, draft and knobs)."""
    import json

    from autotune.recommend.normalize import normalize

    norm = normalize(config) or {}
    return json.dumps({k: v for k, v in norm.items() if k not in _NOT_FAMILY}, sort_keys=True)


def observe(
    store: Any,
    url: str,
    *,
    model: str,
    workload: str,
    config: dict[str, Any] | None = None,
    study: str | None = None,
    duration_s: float = 60.0,
    interval_s: float = 1.0,
    timeout_s: float = 5.0,
    on_sample: Callable[[float, Any], None] | None = None,
) -> Observation:
    """Read ``url`` for ``duration_s`` and compare with the study of (model, workload). Raises
    SpecError (exit 2) for bad flags or a server that cannot be read as a speculating vLLM,
    NoResultError (exit 1) when the store never measured the pair or the config."""
    from autotune.api import recommend, select_study
    from autotune.evidence.cells import Evidence

    if not duration_s > 0:
        raise SpecError("must be above 0 seconds", source="--duration")
    if not 0 < interval_s <= duration_s:
        raise SpecError("must be above 0 and at most --duration", source="--interval")
    if config is not None and not config:
        raise SpecError("the deployed config drafts nothing: nothing to observe", source="--config")
    sel = select_study(store, model, workload, study)
    rows = Evidence.of(sel.rows).workload(workload)
    notes = list(sel.notes)
    if config is None:
        rec = recommend(store, model, workload, study=sel.study.name)
        config = rec.speculative_config
        if not config:
            raise SpecError(
                f"study {sel.study.name!r} recommends no speculation for {workload}: give the "
                f"deployed config",
                source="--config",
            )
        notes.append("deployed config taken as the study's recommendation (--config to set it)")
    method = str(config.get("method", ""))
    n_deployed = int(config.get("num_speculative_tokens", 0))
    key = family_key(config)
    family = [r for r in rows if r.speculative_config and family_key(r.speculative_config) == key]
    if not family:
        from autotune.recommend.check import label

        raise NoResultError(
            f"study {sel.study.name!r} never measured {label(config)} with these settings for "
            f"{model}/{workload}; nothing to compare the live traffic with"
        )
    window = observe_window(url, duration_s, interval_s, timeout_s=timeout_s, on_sample=on_sample)
    if window.num_speculative_tokens != n_deployed:
        raise SpecError(
            f"the server drafts {window.num_speculative_tokens} positions but the config has "
            f"num_speculative_tokens={n_deployed}; give the deployed config",
            source="--config",
        )
    baseline = [r for r in rows if not r.speculative_config]
    points = family_points([*family, *baseline], method)
    study_acc = study_acceptance(points, method, n_deployed)
    prediction: LivePrediction | None = None
    busy = window.busy_concurrency()
    if not busy:
        notes.append("no sample saw a running request: no prediction (sample more often)")
    else:
        try:
            prediction = predict_live(points, method, n_deployed, window.acceptance_per_pos, busy)
        except ValueError as exc:
            notes.append(f"no prediction: {exc}")
    return Observation(
        study=sel.study.name,
        model=sel.study.model_alias or sel.study.model,
        workload=workload,
        speculative_config=dict(config),
        window=window,
        study_acceptance_per_pos=study_acc,
        study_mean_acceptance_length=1.0 + sum(study_acc) if study_acc else None,
        prediction=prediction,
        notes=tuple(notes),
    )


def _share(x: float) -> str:
    return f"{x * 100:.0f}%" if x >= 0.01 or x == 0 else "<1%"


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def render(o: Observation) -> str:
    w = o.window
    cfg = o.speculative_config
    label = f"{cfg.get('method')} N={cfg.get('num_speculative_tokens')}"
    al = w.mean_acceptance_length
    lines = [
        f"observe {w.url} for {w.duration_s:.0f} s: {label} on {o.model} / {o.workload} "
        f"(study {o.study})",
        f" counters (window deltas): num_drafts {w.num_drafts}, num_draft_tokens "
        f"{w.num_draft_tokens}, num_accepted_tokens {w.num_accepted_tokens}, accepted per "
        f"position {list(w.accepted_per_pos)}",
        f" {'':<26} {'live':>6} {'study':>6}",
        f" {'acceptance length':<26} {al or 0:>6.2f} {o.study_mean_acceptance_length or 0:>6.2f}",
    ]
    for i, a in enumerate(w.acceptance_per_pos):
        s = o.study_acceptance_per_pos[i] if i < len(o.study_acceptance_per_pos) else None
        lines.append(
            f" {f'acceptance at position {i + 1}':<26} {a:>6.2f} "
            f"{'-' if s is None else format(s, '.2f'):>6}"
        )
    share = ", ".join(f"{c}: {_share(v)}" for c, v in w.concurrency().items())
    lines.append(f" running requests seen ({len(w.running_samples)} samples): {share}")
    p = o.prediction
    if p is not None:
        mix = ", ".join(f"c={c} {_share(v)}" for c, v in p.weights.items())
        best = p.best
        if best.num_speculative_tokens == p.deployed_n:
            verdict = f"the deployed N={p.deployed_n} is predicted best for this traffic"
        else:
            what = OFF if best.num_speculative_tokens == 0 else f"N={best.num_speculative_tokens}"
            verdict = (
                f"{what} is predicted {_pct(best.gain)} (range {_pct(best.gain_low)} to "
                f"{_pct(best.gain_high)}) against the deployed N={p.deployed_n}"
            )
        lines.append(f" prediction (study's step cost, live acceptance; traffic {mix}): {verdict}")
        others = ", ".join(
            f"{OFF if c.num_speculative_tokens == 0 else f'N={c.num_speculative_tokens}'} "
            f"{_pct(c.gain)}"
            for c in p.candidates
        )
        lines.append(f"  every N against the deployed: {others}")
        lines.append(
            f'  Dynamic SD table: {{"method": "{p.method}", '
            f'"num_speculative_tokens_per_batch_size": {[list(r) for r in p.dsd_table]}}}'
        )
        lines.extend(f"  note: {n}" for n in p.notes)
    lines.extend(f"note: {n}" for n in o.notes)
    return "\n".join(lines)
