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
from autotune.cli.compare import compare
from autotune.cli.export import export
from autotune.cli.imports import import_
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

    --db may also follow the command (autotune study list --db URL).

    \b
    Example:
      autotune study create --model tiny --workload code --name tiny-code
      autotune study run tiny-code
      autotune recommend --model tiny --workload code
    """
    ctx.obj = Context(db=db)


cli.add_command(study)
cli.add_command(workload)
cli.add_command(models)
cli.add_command(recommend)
cli.add_command(export)
cli.add_command(import_)
cli.add_command(report)
cli.add_command(check)
cli.add_command(bench)
cli.add_command(verify)
cli.add_command(observe)
cli.add_command(compare)


def _set_db(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.ensure_object(Context).db = value


def _db_after_every_command(group: click.Group) -> None:
    """``--db`` after the command too (``autotune study list --db URL``): the same store
    option as the group's, setting the same context value."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            _db_after_every_command(command)
        elif not any("--db" in p.opts for p in command.params):
            command.params.append(
                click.Option(
                    ["--db"],
                    metavar="URL",
                    expose_value=False,
                    is_eager=True,
                    callback=_set_db,
                    help="The study store, as `autotune --db URL` before the command.",
                )
            )


_db_after_every_command(cli)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``autotune`` console script."""
    from autotune.cli._common import quiet_vllm_imports

    quiet_vllm_imports()
    sys.exit(report_errors(cli, argv))


__all__ = ["cli", "main"]
