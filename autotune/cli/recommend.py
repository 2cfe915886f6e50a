"""``autotune recommend``: the measured best --speculative-config for (model, workload), or the
published starting point when nothing is measured. Parses, calls ``api.answer``, renders."""

from __future__ import annotations

import json
import shlex
from typing import Any

import click

from autotune.cli._common import (
    POSITIVE_FLOAT,
    POSITIVE_INT,
    Context,
    console,
    emit_table,
    pass_ctx,
)
from autotune.recommend import render

FORMATS = ("json", "args", "yaml", "dsd")


@click.command("recommend")
@click.option(
    "--model", required=True, metavar="ALIAS", help="Catalog alias or HF id of the model."
)
@click.option("--workload", required=True, metavar="NAME", help="Workload name.")
@click.option(
    "--concurrency",
    type=POSITIVE_INT,
    default=None,
    metavar="C",
    help="Answer for this concurrency level [default: one config for all levels].",
)
@click.option(
    "--context",
    type=click.IntRange(min=1),
    default=None,
    metavar="L",
    help="Answer for requests of L prompt tokens, from the study's context-length bucket "
    "(context_lengths) at or above L, else the largest; a note on stderr says which "
    "[default: the workload as measured; with only buckets measured, --format dsd prints one "
    "table per bucket].",
)
@click.option(
    "--traffic",
    default=None,
    metavar="C:SHARE,...",
    help="Answer for a traffic mix: shares of time at each concurrency, e.g. 1:0.2,8:0.5,32:0.3 "
    "(the config with the best share-weighted geometric mean of speedups; a level between "
    "measured ones is answered from its neighbours).",
)
@click.option(
    "--request-rate",
    default=None,
    metavar="R|R:SHARE,...",
    help="Answer for an arrival rate of R requests/s: the config with the lowest mean latency "
    "at the concurrency it would run at (Little's law, c = R x latency, between measured "
    "levels); exit 2 beyond them. A mix of rates with shares of time (0.5:0.2,2:0.5,8:0.3) "
    "answers by the mean latency over the mix (docs/deployment-rates.md).",
)
@click.option(
    "--study",
    "study_name",
    default=None,
    metavar="NAME",
    help="Use this study [default: the newest that measured the pair].",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="json",
    show_default=True,
    help="json: the --speculative-config JSON; args: a full `vllm serve` line; "
    "yaml; dsd: a Dynamic SD config whose N follows the batch size.",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Also print throughput, speedup, acceptance, runner-up, confidence and provenance "
    "(on stderr), and the export that trains a draft when none accepts well.",
)
@click.option(
    "--source",
    type=click.Choice(("any", "measured", "published")),
    default="any",
    show_default=True,
    help="measured: only a study's measurements; published: only the published starting "
    "point; any: measured when the store has the pair, else published.",
)
@click.option(
    "--slo-p99-tpot-ms",
    "--slo-tpot-p99",
    "slo_tpot_p99",
    type=POSITIVE_FLOAT,
    default=None,
    metavar="MS",
    help="Latency SLO: only configs whose p99 time per output token is at most MS "
    "[default: the study's slo: block, if any]. Named as vLLM's benchmark JSON names the "
    "number (p99_tpot_ms); the earlier spelling --slo-tpot-p99 (and --slo-ttft-p99, "
    "--slo-itl-p99) still works.",
)
@click.option(
    "--slo-p99-ttft-ms",
    "--slo-ttft-p99",
    "slo_ttft_p99",
    type=POSITIVE_FLOAT,
    default=None,
    metavar="MS",
    help="Latency SLO: p99 time to first token at most MS.",
)
@click.option(
    "--slo-p99-itl-ms",
    "--slo-itl-p99",
    "slo_itl_p99",
    type=POSITIVE_FLOAT,
    default=None,
    metavar="MS",
    help="Latency SLO: p99 inter-token latency at most MS.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object: the config, its source, the low-confidence levels and, for a "
    "published starting point, the citation, hardware and mismatch labels.",
)
@pass_ctx
def recommend(
    ctx: Context,
    model: str,
    workload: str,
    concurrency: int | None,
    context: int | None,
    traffic: str | None,
    request_rate: str | None,
    study_name: str | None,
    fmt: str,
    explain: bool,
    source: str,
    slo_tpot_p99: float | None,
    slo_ttft_p99: float | None,
    slo_itl_p99: float | None,
    as_json: bool,
) -> None:
    """Print the recommended --speculative-config for a model and workload.

    Answers from the store's measurements: the finished study (status done) of the model that
    measured the workload most recently; with no finished one, the newest partial study, saying
    so on stderr. A study whose search space was not exhausted gets a line on stderr saying how
    many of its planned configs were measured. "null" means no speculative config beat running
    without one.

    With nothing measured for the pair (or --source published) it answers from the closest
    published result for the same model (autotune/catalog/published.yaml): one on the same
    workload family first, else one on any prompt set, labelled "workload not matched";
    results with a reported speedup before acceptance-only ones. N is the one the source states;
    where it states none, a cited recipe's (vLLM recipes), labelled "N from recipe"; a model
    with only a recipe is answered from it, labelled "recipe only". One line on stderr says it
    is a published starting point, cites it and says how to measure; exit 0. With nothing
    published either (e.g. the tiny test models) it exits 1.

    A level's answer is low-confidence when the winner's margin over the runner-up (or, for a
    drafter, over the baseline) is inside their measured noise (median ± 1.4826·MAD over
    repeats overlap), or when the winner's or the baseline's repeats spread more than the
    study's measurement.max_spread_pct: one "note: low confidence at concurrency C: ..." line
    per such level on stderr, "low_confidence" in --json; the exit code does not change.
    So is a level whose baseline drifted more than the study's measurement.precision_pct
    between its two runs (the drift check; "baseline_drift" in --json, "drift %" in --explain).
    --explain also lists the engine starts behind each level's answer, the drift check's and
    the confirmation starts' (measurement.confirm_starts) tagged, and for each measured method
    with a published acceptance curve for the model, that curve's AL at every measured N, scaled
    by the other measured N, against the AL measured there (the search's acceptance prior).

    A level is a tie when the winner's margin over another config is inside their combined
    95% confidence intervals of the median: the preferred of them (off, then the smaller N) is
    the answer, a "note: tie at concurrency C: ..." line on stderr says so, and --json carries
    "tie": true and "tied_with".

    A level is degenerate when more than half of its replies ended in a repeating loop (drafts
    are accepted on loops, so the speedup overstates real replies): a "note: degenerate outputs
    at ..." line on stderr, "degenerate": true and the figures in "output_degeneracy" in --json.

    A study with context_lengths measures each workload once per context-length bucket (the
    workloads WORKLOAD@ctxL). --context L answers from the bucket at or above L prompt tokens,
    else the largest, with a note on stderr saying which; without it such a workload has no
    single answer, and --format dsd prints one Dynamic SD table per bucket with the range of
    prompt tokens each answers (deploy them behind a router: vLLM has no per-context switch).

    Under a latency SLO (the --slo-* options, else the study's slo: block) only configs whose
    measured p99 latencies (median over repeats) meet every limit are chosen; when none does it
    exits 1 naming the closest. Published starting points carry no latency, so an SLO never
    falls back to them.

    Deployment: without --concurrency the one answer for all levels is followed by a
    "note: at concurrency C the answer ... loses to ..." line per level where another config
    beats it outside a tie ("loses_at" in --json). --concurrency between two measured levels is
    answered from its neighbours (score ratios weighted by distance in log-concurrency,
    "answered_from_levels" in --json); --traffic weighs the levels by their share of time.

    \b
    Example:
      autotune recommend --model tiny --workload code --traffic 1:0.2,4:0.5,8:0.3
      autotune recommend --model kimi --workload code
      autotune recommend --model tiny --workload code --concurrency 8 --slo-p99-itl-ms 20
      autotune recommend --model tiny --workload code --concurrency 4 --format args
      autotune recommend --model tiny --workload code --request-rate 4
      autotune recommend --model tiny --workload code --request-rate 0.5:0.3,2:0.7
      # after a study with context_lengths: [1024, 8192] (the shipped studies have none)
      autotune recommend --model tiny --workload code --context 4096 --explain
    """
    from autotune import api
    from autotune.errors import NoResultError, SpecError
    from autotune.spec.slo import SLO

    slo = SLO(p99_tpot_ms=slo_tpot_p99, p99_ttft_ms=slo_ttft_p99, p99_itl_ms=slo_itl_p99)
    missing = ctx.store_file_missing()
    if context is not None:  # the context-length axis: answer from the bucket for L
        if source == "published":
            raise SpecError(
                "picks a measured bucket; drop it or use --source measured", source="--context"
            )
        if missing:
            raise NoResultError("nothing measured yet (the store does not exist): no bucket")
        pick = api.context_bucket(ctx.store(), model, workload, context, study_name)
        click.echo(f"note: {pick.line()}", err=True)
        workload = pick.workload
    elif fmt == "dsd" and not missing and source != "published":
        found = api.measured_buckets(ctx.store(), model, workload, study_name)
        if found and api.per_context_only(ctx.store(), model, workload, study_name):
            _print_context_dsd(ctx, model, found, concurrency, study_name, slo, as_json)
            return
    if request_rate is not None:  # the arrival-rate answer (autotune.recommend.rate)
        from autotune.cli.rate import print_rate_answer

        clash = [f for f, v in (("--concurrency", concurrency), ("--traffic", traffic)) if v]
        clash += ["--slo-*"] if slo else []
        clash += [] if fmt == "json" else [f"--format {fmt}"]
        clash += [] if source != "published" else ["--source published"]
        print_rate_answer(ctx, model, workload, request_rate, study_name, as_json, clash)
        return
    mix, normalised = (None, None) if traffic is None else parse_traffic(traffic)
    if mix is not None and concurrency is not None:
        raise SpecError("give --traffic or --concurrency, not both", source="--traffic")
    if normalised:
        click.echo(f"note: {normalised}", err=True)
    try:
        answer = api.answer(
            None if missing else ctx.store,
            model,
            workload,
            concurrency,
            study=study_name,
            source=source,
            slo=slo or None,
            traffic=mix,
        )
    except NoResultError:
        # Measured per context-length bucket only: say so rather than "nothing measured".
        unplain = context is None and not missing and source != "published"
        if unplain and (why := api.per_context_only(ctx.store(), model, workload, study_name)):
            raise NoResultError(why) from None
        raise
    if isinstance(answer, api.PriorRecommendation):
        unplain = context is None and not missing and source == "any"
        if unplain and (why := api.per_context_only(ctx.store(), model, workload, study_name)):
            raise NoResultError(why)
        _print_prior(answer, fmt, explain, as_json)
        return
    rec = answer
    lines = (
        rec.answered_from(),
        *rec.notes,
        *(loss.line() for loss in rec.losses()),
        *(lc.line() for lc in rec.low_confidence),
        *(t.tie_line() for t in rec.ties),
        *(c.degenerate_line() for c in rec.degenerate),
    )
    for note in lines:
        click.echo(f"note: {note}", err=True)
    config = rec.speculative_config
    shown = render.dsd_config(rec.per_level) if fmt == "dsd" else config
    if fmt == "dsd":  # the table served against true off (autotune verify --dsd)
        from autotune.verify import dsd_lines

        for note in dsd_lines(ctx.store(), rec.study, workload):
            click.echo(f"note: {note}", err=True)
    if as_json:
        click.echo(json.dumps(rec.to_json(shown)))
    elif fmt in ("json", "dsd"):
        click.echo(render.speculative_json(shown))
    elif fmt == "yaml":
        click.echo(
            render.as_yaml(
                config,
                model=rec.model,
                tensor_parallel_size=rec.tensor_parallel_size,
                engine_args=rec.engine_args,
            ),
            nl=False,
        )
    else:
        click.echo(
            render.serve_args(
                rec.model,
                config,
                tensor_parallel_size=rec.tensor_parallel_size,
                engine_args=rec.engine_args,
            )
        )
    if explain:
        _explain(rec)


def _print_context_dsd(
    ctx: Context,
    model: str,
    buckets: dict[int, str],
    concurrency: int | None,
    study_name: str | None,
    slo: Any,
    as_json: bool,
) -> None:
    """`--format dsd` for a workload measured per context-length bucket: one Dynamic SD table
    per bucket, with the prompt-token range each answers (``render.context_table``)."""
    from autotune import api

    entries = []
    studies = []
    for length, name in buckets.items():
        rec = api.recommend(
            ctx.store(), model, name, concurrency, study=study_name, slo=slo or None
        )
        for note in (*rec.notes, *(lc.line() for lc in rec.low_confidence)):
            click.echo(f"note: {name}: {note}", err=True)
        entries.append((length, name, render.dsd_config(rec.per_level)))
        studies.append(rec.study.name)
    table = render.context_table(entries)
    if as_json:
        click.echo(
            json.dumps({"source": "measured", "study": studies[-1], "context_buckets": table})
        )
    else:
        click.echo(json.dumps(table))


def parse_traffic(text: str) -> tuple[dict[int, float], str | None]:
    """``1:0.2,8:0.5,32:0.3`` as {concurrency: share}; shares that do not sum to 1 (within
    1e-6) are normalised, with the note saying so as the second value. Raises SpecError (exit
    2, one line) on anything else."""
    from autotune.cli._common import parse_shares

    def level(text: str) -> int:
        c = int(text)
        if c < 1:
            raise ValueError(text)
        return c

    return parse_shares(
        text,
        level,
        source="--traffic",
        name="concurrency",
        bad="is not CONCURRENCY:SHARE with a whole concurrency >= 1 and a share > 0 "
        "(e.g. 1:0.2,8:0.5,32:0.3)",
    )


def _print_prior(prior: Any, fmt: str, explain: bool, as_json: bool) -> None:
    """A published starting point, labelled as such on stderr; stdout stays pasteable."""
    config = prior.speculative_config
    label = prior.label()
    if as_json:
        click.echo(json.dumps(prior.to_json()))
    elif fmt == "yaml":
        click.echo(
            render.as_yaml(
                config,
                model=prior.model,
                tensor_parallel_size=prior.tensor_parallel_size,
                engine_args=prior.engine_args,
            ),
            nl=False,
        )
    elif fmt == "args":
        click.echo(
            render.serve_args(
                prior.model,
                config,
                tensor_parallel_size=prior.tensor_parallel_size,
                engine_args=prior.engine_args,
            )
        )
    else:  # json; dsd needs measured levels, so the fixed-N config stands for it
        click.echo(render.speculative_json(config))
    labels = "; ".join(label["labels"]) or "workload matched"
    p = prior.point
    name = f"{p.alias}-{p.workload}"
    click.echo(
        f"note: published starting point, not a measurement on your hardware "
        f"({label['citation']}; {labels}); measure it: autotune study create --model "
        f"{p.alias} --workload {p.workload} && autotune study run {name}",
        err=True,
    )
    if explain:
        click.echo(json.dumps(label, indent=2), err=True)


def _explain(rec: Any) -> None:
    """The explanation goes to stderr, so stdout stays the config (valid JSON for json/dsd)."""
    from autotune.tables import Column, TextTable

    con = console(stderr=True)
    c = rec.choice
    best = c.best
    if rec.traffic is not None:
        where = "the traffic mix " + ",".join(f"{c}:{w:.3g}" for c, w in rec.traffic.items())
    elif rec.interpolated:
        lo, hi = sorted(rec.weights)
        where = f"concurrency {rec.concurrency} (from its measured neighbours {lo} and {hi})"
    elif rec.concurrency:
        where = f"concurrency {rec.concurrency}"
    else:
        where = "all measured concurrency levels"
    con.print(
        f"\n[bold]{rec.model_alias or rec.model}[/bold] / {rec.workload} at {where} "
        f"(study {rec.study.name})"
    )
    con.print(f"recommended  {best.label()}", markup=False)
    if (default := rec.answer.default) is not None:
        loses = ", ".join(f"c={loss.concurrency}" for loss in default.loses_at) or "none"
        con.print(
            f"all levels   {default.winner}: {_margin_words(default.margin_pct, default.verdict)}"
            f" over {default.runner_up or '-'}; confidence {default.confidence}; loses at {loses}",
            markup=False,
        )
    if rec.coverage is not None:
        cov = rec.coverage
        con.print(
            f"coverage     {cov.measured} of {cov.planned} planned configs measured "
            f"(study status: {cov.status})"
        )
    table = TextTable(
        [
            Column("concurrency", "number"),
            Column("best", "id"),
            Column("tok/s (median)", "number"),
            Column("speedup", "number"),
            Column("AL", "number"),
            Column("repeats", "number"),
            Column("spread %", "number"),
            Column("runner-up", "id"),
            Column("margin %", "number"),
            Column("verdict", "id"),
            Column("drift %", "number"),
            Column("confidence", "id"),
        ]
    )
    answer = rec.answer  # margin, verdict and confidence: the one Answer every surface renders
    for lv in rec.per_level:
        b = lv.best
        la = answer.level(lv.concurrency)
        assert la is not None
        table.add_row(
            str(lv.concurrency),
            b.label(prose=False),
            f"{b.median_tok_s:,.1f}",
            f"{lv.speedup:.2f}x" if lv.speedup else "-",
            f"{b.mean_acceptance_length:.2f}" if b.mean_acceptance_length else "-",
            str(b.repeats),
            f"{b.spread_pct:.1f}",
            lv.runner_up.label(prose=False) if lv.runner_up else "-",
            f"{la.margin_pct:+.1f}" if la.margin_pct is not None else "-",
            la.verdict,
            f"{lv.drift_pct:+.1f}" if lv.drift_pct is not None else "-",
            la.confidence,
        )
    emit_table(table, stderr=True)
    from autotune.recommend.starts import starts_line

    con.print("engine starts behind each level's answer (median tok/s per start, its runs):")
    for lv in rec.per_level:
        con.print("  " + starts_line(rec.rows, lv), markup=False)
    if best.acceptance_per_pos:
        con.print(
            "acceptance per position  " + " ".join(f"{a:.2f}" for a in best.acceptance_per_pos)
        )
    from autotune import api

    for line in api.acceptance_prior_lines(rec):
        con.print(line, markup=False)  # each published prior's error at the measured N
    rows = [r for r in rec.rows if r.trial_id in best.trial_ids] or list(rec.rows)
    r0 = rows[0]
    con.print(
        f"provenance   vLLM {r0.vllm_version} on {r0.device_name} ({r0.device_arch}); "
        f"workload digest {r0.workload_digest[:12]}"
    )
    if bucket := _bucket_line(rec):
        con.print(bucket)
    if r0.env:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(r0.env.items()))
        con.print(f"engine env   {env}", markup=False)  # shell-quoted, as it would be set
    if suggestion := render.explain_suggestion(rec):  # no draft, or a poor one: train one
        click.echo(suggestion, err=True)


def _margin_words(margin_pct: float | None, verdict: str) -> str:
    return verdict if margin_pct is None else f"{margin_pct:+.1f}%, {verdict}"


def _bucket_line(rec: Any) -> str:
    """`--explain`'s line on the context-length bucket answered from ("" for a plain workload):
    its target and the real prompt tokens, as built (the target's tokenizer) and as the engine
    counted them in the best config's measurements."""
    from autotune.spec.context import split_bucket

    _, length = split_bucket(rec.workload)
    if length is None:
        return ""
    rows = [r for r in rec.rows if r.trial_id in rec.choice.best.trial_ids] or list(rec.rows)
    requests = sum(r.num_requests for r in rows)
    counted = sum(r.num_prompt_tokens for r in rows) / requests if requests else None
    line = f"context      bucket of {length} prompt tokens"
    built = rec.resolved.context_buckets.get(rec.workload)
    if built is not None:
        line += (
            f"; its {built.num_prompts} prompts hold {built.prompt_tokens_mean:,.0f} tokens on "
            f"average ({built.prompt_tokens_min:,}-{built.prompt_tokens_max:,})"
        )
    if counted is not None:
        line += f"; {counted:,.0f} per request as the engine counted them"
    return line
