"""The ``autotune`` command line: a thin click layer over :mod:`autotune.api`.

Each command group lives in its own module; heavy imports happen inside commands so
``autotune --help`` stays fast.
"""

from __future__ import annotations

import sys

import click

from autotune import __version__
from autotune.cli._common import Context, report_errors
from autotune.cli.bench import bench
from autotune.cli.check import check
from autotune.cli.export import export
from autotune.cli.models import models
from autotune.cli.observe import observe
from autotune.cli.recommend import recommend
from autotune.cli.report import report
from autotune.cli.study import study
from autotune.cli.verify import verify
from autotune.cli.workload import workload


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="autotune")
@click.option(
    "--db",
    envvar="AUTOTUNE_DB",
    default=None,
    metavar="URL",
    help="Study store: an SQLAlchemy URL or a SQLite file path "
    "[env AUTOTUNE_DB; default sqlite:///studies/autotune.db].",
)
@click.pass_context
def cli(ctx: click.Context, db: str | None) -> None:
    """Find the best vLLM speculative-decoding setting per (model, workload).

    autotune measures method × draft × num_speculative_tokens on real vLLM engines (Ray
    actors, one per GPU group), stores every measurement, and prints the recommended
    --speculative-config.

    \b
    Example:
      autotune study create studies/tiny-cpu.yaml
      autotune study run tiny-cpu
      autotune recommend --model tiny --workload code
    """
    ctx.obj = Context(db=db)


cli.add_command(study)
cli.add_command(workload)
cli.add_command(models)
cli.add_command(recommend)
cli.add_command(export)
cli.add_command(report)
cli.add_command(check)
cli.add_command(bench)
cli.add_command(verify)
cli.add_command(observe)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``autotune`` console script."""
    from autotune.cli._common import quiet_vllm_imports

    quiet_vllm_imports()
    sys.exit(report_errors(cli, argv))


__all__ = ["cli", "main"]
