"""``autotune check``: a CI gate on a deployed --speculative-config (exit 0 ok, 1 not)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from autotune.cli._common import Context, pass_ctx


@click.command("check")
@click.option(
    "--model", required=True, metavar="ALIAS", help="Catalog alias or HF id of the model."
)
@click.option("--workload", required=True, metavar="NAME", help="Workload name.")
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    metavar="FILE",
    help="The deployed --speculative-config as a JSON file ('-' reads stdin); "
    "null or {} means speculation off.",
)
@click.option(
    "--concurrency",
    type=int,
    default=None,
    metavar="C",
    help="Judge at this concurrency level [default: one config for all measured levels, "
    "as `autotune recommend` answers].",
)
@click.option(
    "--tolerance",
    "tolerance_pct",
    type=click.FloatRange(min=0.0),
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
@pass_ctx
def check(
    ctx: Context,
    model: str,
    workload: str,
    config_path: Path,
    concurrency: int | None,
    tolerance_pct: float,
    study_name: str | None,
) -> None:
    """Check that a deployed --speculative-config is as fast as the recommended one.

    Exit 0 when the deployed config's measured throughput (robust score: median − 1.4826·MAD
    over repeats) is within --tolerance of the recommended config's. Exit 1, with a one-line
    reason, when it is not, when the deployed config was never measured, or when the study was
    measured on another vLLM version than the one installed (replayed studies excepted).

    \b
    Example:
      autotune recommend --model tiny --workload code > deployed.json
      autotune check --model tiny --workload code --config deployed.json
      autotune check --model kimi --workload code --config spec.json --concurrency 8 --tolerance 2
    """
    from autotune import api
    from autotune.errors import SpecError
    from autotune.recommend import check as gate

    source = str(config_path)
    if source == "-":
        text = sys.stdin.read()
        source = "stdin"
    else:
        try:
            text = config_path.read_text()
        except FileNotFoundError:
            raise SpecError("file not found", source=source) from None
        except OSError as exc:
            raise SpecError(f"cannot read: {exc.strerror}", source=source) from None
    deployed = gate.parse_config(text, source)

    rec = api.recommend(ctx.store(), model, workload, concurrency, study=study_name)
    for note in rec.notes:  # a partial study, or one whose space was not exhausted (#11.2)
        click.echo(f"note: {note}", err=True)
    result = gate.check(
        rec.choice,
        deployed,
        study=rec.study.name,
        tolerance_pct=tolerance_pct,
        measured_vllm_versions=[r.vllm_version for r in rec.rows],
        installed_vllm=gate.installed_vllm_version(),
        levels=[lv.concurrency for lv in rec.per_level],
    )
    for line in api.verification_lines(ctx.store(), rec.study, workload):  # autotune verify
        click.echo(f"note: {line}", err=True)
    if not result.ok:
        raise gate.CheckFailed(result.reason)
    click.echo(result.reason)
