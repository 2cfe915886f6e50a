"""``autotune compare A B``: two studies side by side, the changes beyond noise flagged, exit 1 on
a regression (a CI gate after an upgrade). Parses, calls ``api.compare_studies``, renders."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from autotune.cli._common import (
    NON_NEGATIVE_FLOAT,
    Context,
    echo_json,
    emit_table,
    note,
    pass_ctx,
)
from autotune.errors import AutotuneError

if TYPE_CHECKING:
    from autotune.recommend.compare import Comparison


class Regression(AutotuneError):
    """B falls behind A beyond noise and tolerance somewhere."""

    exit_code = 1


def _al(per_pos: tuple[float, ...]) -> str:
    return "/".join(f"{a:.2f}" for a in per_pos) or "-"


def _speedup(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}x"


def render(comparison: Comparison, fmt: str) -> None:
    from autotune.tables import Column, TextTable

    table = TextTable(
        [
            Column("workload"),
            Column("c", "number"),
            Column("answer A"),
            Column("answer B"),
            Column("speedup A", "number"),
            Column("speedup B", "number"),
            Column("tok/s change"),
            Column("speedup change"),
            Column("a_i A"),
            Column("a_i B"),
            Column("AL change"),
        ],
        group=1,
        caption=(
            f"A = {comparison.study_a}, B = {comparison.study_b}; changes are of A's answer, B "
            "over A, ± the 95% interval of the ratio; * beyond noise, ! a regression (beyond "
            f"noise and more than {comparison.tolerance_pct:g}% down)"
        ),
    )
    for cell in comparison.cells:
        label = cell.a.answer
        tput = cell.change("output_throughput_tok_s", label)
        speed = cell.change("speedup_vs_off", label)
        al = cell.change("mean_acceptance_length", label)
        per_pos = cell.acceptance.get(label, ((), ()))
        marks = []
        if cell.a.low_confidence:
            marks.append("low confidence")
        if cell.a.choice.tie:
            marks.append("tie")
        conf_a = f" ({', '.join(marks)})" if marks else ""
        marks_b = []
        if cell.b.low_confidence:
            marks_b.append("low confidence")
        if cell.b.choice.tie:
            marks_b.append("tie")
        conf_b = f" ({', '.join(marks_b)})" if marks_b else ""
        table.add_row(
            cell.workload,
            cell.concurrency,
            cell.a.answer + conf_a,
            cell.b.answer + conf_b,
            _speedup(cell.a.choice.speedup),
            _speedup(cell.b.choice.speedup),
            tput.cell() if tput else "not in B",
            speed.cell() if speed else "-",
            _al(per_pos[0]),
            _al(per_pos[1]),
            al.cell() if al else "-",
        )
    emit_table(table, fmt)


@click.command("compare")
@click.argument("study_a", metavar="A")
@click.argument("study_b", metavar="B")
@click.option(
    "--tolerance",
    "tolerance_pct",
    type=NON_NEGATIVE_FLOAT,
    default=5.0,
    show_default=True,
    metavar="PCT",
    help="Exit 1 when a metric falls from A to B beyond noise by more than PCT percent: the "
    "throughput or speedup of A's answer, or the mean acceptance length of any drafter both "
    "measured.",
)
@click.option(
    "--b-db",
    "b_db",
    default=None,
    metavar="URL",
    help="Read study B from this store (another machine's) [default: the same store as A].",
)
@click.option(
    "--workload", default=None, metavar="NAME", help="Compare this workload only [default: all]."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(("table", "tsv")),
    default="table",
    show_default=True,
    help="table: aligned columns; tsv: tab-separated.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout instead.")
@pass_ctx
def compare(
    ctx: Context,
    study_a: str,
    study_b: str,
    tolerance_pct: float,
    b_db: str | None,
    workload: str | None,
    fmt: str,
    as_json: bool,
) -> None:
    """Compare two studies of the store: A (before) and B (after), e.g. one model before and
    after a vLLM upgrade, or on two machines.

    Per (workload, concurrency) measured by both: each study's answer (with "tie" or "low
    confidence" as recommend judges them), its speedup over that study's own baseline, the
    acceptance per position (a_i) of A's answer in both, and the change from A to B of A's
    answer: throughput, speedup and mean acceptance length, each with the 95% interval of the
    ratio B/A (Student t on log values over repeats, as ties are judged). A change is beyond
    noise when that interval excludes 1; one repeat a side is "undecided". Across machines
    compare speedup and acceptance, not tok/s.

    Exit 0 when nothing regressed; exit 1, with one line per regression on stderr, when a
    change is beyond noise and more than --tolerance percent down (for any drafter's
    acceptance length, not only the answer's); exit 2 for an unknown study.

    \b
    Example:
      autotune compare tiny-code-vllm-0.31 tiny-code-vllm-0.32
      autotune compare before after --tolerance 3 --json
      autotune --db h200.db compare kimi-code kimi-code --b-db mi300x.db
    """
    from autotune import api

    store_b = None if b_db is None else Context(db=b_db).store()
    comparison = api.compare_studies(
        ctx.store(),
        study_a,
        study_b,
        tolerance_pct=tolerance_pct,
        workload=workload,
        store_b=store_b,
    )
    if not comparison.cells:
        from autotune.errors import NoResultError

        raise NoResultError(
            f"studies {study_a!r} and {study_b!r} measured no (workload, concurrency) in common"
        )
    for w, c in comparison.only_a:
        note(f"note: {w} at concurrency {c} was measured in {study_a} only")
    for w, c in comparison.only_b:
        note(f"note: {w} at concurrency {c} was measured in {study_b} only")
    if as_json:
        echo_json(comparison.to_json())
    else:
        render(comparison, fmt)
    regressions = comparison.regressions
    for cell, change in regressions:
        note(
            f"regression: {cell.workload} at concurrency {cell.concurrency}: {change.config} "
            f"{change.metric} {change.a:.4g} -> {change.b:.4g} ({change.change_pct:+.1f}%, "
            f"95% interval ±{change.halfwidth_pct:.1f}%, tolerance {change.tolerance_pct:g}%)"
        )
    if regressions:
        raise Regression(
            f"{len(regressions)} regression(s) from {study_a} to {study_b} beyond noise and "
            f"{tolerance_pct:g}%"
        )
