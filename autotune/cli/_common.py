"""Shared CLI plumbing: the context object, error reporting, JSON output."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, is_dataclass
from datetime import datetime
from typing import Any

import click

from autotune.errors import AutotuneError


@dataclass
class Context:
    db: str | None = None

    def store(self) -> Any:
        from autotune.store import Store

        return Store(self.db)


pass_ctx = click.make_pass_decorator(Context)

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON for machines instead of a table."
)


def report_errors(cli: click.Command, argv: list[str] | None) -> int:
    """Run the CLI; autotune errors become one line on stderr and their exit code."""
    try:
        code = cli.main(args=argv, prog_name="autotune", standalone_mode=False)
    except AutotuneError as exc:
        click.echo(f"autotune: error: {exc}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("autotune: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("autotune: interrupted", err=True)
        return 130
    except OSError as exc:
        # A path the user gave (--html, --output, --png, --db) or HOME that cannot be written
        # or read: bad input, one line naming the path (exit 2), not a traceback.
        where = exc.filename or "a file"
        click.echo(f"autotune: error: {where}: {exc.strerror or exc}", err=True)
        return 2
    # With standalone_mode=False, click returns ctx.exit()'s code (or the command's value).
    return code if isinstance(code, int) else 0


def _default(o: Any) -> Any:
    if isinstance(o, datetime):
        return o.isoformat()
    if is_dataclass(o) and not isinstance(o, type):
        return asdict(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=_default))


def console() -> Any:
    from rich.console import Console

    return Console(file=sys.stdout, highlight=False, soft_wrap=True)
