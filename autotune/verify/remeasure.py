"""``autotune check --measure``: the deployed config and the baseline started once each on the
vLLM installed now, through the study's own engine path (the same engine actors and backend,
prompts, concurrency levels and ``MeasureSettings``, ``min_measure_s`` included), compared with
the study (``autotune.recommend.measured``) and stored with its vLLM version.

Both engines are started and held warm at once (two engine actors, idle in turn); each level is
then measured in interleaved pairs, target then baseline, so a load that comes and goes on a
shared runner slows both alike, and pairs are added while the gate's rule
(:func:`autotune.recommend.speedup_gate.judge_level`) says undecided for a reason more pairs
can change, up to ``max_pairs``."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotune.engine._base import EngineConfig, Measurement, MeasureSettings
from autotune.errors import EngineError, NoResultError, SpecError
from autotune.recommend.measured import (
    DEFAULT_ACCEPTANCE_TOLERANCE,
    MODE,
    MeasuredCheck,
    compare_acceptance,
    pooled,
)
from autotune.recommend.speedup_gate import (
    DEFAULT_SPEEDUP_TOLERANCE_PCT,
    LevelSpeedup,
    SpeedupCheck,
    paired_level,
    speedup_band,
)
from autotune.store import TrialRecord

Progress = Callable[[str], None]
_NOT_PARAMS = ("method", "model", "num_speculative_tokens")
MIN_PAIRS = 3
"""Interleaved pairs per level before the first verdict (a t-interval needs two; three keep
its quantile at 4.3 rather than 12.7)."""
DEFAULT_MAX_PAIRS = 12
"""The cap on interleaved pairs per level (``--max-pairs``)."""
SETTLE_S = 0.25
"""Pause between the two engines' turns: OpenMP threads spin-wait ~200 ms after their work
(``KMP_BLOCKTIME``), which would otherwise slow the other engine's first requests."""


def _reference_trial(
    trials: Sequence[TrialRecord], deployed: Mapping[str, Any]
) -> tuple[TrialRecord, bool] | None:
    """The study's trial of the deployed config (exact: True), else one of the same method and
    N whose knobs differ (False), else None."""
    from autotune.recommend.normalize import key

    done = [t for t in trials if t.state == "complete" and t.speculative_config]
    exact = next((t for t in done if key(t.speculative_config) == key(deployed)), None)
    if exact is not None:
        return exact, True
    near = next(
        (
            t
            for t in done
            if t.method == deployed.get("method")
            and t.num_speculative_tokens == deployed.get("num_speculative_tokens")
        ),
        None,
    )
    return (near, False) if near is not None else None


def deployed_engine(model: str, trial: TrialRecord, deployed: Mapping[str, Any]) -> EngineConfig:
    """The engine of the deployed config: the study's trial's engine args and environment with
    the deployed config's knobs."""
    return EngineConfig(
        model=model,
        method=str(deployed["method"]),
        num_speculative_tokens=int(deployed["num_speculative_tokens"]),
        draft=trial.draft,
        method_params={k: v for k, v in deployed.items() if k not in _NOT_PARAMS},
        tensor_parallel_size=trial.tensor_parallel_size,
        engine_args=dict(trial.engine_args),
        env=dict(trial.env),
    )


def run_configs(
    pool: Any,
    configs: Sequence[EngineConfig],
    workload: Any,
    cells: Sequence[Any],
    settings: MeasureSettings,
    *,
    warmup_requests: int,
    start_timeout_s: float,
    progress: Progress,
) -> tuple[list[list[Measurement]], str]:
    """Each config on one engine of ``pool``, every cell; (measurements per config, vLLM
    version). EngineError when an engine fails."""
    from autotune.cluster.jobs import Failed, Finished, Measured, Started, TrialJob

    out: list[list[Measurement]] = [[] for _ in configs]
    version = ""
    for i, config in enumerate(configs):
        pool.submit(
            TrialJob(
                trial_id=i,
                config=config,
                workloads=[workload],
                cells=list(cells),
                settings=settings,
                warmup_requests=warmup_requests,
                start_timeout_s=start_timeout_s,
            )
        )
    pending = set(range(len(configs)))
    while pending:
        for event in pool.poll(1.0):
            label = configs[event.trial_id].label()
            if isinstance(event, Started):
                version = event.info.vllm_version
                progress(f"{label}: engine started in {event.info.engine_start_s:.0f} s")
            elif isinstance(event, Measured):
                m = event.measurement
                out[event.trial_id].append(m)
                progress(
                    f"{label}: concurrency {m.concurrency} repeat {m.repeat}: "
                    f"{m.output_throughput_tok_s:.1f} tok/s"
                )
            elif isinstance(event, Failed):
                raise EngineError(f"{label}: {event.reason}")
            elif isinstance(event, Finished):
                pending.discard(event.trial_id)
    return out, version


def run_interleaved(
    pool: Any,
    configs: Sequence[EngineConfig],
    workload: Any,
    levels: Sequence[int],
    settings: MeasureSettings,
    judge: Callable[[int, Sequence[tuple[Measurement, Measurement]]], LevelSpeedup],
    *,
    max_pairs: int,
    warmup_requests: int,
    start_timeout_s: float,
    progress: Progress,
) -> tuple[dict[int, LevelSpeedup], list[Measurement], str]:
    """Start the target and the baseline on two engine actors of ``pool`` (a RayPool with two
    slots) and measure each level in interleaved pairs until ``judge`` is no longer undecided
    (at least :data:`MIN_PAIRS`, at most ``max_pairs``). (judged level per concurrency, the
    target's measurements, vLLM version). EngineError when an engine fails."""
    from autotune.cluster.jobs import TrialJob

    actors = []
    try:
        for config in configs:
            actors.append(pool.new_actor(TrialJob(0, config, [workload], [], settings)))

        def get(ref: Any, timeout: float, what: str) -> Any:
            try:
                return pool.get(ref, timeout)
            except Exception as exc:
                raise EngineError(f"{what}: {type(exc).__name__}: {exc}") from exc

        version = ""
        # one after the other, each within its own timeout: two starts at once on a small
        # machine compete for its cores and each takes as long as both
        for config, a in zip(configs, actors, strict=True):
            info = get(a.start.remote(config, [workload]), start_timeout_s,
                       f"{config.label()}: engine start")  # fmt: skip
            version = info.vllm_version
            progress(f"{config.label()}: engine started in {info.engine_start_s:.0f} s")
        if warmup_requests:
            for config, a in zip(configs, actors, strict=True):
                get(a.warmup.remote(workload.name, warmup_requests), settings.timeout_s,
                    f"{config.label()}: warm-up")  # fmt: skip
        target_runs: list[Measurement] = []
        judged: dict[int, LevelSpeedup] = {}
        for c in levels:
            pairs: list[tuple[Measurement, Measurement]] = []
            while True:
                r = len(pairs)
                pair = []
                for config, a in zip(configs, actors, strict=True):
                    time.sleep(SETTLE_S)
                    m = get(a.measure.remote(workload.name, c, r, settings), settings.timeout_s,
                            f"{config.label()}: concurrency {c}")  # fmt: skip
                    pair.append(m)
                    progress(
                        f"{config.label()}: concurrency {c} pair {r}: "
                        f"{m.output_throughput_tok_s:.1f} tok/s"
                    )
                pairs.append((pair[0], pair[1]))
                target_runs.append(pair[0])
                if len(pairs) < MIN_PAIRS:
                    continue
                level = judge(c, pairs)
                if level.outcome != "undecided" or len(pairs) >= max_pairs:
                    break
                if level.undecided_by == "starts":
                    progress(
                        f"concurrency {c}: undecided, the noise of the engine starts alone "
                        f"(start-to-start ±{level.start_noise_pct or 0:.1f}%, and the study's "
                        f"runs) spans the band's edge; no more pairs"
                    )
                    break
                progress(f"concurrency {c}: undecided after {len(pairs)} pairs; one more")
            judged[c] = level
        for a in actors:
            get(a.stop.remote(), 120, "engine stop")
        return judged, target_runs, version
    finally:
        for a in actors:
            pool.kill(a)


def check_measured(
    store: Any,
    model: str,
    workload: str,
    deployed: dict[str, Any] | None,
    *,
    study: str | None = None,
    concurrency: int | None = None,
    tolerance_pct: float = 1.0,
    acceptance_tolerance: float = DEFAULT_ACCEPTANCE_TOLERANCE,
    speedup_tolerance_pct: float | None = None,
    acceptance_only: bool = False,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    progress: Progress | None = None,
) -> MeasuredCheck:
    """Measure ``deployed`` (and the baseline) now, compare with the study, store the result.
    Every input is checked before an engine starts."""
    from autotune.api import recommend
    from autotune.cluster.jobs import Cell
    from autotune.cluster.pools import pool_factory
    from autotune.datasets import prepare
    from autotune.evidence.cells import Evidence, baseline_drift
    from autotune.recommend import check as gate
    from autotune.recommend.deployed import deployed_label
    from autotune.recommend.normalize import key
    from autotune.verify.run import engine_config

    say = progress or (lambda _: None)
    if not 0 <= acceptance_tolerance < 1:
        raise SpecError("must be at least 0 and below 100 percent", source="--acceptance-tolerance")
    if max_pairs < MIN_PAIRS:
        raise SpecError(f"must be at least {MIN_PAIRS}", source="--max-pairs")
    if not deployed:
        raise SpecError(
            "the deployed config drafts nothing: --measure has no acceptance or speedup to "
            "measure (run check without --measure)",
            source="--config",
        )
    rec = recommend(store, model, workload, concurrency, study=study)
    resolved = rec.resolved
    if resolved.landscape is not None or resolved.spec.engine.kind == "replay":
        raise SpecError(
            f"study {rec.study.name!r} replays a recorded landscape: there is no engine to "
            f"measure on",
            source="--study",
        )
    trials = store.trials(rec.study)
    found = _reference_trial(trials, deployed)
    if found is None:
        raise NoResultError(
            f"study {rec.study.name!r} never measured {gate.label(deployed)} for "
            f"{model}/{workload}: no acceptance to compare with"
        )
    ref_trial, exact = found
    base_trial = next((t for t in trials if t.method == "none" and t.state == "complete"), None)
    if base_trial is None and not acceptance_only:
        raise NoResultError(
            f"study {rec.study.name!r} has no completed baseline; use --acceptance-only"
        )
    notes: list[str] = []
    if not exact:
        from autotune.recommend.normalize import differences

        notes.append(
            f"the study never measured this config exactly; acceptance is compared with its "
            f"{ref_trial.method} N={ref_trial.num_speculative_tokens} "
            f"({differences(deployed, [ref_trial.speculative_config])})"
        )
    evidence = Evidence.of(rec.rows)
    digest = evidence.digest(workload) or ""
    rows = evidence.workload(workload)
    levels = sorted({r.concurrency for r in rows})
    if concurrency is not None:
        levels = [concurrency]
    rows = [r for r in rows if r.concurrency in levels]
    ref_rows = [r for r in rows if r.trial_id == ref_trial.id]
    ref_key = key(ref_trial.speculative_config)
    ref_rows = ref_rows or [
        r for r in rows if r.speculative_config and key(r.speculative_config) == ref_key
    ]
    base_rows = [r for r in rows if not r.speculative_config]
    choice = gate.check(
        rec.choice,
        deployed,
        study=rec.study.name,
        tolerance_pct=tolerance_pct,
        installed_vllm=None,  # re-measured below instead of "stale"
        levels=levels,
    )
    configs = [deployed_engine(rec.study.model, ref_trial, deployed)]
    if not acceptance_only:
        assert base_trial is not None
        configs.append(engine_config(rec.study.model, base_trial))
    prepared = prepare(*resolved.measured_workload(workload))
    if prepared.digest != digest:
        notes.append(
            f"the workload's prompts changed since the study measured them (digest "
            f"{prepared.digest[:12]} vs {digest[:12]})"
        )
    m = resolved.spec.measurement
    settings = MeasureSettings.of(m)
    cells = [
        Cell(workload=workload, concurrency=c, repeat=r)
        for r in range(resolved.spec.repeats)
        for c in levels
    ]
    drift = [d.drift_pct for d in baseline_drift(rows) if d.workload == workload]
    band, noise, words = speedup_band(drift, speedup_tolerance_pct, DEFAULT_SPEEDUP_TOLERANCE_PCT)
    band_pct = 100.0 * (band or 0.0)
    sampled = prepared.temperature > 0
    speed = None
    # two slots: the target and the baseline are held warm at once and measured in turn
    pool = pool_factory(resolved, None, 1 if acceptance_only else 2, False)(resolved)
    try:
        if acceptance_only:
            (now_cfg,), version = run_configs(
                pool,
                configs,
                prepared,
                cells,
                settings,
                warmup_requests=m.warmup_requests,
                start_timeout_s=m.start_timeout_s,
                progress=say,
            )
        else:
            judged, now_cfg, version = run_interleaved(
                pool,
                configs,
                prepared,
                levels,
                settings,
                lambda c, pairs: paired_level(
                    c, ref_rows, base_rows, pairs, band_pct, study_noise=noise
                ),
                max_pairs=max_pairs,
                warmup_requests=m.warmup_requests,
                start_timeout_s=m.start_timeout_s,
                progress=say,
            )
            levels_judged = tuple(judged[c] for c in levels)
            if noise is None and any(lv.undecided_by == "starts" for lv in levels_judged):
                drifts = [abs(lv.baseline_drift_pct or 0.0) for lv in levels_judged]
                notes.append(
                    f"the baseline ran up to {max(drifts):.0f}% apart from the study's (same "
                    f"config, another engine start, on this runner): the study's one-run "
                    f"speedups are known only that closely here; measure the study with "
                    f"measurement.drift_check on a quiet runner for a gate that holds on a "
                    f"loaded one"
                )
            speed = SpeedupCheck(levels_judged, band, noise, words, max_pairs)
    finally:
        pool.shutdown()
    acc = compare_acceptance(
        pooled(ref_rows), pooled(now_cfg), acceptance_tolerance, sampled=sampled
    )
    study_versions = tuple(sorted({r.vllm_version for r in rows if r.vllm_version}))
    result = MeasuredCheck(
        study=rec.study.name,
        model=rec.model_alias or rec.model,
        workload=workload,
        # named apart from the study's config of the same name (autotune.recommend.deployed)
        label=deployed_label(deployed, [t.speculative_config for t in trials]),
        speculative_config=dict(deployed),
        reference_label=(
            f"{ref_trial.method} N={ref_trial.num_speculative_tokens}"
            + ("" if exact else " (nearest measured)")
        ),
        vllm_version=version,
        study_vllm_versions=study_versions,
        acceptance=acc,
        speedup=speed,
        choice_ok=choice.ok,
        choice_reason=choice.reason,
        notes=tuple(notes),
    )
    store.save_verification(
        rec.study,
        workload=workload,
        mode=MODE,
        passed=result.passed,
        tolerance=acceptance_tolerance,
        result=result.to_json(),
        vllm_version=version or None,
    )
    return result


def history(
    store: Any, study: Any, workload: str | None = None
) -> list[tuple[Any, dict[str, Any]]]:
    """Every stored measured check of a study, oldest first: ``(created_at, result JSON)``."""
    return [(when, data) for when, data in store.verifications(study, workload) if _is_check(data)]


def _is_check(data: Mapping[str, Any]) -> bool:
    return data.get("mode") == MODE
