"""``autotune check``: a CI gate on a deployed --speculative-config (exit 0 ok, 1 not).

``check --measure`` and the stored ``verify`` lines come from the :mod:`autotune.verify` entry
points, called directly: ``verify`` is a client of :mod:`autotune.api`, which never imports it;
the stored-choice gate is ``api.check`` (:func:`autotune.recommend.answer.check_stored`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from autotune.cli._common import (
    NON_NEGATIVE_FLOAT,
    POSITIVE_INT,
    Context,
    FiniteFloatRange,
    pass_ctx,
)

if TYPE_CHECKING:
    from autotune.store import Store


@click.command("check")
@click.option(
    "--model", required=True, metavar="ALIAS", help="Catalog alias or HF id of the model."
)
@click.option("--workload", required=True, metavar="NAME", help="Workload name.")
@click.option(
    "--config",
    "config_arg",
    required=True,
    metavar="CONFIG",
    help="The deployed --speculative-config: inline JSON as `vllm serve` takes it, a JSON or "
    "YAML file (what `recommend --format yaml` writes), or '-' for stdin; null or {} means "
    "speculation off. Normalized with vLLM's defaults before it is compared.",
)
@click.option(
    "--concurrency",
    type=POSITIVE_INT,
    default=None,
    metavar="C",
    help="Judge at this concurrency level [default: one config for all measured levels, "
    "as `autotune recommend` answers].",
)
@click.option(
    "--context",
    type=click.IntRange(min=1),
    default=None,
    metavar="L",
    help="Judge against the context-length bucket for requests of L prompt tokens, as "
    "`autotune recommend --context` picks it.",
)
@click.option(
    "--tolerance",
    "tolerance_pct",
    type=NON_NEGATIVE_FLOAT,
    default=1.0,
    show_default=True,
    metavar="PCT",
    help="Pass when the deployed config's measured score is at most PCT percent below the "
    "recommended config's.",
)
@click.option(
    "--study",
    "study_name",
    default=None,
    metavar="NAME",
    help="Use this study [default: the newest that measured the pair].",
)
@click.option(
    "--measure",
    is_flag=True,
    help="Start the deployed config (and the baseline) on the study's prompts and protocol on "
    "the vLLM installed now and compare acceptance and speedup with the study's; on another "
    "vLLM version than the study's it re-measures instead of failing as stale. Stored with its "
    "vLLM version (`report` shows the history).",
)
@click.option(
    "--acceptance-only",
    is_flag=True,
    help="With --measure: start the deployed config only (no baseline, no speedup check).",
)
@click.option(
    "--acceptance-tolerance",
    "acceptance_tolerance_pct",
    type=FiniteFloatRange(min=0.0, max=100.0, max_open=True),
    default=5.0,
    show_default=True,
    metavar="PCT",
    help="With --measure: fail when the acceptance length or a position's acceptance is more "
    "than PCT percent below the study's for the same config (exactly at temperature 0; above "
    "it, also beyond the 95% interval of the difference).",
)
@click.option(
    "--speedup-tolerance",
    "speedup_tolerance_pct",
    type=NON_NEGATIVE_FLOAT,
    default=None,
    metavar="PCT",
    help="With --measure: the fall of a level's speedup over the baseline, against the "
    "study's, that fails the gate: pass when the 95% interval of now/study lies wholly above a "
    "fall of PCT percent, fail when it lies wholly below, else undecided (exit 3). The noise "
    "(the pairs', the study's runs', the start-to-start drift) widens the interval, never the "
    "band [default: 10].",
)
@click.option(
    "--max-pairs",
    type=click.IntRange(min=3),
    default=12,
    show_default=True,
    metavar="N",
    help="With --measure: the most interleaved (target, baseline) pairs measured per level "
    "while its speedup is undecided; still undecided then, the check exits 3.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the result as JSON (the verdict and the study's answer; with --measure, the "
    "measured comparison).",
)
@pass_ctx
def check(
    ctx: Context,
    model: str,
    workload: str,
    config_arg: str,
    concurrency: int | None,
    context: int | None,
    tolerance_pct: float,
    study_name: str | None,
    measure: bool = False,
    acceptance_only: bool = False,
    acceptance_tolerance_pct: float = 5.0,
    speedup_tolerance_pct: float | None = None,
    max_pairs: int = 12,
    as_json: bool = False,
) -> None:
    """Check that a deployed --speculative-config is as fast as the recommended one.

    Exit 0 when the deployed config's median throughput over repeats is within --tolerance
    of the recommended config's (docs/answers.md: the margin every surface states). Exit 1, with a one-line
    reason, when it is not, when the deployed config was never measured, or when the study was
    measured on another vLLM version than the one installed (replayed studies excepted).
    With --measure it measures instead of trusting the store: the deployed config (and the
    baseline, unless --acceptance-only) is started on the vLLM installed now, on the study's
    prompts and measurement settings; exit 1 when the acceptance length or a position's
    acceptance fell more than --acceptance-tolerance below the study's (exactly at temperature
    0, naming the positions), when the 95% interval of a level's speedup now over the study's
    lies wholly below a fall of --speedup-tolerance, or when the stored choice check fails;
    another vLLM version than the study's is measured, not stale. The speedup comes from
    interleaved pairs (target, baseline, target, baseline, ... on two warm engines), added
    while the interval spans the band's edge, up to --max-pairs per level. Exit 3, "undecided
    (noisy runner): rerun", when nothing failed but a level's speedup stayed undecided: after
    --max-pairs pairs, or at once where the start-to-start noise alone spans the edge.
    Exit 2 for bad input, before any engine starts.
    A level whose recommendation is low-confidence (undecided against its runner-up, or a
    noisy winner or baseline) gets a "note: low confidence at concurrency C" line on stderr;
    the exit code does not change. --json prints the verdict with the study's answer (winner,
    margin, verdict and confidence per level: the same block `recommend --json` and `report
    --json` carry) whether or not --measure is given.

    \b
    Example:
      autotune recommend --model tiny --workload code > deployed.json
      autotune check --model tiny --workload code --config deployed.json
      autotune check --model tiny --workload code --config '{"method": "ngram", "num_speculative_tokens": 2}'
      autotune check --model kimi --workload code --config spec.json --concurrency 8 --tolerance 2
      # after a study with context_lengths (the shipped studies have none)
      autotune check --model tiny --workload code --context 4096 --config deployed.json
      autotune check --model tiny --workload code --config deployed.json --measure
    """
    from autotune import api
    from autotune.recommend.check import CheckFailed
    from autotune.recommend.normalize import parse_config_text, read_config_arg

    deployed = parse_config_text(*read_config_arg(config_arg))
    store = ctx.store()
    if context is not None:  # the context-length axis: judge at the bucket for L
        pick = api.context_bucket(store, model, workload, context, study_name)
        click.echo(f"note: {pick.line()}", err=True)
        workload = pick.workload
    if measure:
        _check_measured(
            store,
            model,
            workload,
            deployed,
            concurrency=concurrency,
            tolerance_pct=tolerance_pct,
            study_name=study_name,
            acceptance_only=acceptance_only,
            acceptance_tolerance_pct=acceptance_tolerance_pct,
            speedup_tolerance_pct=speedup_tolerance_pct,
            max_pairs=max_pairs,
            as_json=as_json,
        )
        return

    checked = api.check(
        store,
        model,
        workload,
        deployed,
        concurrency=concurrency,
        tolerance_pct=tolerance_pct,
        study=study_name,
    )
    for note in checked.notes:
        click.echo(f"note: {note}", err=True)
    from autotune.verify import verification_lines

    for line in verification_lines(store, checked.study, workload):  # autotune verify
        click.echo(f"note: {line}", err=True)
    if as_json:
        click.echo(dumps_json(checked.to_json()))
    if not checked.result.ok:
        raise CheckFailed(checked.result.reason)
    if not as_json:
        click.echo(checked.result.reason)


def _check_measured(
    store: Store,
    model: str,
    workload: str,
    deployed: dict[str, Any] | None,
    *,
    concurrency: int | None,
    tolerance_pct: float,
    study_name: str | None,
    acceptance_only: bool,
    acceptance_tolerance_pct: float,
    speedup_tolerance_pct: float | None,
    max_pairs: int,
    as_json: bool,
) -> None:
    """``check --measure`` (autotune.verify.remeasure): measured now, compared, stored."""
    from autotune.recommend import check as gate
    from autotune.recommend.measured import failure_line, render
    from autotune.verify import check_measured

    result = check_measured(
        store,
        model,
        workload,
        deployed,
        study=study_name,
        concurrency=concurrency,
        tolerance_pct=tolerance_pct,
        acceptance_tolerance_pct=acceptance_tolerance_pct,
        speedup_tolerance_pct=speedup_tolerance_pct,
        acceptance_only=acceptance_only,
        max_pairs=max_pairs,
        progress=lambda line: click.echo(line, err=True),
    )
    click.echo(dumps_json(result.to_json()) if as_json else render(result))
    if result.outcome == "undecided":
        raise gate.CheckUndecided(failure_line(result))
    if not result.passed:
        raise gate.CheckFailed(failure_line(result))


def dumps_json(data: Any) -> str:
    import json

    return json.dumps(data, indent=2, sort_keys=True, default=str)
