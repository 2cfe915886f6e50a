"""``autotune verify``: serve the recommendation with ``vllm serve``, drive it with ``vllm bench
serve`` at each of the study's concurrency levels on the study's prompts, do the same for the
reference (the baseline, or the best fixed N for a Dynamic SD table), and compare the
server-path speedup with the study's in-process one.

A Dynamic SD table is served against true off too (a third server, no ``speculative_config``):
its N = 0 bands still run the drafter and keep the KV lookahead reserved, so per level the
table is judged against off by the shared rule, and the answer is the table where those bands
tie with off or beat it, routing by load where one decidedly loses, else undecided
(:func:`autotune.verify.compare.dsd_answer`).
The same three servers measured the best fixed N against off, which is the fixed verification
of that config, so it is stored too."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autotune.engine._base import EngineConfig, MeasureSettings, PreparedWorkload
from autotune.engine.vllm.checks import imported_vllm_version
from autotune.errors import NoResultError, SpecError
from autotune.spec.labels import OFF_PROSE
from autotune.spec.loader import ResolvedStudy
from autotune.store import StudyRecord, TrialRecord
from autotune.verify.compare import (
    DEFAULT_TOLERANCE,
    LevelCheck,
    ServerRun,
    Verification,
    dsd_answer,
    median_or_none,
    off_verdict,
    table_n_at,
)

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]


def prepare_study_workload(resolved: ResolvedStudy, workload: str) -> PreparedWorkload:
    """The workload exactly as the study's tuner prepared it (``measurement.max_prompts`` and
    ``max_tokens`` caps applied), so the server gets the same prompts and output lengths."""
    from autotune.datasets import prepare

    if workload not in resolved.workloads:
        raise SpecError(f"the study has no workload {workload!r}", source="--workload")
    return prepare(*resolved.measured_workload(workload))


def engine_config(model: str, trial: TrialRecord) -> EngineConfig:
    """The engine a stored trial ran."""
    return EngineConfig(
        model=model,
        method=trial.method,
        num_speculative_tokens=trial.num_speculative_tokens,
        draft=trial.draft,
        method_params=dict(trial.method_params),
        tensor_parallel_size=trial.tensor_parallel_size,
        engine_args=dict(trial.engine_args),
        env=dict(trial.env),
    )


@dataclass(frozen=True)
class Plan:
    """What one verification serves and what it compares against."""

    mode: str
    label: str
    reference_label: str
    target: dict[str, Any]
    """AsyncEngineArgs keywords of the verified engine (the recommended command line)."""
    reference: dict[str, Any]
    study_numbers: dict[int, tuple[float | None, float | None, float | None]]
    """Per level: the study's tok/s of the target, of the reference, and the target's AL."""
    off: dict[str, Any] | None = None
    """Dynamic SD only: the plain engine (no speculative_config) the table is judged against."""
    study_off: dict[int, float | None] | None = None
    """Dynamic SD only: the study's tok/s of off per level."""
    fixed: Plan | None = None
    """Dynamic SD only: the fixed plan of the best fixed N (its reference is ``off``)."""


def _score_of(choice: Any, config: dict[str, Any] | None) -> Any:
    scores = [*choice.ranked, *choice.screened]
    if choice.baseline is not None:
        scores.append(choice.baseline)
    return next((s for s in scores if (s.speculative_config or None) == (config or None)), None)


def plan_fixed(rec: Any, trials: Sequence[TrialRecord], seed: int) -> Plan:
    from autotune.verify.server import engine_kwargs

    best = rec.choice.best
    label = best.label()
    if best.is_baseline:
        # "Off" is recommended: verify that verdict, i.e. that the study's best speculative
        # config also loses (or wins by as little) through the server.
        drafting = [s for s in (*rec.choice.ranked, *rec.choice.screened) if not s.is_baseline]
        if not drafting:
            raise NoResultError(f"study {rec.study.name!r} measured no speculative config")
        best = drafting[0]
        label = f"{best.label()} (best drafting config; recommended: off)"
    by_id = {t.id: t for t in trials}
    target_trial = by_id.get(best.trial_ids[0])
    base_trial = next((t for t in trials if t.method == "none" and t.state == "complete"), None)
    if target_trial is None or base_trial is None:
        raise NoResultError(f"study {rec.study.name!r} has no completed baseline to verify against")
    numbers = {}
    for choice in rec.per_level:
        t = _score_of(choice, best.speculative_config)
        b = choice.baseline
        numbers[choice.concurrency] = (
            t.median_tok_s if t else None,
            b.median_tok_s if b else None,
            t.mean_acceptance_length if t else None,
        )
    return Plan(
        mode="fixed",
        label=label,
        reference_label=OFF_PROSE,
        target=engine_kwargs(engine_config(rec.study.model, target_trial), seed),
        reference=engine_kwargs(engine_config(rec.study.model, base_trial), seed),
        study_numbers=numbers,
    )


def given_table(value: str, rec: Any, trials: Sequence[TrialRecord]) -> dict[str, Any]:
    """``verify --table``: a Dynamic SD ``--speculative-config`` (inline JSON, a JSON or YAML
    file, or ``-``, as ``check --config`` reads it) to serve instead of the recommended table.
    Its table is read by vLLM's own parser; its method must be one the study measured, whose
    engine (draft, knobs) it is served on. Raises SpecError (exit 2) before any server starts."""
    from autotune.engine.vllm.args import dsd_schedule
    from autotune.recommend.normalize import parse_config_text, read_config_arg

    text, source = read_config_arg(value)
    source = "--table" if source == "--config" else source
    config = parse_config_text(text, source)
    if config is None or "num_speculative_tokens_per_batch_size" not in config:
        raise SpecError(
            "expected a --speculative-config with num_speculative_tokens_per_batch_size "
            '(e.g. {"method": "ngram", "num_speculative_tokens": 2, '
            '"num_speculative_tokens_per_batch_size": [[1, 1, 2], [2, 64, 0]]})',
            source=source,
        )
    config = dict(config)
    table = dsd_schedule(config["num_speculative_tokens_per_batch_size"], source)
    largest = max(row[2] for row in table)
    if largest < 1:
        raise SpecError(
            "the table drafts at no batch size (every N is 0): that is a plain deployment",
            source=source,
            field="num_speculative_tokens_per_batch_size",
        )
    config["num_speculative_tokens_per_batch_size"] = table
    config.setdefault("num_speculative_tokens", largest)
    method = config["method"]
    if not any(
        t.state == "complete" and t.speculative_config and t.method == method for t in trials
    ):
        raise SpecError(
            f"study {rec.study.name!r} measured no {method} config: the table is served on "
            "the engine of a measured config of its method",
            source=source,
            field="method",
        )
    return config


def plan_dsd(
    rec: Any, trials: Sequence[TrialRecord], seed: int, given: dict[str, Any] | None = None
) -> Plan:
    """The Dynamic SD table (``given``, else the recommended one) vs the best fixed N. The
    study's number for the table at a level is that of the fixed config the table runs there
    (its N, or the baseline where N is 0)."""
    from autotune.engine.vllm.args import resolve_ref
    from autotune.recommend.render import dsd_config
    from autotune.verify.server import engine_kwargs

    dsd = given if given is not None else dsd_config(rec.per_level)
    best = rec.choice.best
    if dsd is None:
        raise NoResultError(
            "speculation wins at no level: there is no Dynamic SD table to verify (give one "
            "with --table)"
        )
    if best.is_baseline:
        # off is the one config for all levels, yet a level drafts in the table: the fixed
        # reference is the best drafting config (what plan_fixed serves then)
        best = next(s for s in (*rec.choice.ranked, *rec.choice.screened) if not s.is_baseline)
    by_id = {t.id: t for t in trials}
    fixed_trial = by_id[best.trial_ids[0]]
    lead = next(
        (
            t
            for t in trials
            if t.state == "complete"
            and t.speculative_config
            and t.speculative_config.get("method") == dsd["method"]
        ),
        fixed_trial,
    )
    target = engine_kwargs(engine_config(rec.study.model, lead), seed)
    spec = dict(dsd)
    if isinstance(spec.get("model"), str):
        spec["model"] = resolve_ref(spec["model"])
    target["speculative_config"] = spec
    numbers = {}
    for choice in rec.per_level:
        n = table_n_at(
            dsd["num_speculative_tokens_per_batch_size"],
            choice.concurrency,
            dsd.get("num_speculative_tokens"),
        )
        if n == 0:
            t = choice.baseline
        else:
            t = next(
                (
                    s
                    for s in [*choice.ranked, *choice.screened]
                    if s.method == dsd["method"] and s.num_speculative_tokens == n
                ),
                None,
            )
        f = _score_of(choice, best.speculative_config)
        numbers[choice.concurrency] = (
            t.median_tok_s if t else None,
            f.median_tok_s if f else None,
            t.mean_acceptance_length if t else None,
        )
    table = dsd["num_speculative_tokens_per_batch_size"]
    fixed = plan_fixed(rec, trials, seed)
    return Plan(
        mode="dsd",
        label=f"Dynamic SD {dsd['method']} {table}",
        reference_label=f"fixed {best.label()}",
        target=target,
        reference=engine_kwargs(engine_config(rec.study.model, fixed_trial), seed),
        study_numbers=numbers,
        off=fixed.reference,
        study_off={
            c.concurrency: c.baseline.median_tok_s if c.baseline else None for c in rec.per_level
        },
        fixed=fixed,
    )


def serve_and_bench(
    kwargs: dict[str, Any],
    workload: PreparedWorkload,
    levels: Sequence[int],
    settings: MeasureSettings,
    *,
    repeats: int,
    warmups: int,
    workdir: Path,
    name: str,
    progress: Progress,
) -> tuple[str, dict[int, list[ServerRun]]]:
    """Start one server, run ``vllm bench serve`` at each level ``repeats`` times, stop it."""
    from autotune.verify.server import Server, bench_argv, bench_serve, requests_file

    runs: dict[int, list[ServerRun]] = {}
    with Server(kwargs, log=workdir / f"{name}-server.log") as server:
        progress(f"{name}: {server.command()}")
        for c in levels:
            n = settings.num_requests(workload, c)
            dataset = requests_file(workload, n, workdir)
            for r in range(repeats):
                argv = bench_argv(
                    server,
                    dataset,
                    concurrency=c,
                    num_requests=n,
                    temperature=workload.temperature,
                    seed=workload.seed + r,
                    warmups=warmups if r == 0 else 0,
                    chat_template=workload.chat_template,
                )
                run = bench_serve(argv, c)
                progress(
                    f"{name}: concurrency {c} repeat {r}: {run.output_tok_s:.1f} tok/s"
                    + (f", AL {run.acceptance_length:.2f}" if run.acceptance_length else "")
                )
                runs.setdefault(c, []).append(run)
        command = server.command()
    return command, runs


def verify(
    store: Any,
    model: str,
    workload: str,
    *,
    study: str | None = None,
    dsd: bool = False,
    table: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    repeats: int = 1,
    workdir: Path | None = None,
    progress: Progress | None = None,
) -> Verification:
    """Verify the recommendation for (model, workload) through vLLM's server and benchmark
    client (``dsd``: its Dynamic SD table; ``table``: the Dynamic SD config given, see
    :func:`given_table`); store the result with the study. Raises SpecError for bad input
    before any server starts."""
    from autotune.api import recommend
    from autotune.verify.server import scratch_dir

    if not tolerance > 0:
        raise SpecError("must be above 0 percent", source="--tolerance")
    if repeats < 1:
        raise SpecError("must be at least 1", source="--repeats")
    say = progress or (lambda _: None)
    rec = recommend(store, model, workload, None, study=study)
    resolved: ResolvedStudy = rec.resolved
    if resolved.landscape is not None or resolved.spec.engine.kind == "replay":
        raise SpecError(
            f"study {rec.study.name!r} replays a recorded landscape: there is no engine to "
            f"serve; verify a study measured on real engines",
            source="--study",
        )
    trials = store.trials(rec.study)
    seed = resolved.spec.seed
    given = None if table is None else given_table(table, rec, trials)
    plan = plan_dsd(rec, trials, seed, given) if dsd or given else plan_fixed(rec, trials, seed)
    prepared = prepare_study_workload(resolved, workload)
    notes: list[str] = []
    if prepared.digest != rec.choice.workload_digest:
        notes.append(
            f"note: the workload's prompts changed since the study measured them "
            f"(digest {prepared.digest[:12]} vs {rec.choice.workload_digest[:12]})"
        )
    m = resolved.spec.measurement
    settings = MeasureSettings.of(m)
    levels = sorted(plan.study_numbers)
    servers = [(plan.target, "verified"), (plan.reference, "reference")]
    if plan.off is not None:
        servers.append((plan.off, "off"))
    with scratch_dir(workdir) as wd:
        served = [
            serve_and_bench(
                config,
                prepared,
                levels,
                settings,
                repeats=repeats,
                warmups=m.warmup_requests,
                workdir=wd,
                name=name,
                progress=say,
            )
            for config, name in servers
        ]
    (target_cmd, target_runs), (ref_cmd, ref_runs) = served[0], served[1]
    checks = [_level(c, plan.study_numbers[c], target_runs[c], ref_runs[c]) for c in levels]
    common = dict(
        study=rec.study.name,
        model=rec.model_alias or rec.model,
        workload=workload,
        tolerance=tolerance,
        vllm_version=imported_vllm_version(),  # imported by the benchmark client
        notes=tuple(notes),
    )
    answer = None
    off_cmd = ""
    if plan.off is not None and plan.study_off is not None and plan.fixed is not None:
        off_cmd, off_runs = served[2]
        table_config: dict[str, Any] = plan.target["speculative_config"]
        rows = table_config["num_speculative_tokens_per_batch_size"]
        checks = [
            _against_off(
                lv,
                rows,
                table_config.get("num_speculative_tokens"),
                target_runs[lv.concurrency],
                off_runs[lv.concurrency],
                plan.study_off.get(lv.concurrency),
            )
            for lv in checks
        ]
        answer = dsd_answer(rows, checks)
        # the fixed N against off through the same servers: the fixed verification, stored too
        fixed = plan.fixed
        fixed_result = Verification(
            **common,  # type: ignore[arg-type]
            mode=fixed.mode,
            label=fixed.label,
            reference_label=fixed.reference_label,
            speculative_config=fixed.target.get("speculative_config"),
            reference_config=None,
            command=ref_cmd,
            reference_command=off_cmd,
            levels=tuple(
                _level(c, fixed.study_numbers[c], ref_runs[c], off_runs[c]) for c in levels
            ),
        )
        save(store, rec.study, fixed_result)
    result = Verification(
        **common,  # type: ignore[arg-type]
        mode=plan.mode,
        label=plan.label,
        reference_label=plan.reference_label,
        speculative_config=plan.target.get("speculative_config"),
        reference_config=plan.reference.get("speculative_config"),
        command=target_cmd,
        reference_command=ref_cmd,
        levels=tuple(checks),
        off_command=off_cmd,
        dsd_answer=answer,
    )
    save(store, rec.study, result)
    return result


def _level(
    c: int,
    study: tuple[float | None, float | None, float | None],
    target: Sequence[ServerRun],
    reference: Sequence[ServerRun],
) -> LevelCheck:
    study_tok, study_ref, study_al = study
    return LevelCheck(
        concurrency=c,
        study_tok_s=study_tok,
        study_reference_tok_s=study_ref,
        study_al=study_al,
        server_tok_s=median_or_none([x.output_tok_s for x in target]) or 0.0,
        server_reference_tok_s=median_or_none([x.output_tok_s for x in reference]) or 0.0,
        server_al=median_or_none([x.acceptance_length for x in target]),
        server_runs=len(target),
    )


def _against_off(
    lv: LevelCheck,
    table: Sequence[Sequence[int]],
    cap: int | None,
    table_runs: Sequence[ServerRun],
    off_runs: Sequence[ServerRun],
    study_off: float | None,
) -> LevelCheck:
    """The level with the table judged against true off (:func:`off_verdict`)."""
    margin, verdict = off_verdict(
        [x.output_tok_s for x in table_runs], [x.output_tok_s for x in off_runs]
    )
    return replace(
        lv,
        table_n=table_n_at(table, lv.concurrency, cap),
        study_off_tok_s=study_off,
        server_off_tok_s=median_or_none([x.output_tok_s for x in off_runs]),
        off_margin_pct=margin,
        off_verdict=verdict,
    )


def save(store: Any, study: StudyRecord, v: Verification) -> None:
    store.save_verification(
        study,
        workload=v.workload,
        mode=v.mode,
        passed=v.passed,
        tolerance=v.tolerance,
        result=v.to_json(),
        vllm_version=v.vllm_version or None,
    )


def latest(store: Any, study: StudyRecord, workload: str | None = None) -> list[Any]:
    """The newest verification per (workload, mode) of a study: ``(created_at, Verification)``."""
    newest: dict[tuple[str, str], Any] = {}
    for created_at, data in store.verifications(study, workload):
        if data.get("mode") not in ("fixed", "dsd"):
            continue  # a `check --measure` result (autotune.verify.remeasure) shares the table
        v = Verification.from_json(data)
        newest[(v.workload, v.mode)] = (created_at, v)
    return [newest[k] for k in sorted(newest)]
