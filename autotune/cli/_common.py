"""Shared CLI plumbing: the context object, error reporting, and where output goes.

stdout is for results (JSON, tables, configs) and stays parseable whatever else happens; stderr is
for people (progress, notes, warnings, explanations). Tables go through :func:`emit_table`:
aligned plain columns when stdout is not a terminal, TSV or JSON on request, a rich table on a
terminal only when every number and id fits whole.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, is_dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from autotune import DEFAULT_DB
from autotune.errors import AutotuneError, NoResultError, NotFoundError, SpecError, StoreError
from autotune.tables import TextTable, fits, plain, to_rich, tsv

_STORE_URL: list[str] = []
"""The URL of the store the running command opened, for errors about a missing study."""


@dataclass
class Context:
    db: str | None = None

    def store(self) -> Any:
        from autotune.store import Store

        store = Store(self.db)
        _STORE_URL[:] = [store.url]
        return store

    def store_file_missing(self) -> bool:
        """True when the store is a SQLite file that does not exist yet, decided without
        importing SQLAlchemy (~0.2 s): such a store holds no measurements, so a published
        answer need not open it. Anything else (PostgreSQL, odd URLs) is left to the store."""
        db = self.db or os.environ.get("AUTOTUNE_DB") or DEFAULT_DB
        url = db if "://" in db else f"sqlite:///{db}"
        if not url.startswith("sqlite:///"):
            return False
        path = url[len("sqlite:///") :].split("?", 1)[0]
        return bool(path) and path != ":memory:" and not os.path.exists(path)


pass_ctx = click.make_pass_decorator(Context)


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange without ``inf`` and ``nan`` (``nan`` passes every range check)."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = 0.0  # click's own conversion reports it
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(value, param, ctx)


NON_NEGATIVE_FLOAT = FiniteFloatRange(min=0.0)
"""A finite number >= 0."""
POSITIVE_FLOAT = FiniteFloatRange(min=0.0, min_open=True)
"""A finite number > 0."""
POSITIVE_INT = click.IntRange(min=1)
"""An integer >= 1 (counts: --max-configs, --max-engines, --concurrency)."""


class NameType(click.ParamType[str, Any]):
    """A name (study, workload): not empty, no surrounding spaces, no control characters."""

    name = "name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value)
        if not text.strip():
            self.fail("must not be empty.", param, ctx)
        if text != text.strip() or not text.isprintable():
            self.fail(f"{text[:80]!r} has surrounding spaces or control characters.", param, ctx)
        return text


NAME = NameType()
"""A non-empty name (``--name ""`` is refused)."""


class OutputPath(click.Path):
    """A file or folder autotune writes: its parent folder must exist (nothing is created
    outside the folders the user made), else one line, exit 2."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        path = super().convert(value, param, ctx)
        shown = os.fsdecode(path)
        parent = Path(shown).expanduser().parent
        if not parent.is_dir():
            flag = param.opts[-1] if param is not None and param.opts else "output"
            what = "is not a folder" if parent.exists() else "does not exist"
            raise SpecError(
                f"{shown}: No such file or directory (the folder {parent} {what}; create it first)",
                source=flag,
            )
        return path


K = TypeVar("K", int, float)


def parse_shares(
    text: str, key: Callable[[str], K], *, source: str, name: str, bad: str
) -> tuple[dict[K, float], str | None]:
    """``KEY:SHARE,...`` (``--traffic``'s concurrencies, ``--request-rate``'s rates) as {key:
    share}; ``key`` reads one key and raises ValueError for one out of range. Shares that do
    not sum to 1 (within 1e-6) are normalised, the note saying so as the second value. Raises
    SpecError (exit 2, one line: the item and ``bad``) on anything else."""
    mix: dict[K, float] = {}
    for item in text.split(","):
        value, sep, share = item.strip().partition(":")
        try:
            k, w = key(value), float(share)
        except ValueError:
            k, w = None, math.nan
        if not sep or k is None or not math.isfinite(w) or w <= 0:
            raise SpecError(f"{item.strip()!r} {bad}", source=source)
        if k in mix:
            raise SpecError(f"{name} {k:g} is given twice", source=source)
        mix[k] = w
    total = sum(mix.values())
    if abs(total - 1.0) <= 1e-6:
        return mix, None
    normalised = {k: w / total for k, w in mix.items()}
    return normalised, (
        f"{source} shares sum to {total:g}, not 1: normalised to "
        + ",".join(f"{k:g}:{w:.4g}" for k, w in normalised.items())
    )


def output_file() -> OutputPath:
    """A file to write whose folder must exist (``--html``, ``--csv``, ``-o``)."""
    return OutputPath(dir_okay=False, path_type=Path)


def output_dir() -> OutputPath:
    """A folder to write into (created) whose parent must exist (``--png``)."""
    return OutputPath(file_okay=False, path_type=Path)


def output_path() -> OutputPath:
    """A file or folder to write whose parent must exist (``export -o``)."""
    return OutputPath(path_type=Path)


json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON for machines instead of a table."
)

TABLE_FORMATS = ("table", "tsv", "json")


def table_format_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--json`` and ``--format table|tsv|json``; the command receives ``fmt``."""

    f = click.option(
        "--format",
        "fmt",
        type=click.Choice(TABLE_FORMATS),
        default="table",
        show_default=True,
        help="table: aligned columns (a rich table on a terminal); tsv: tab-separated; "
        "json: for machines.",
    )(f)
    f = click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print one JSON document on stdout instead of a table (same as --format json); "
        "notes stay on stderr.",
    )(f)
    return f


_VLLM_LOG_ENV = "VLLM_LOGGING_LEVEL"
_set_vllm_log: list[bool] = []


def quiet_vllm_imports() -> None:
    """vLLM's import-time notices (e.g. "Triton is installed, but ...") are not for the reader
    of `check` or `recommend`: log only errors, unless the user chose a level."""
    import logging
    import os

    if _VLLM_LOG_ENV not in os.environ:
        os.environ[_VLLM_LOG_ENV] = "ERROR"
        # Some notices are logged while vLLM is still importing, before its logging config
        # (which reads the variable) exists, so they reach Python's last-resort handler; a
        # level on the "vllm" logger stops those too.
        logging.getLogger("vllm").setLevel(logging.ERROR)
        _set_vllm_log[:] = [True]


def engine_logging_as_user_set() -> None:
    """Before engines start: give them the log level the user had (their failure reasons are
    read from their stderr), not the one :func:`quiet_vllm_imports` chose for this process."""
    import logging
    import os

    if _set_vllm_log:
        os.environ.pop(_VLLM_LOG_ENV, None)
        logging.getLogger("vllm").setLevel(logging.NOTSET)
        _set_vllm_log.clear()


def report_errors(cli: click.Command, argv: list[str] | None) -> int:
    """Run the CLI; autotune errors become one line on stderr and their exit code."""
    try:
        code = cli.main(args=argv, prog_name="autotune", standalone_mode=False)
    except AutotuneError as exc:
        click.echo(f"autotune: error: {with_store(exc)}", err=True)
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
    except Exception as exc:
        # Anything else a database driver raised (a lost server, a full disk) is one line,
        # its store URL masked, never a chain of tracebacks.
        if not _is_database_error(exc):
            raise
        cause: BaseException = exc
        while cause.__cause__ is not None:  # Optuna's StorageInternalError wraps the real one
            cause = cause.__cause__
        click.echo(f"autotune: error: the store: {_scrubbed(_first_line(cause))}", err=True)
        return 1
    # With standalone_mode=False, click returns ctx.exit()'s code (or the command's value).
    return code if isinstance(code, int) else 0


def with_store(exc: AutotuneError) -> str:
    """The error's message; for a missing study or an empty result, with the store it read,
    since the usual cause is the wrong --db / AUTOTUNE_DB."""
    msg = _scrubbed(str(exc))
    if isinstance(exc, NotFoundError | NoResultError | StoreError) and _STORE_URL:
        from autotune.store.urls import masked_url

        url = masked_url(_STORE_URL[0])
        if url not in msg:
            msg += f" (store: {url})"
    return msg


def _scrubbed(text: str) -> str:
    """``text`` with the store's URL and password masked (every error line goes through it)."""
    urls = [*_STORE_URL, os.environ.get("AUTOTUNE_DB", "")]
    if not any(urls) and "://" not in text:
        return text
    from autotune.store.urls import scrub

    return scrub(text, *urls)


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _is_database_error(exc: BaseException) -> bool:
    """SQLAlchemy's errors and Optuna's storage errors (without importing either)."""
    for cls in type(exc).__mro__:
        module = cls.__module__
        if module.startswith("sqlalchemy.") or cls.__name__ == "StorageInternalError":
            return True
    return False


def _default(o: Any) -> Any:
    if isinstance(o, datetime):
        return o.isoformat()
    if is_dataclass(o) and not isinstance(o, type):
        return asdict(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=_default))


def console(*, stderr: bool = False) -> Any:
    """A rich console on stdout (results) or stderr (notes, explanations, progress).

    Off a terminal rich prints no colour codes and wraps nothing: ``soft_wrap`` keeps long lines
    whole for a log file or a pipe.
    """
    from rich.console import Console

    return Console(file=sys.stderr if stderr else sys.stdout, highlight=False, soft_wrap=True)


def note(message: str) -> None:
    """A line for people: stderr, so stdout stays the command's result."""
    click.echo(message, err=True)


def emit_table(
    table: TextTable,
    fmt: str = "table",
    *,
    stderr: bool = False,
    terminal: bool | None = None,
    width: int | None = None,
) -> None:
    """Print a table so that no number or id is ever cut.

    ``fmt="tsv"``: tab-separated. Otherwise, on a terminal (``terminal`` overrides the check) a
    rich table when every number and id fits in the terminal's ``width``, else plain aligned
    columns as wide as they need. In a pipe or a file: plain aligned columns, text cells cut
    with "…" toward ``PIPE_WIDTH`` (100) columns (a note on stderr says so; ``--format tsv`` and
    ``--json`` print every cell whole); numbers and ids are never cut, so a table of long ids
    stays wider than that.
    """
    stream = sys.stderr if stderr else sys.stdout
    if fmt == "tsv":
        click.echo(tsv(table), file=stream)
        return
    if terminal is None:
        terminal = stream.isatty()
    if terminal:
        from rich.console import Console

        con = Console(file=stream, highlight=False, width=width, force_terminal=True)
        if fits(table, con.width):
            con.print(to_rich(table))
            return
        click.echo(plain(table), file=stream)
        return
    from autotune.tables import PIPE_WIDTH, is_cut

    click.echo(plain(table, PIPE_WIDTH), file=stream)
    if is_cut(table, PIPE_WIDTH):
        note(f"(text cut to {PIPE_WIDTH} columns: --format tsv or --json prints every cell whole)")


def confirm_destructive(question: str, yes: bool) -> None:
    """Ask before deleting; without a terminal to ask on, demand --yes (exit 2)."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise SpecError(f"no terminal to confirm on; pass --yes to {question.rstrip('?')}")
    click.confirm(question, abort=True)
