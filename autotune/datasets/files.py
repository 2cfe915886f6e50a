"""Loaders for prompts the user supplies: inline in the workload, or a JSON-lines or CSV file."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from autotune.datasets._base import (
    Candidate,
    LoadContext,
    check_source_file,
    one_line,
    parse_max_tokens,
)
from autotune.spec.reading import MAX_DEPTH, json_depth_error, json_loads
from autotune.spec.workload import CsvSource, InlineSource, JsonlSource


def load_inline(source: InlineSource, ctx: LoadContext) -> list[Candidate]:
    return [Candidate(text) for text in source.prompts]


def _open_checked(path: Path, ctx: LoadContext) -> None:
    check_source_file(path, ctx)  # regular file, size cap: never a FIFO that blocks a run


def _fields_hint(names: list[str]) -> str:
    shown = ", ".join(repr(k) for k in names[:12])
    return f" (has {shown}{', ...' if len(names) > 12 else ''})" if names else ""


def _row_candidate(
    row: dict[str, object],
    where: str,
    prompt_field: str,
    max_tokens_field: str | None,
    ctx: LoadContext,
    kind: str,
) -> Candidate:
    if prompt_field not in row:
        raise ctx.error(
            f"{where} has no {kind} {prompt_field!r}{_fields_hint(list(row))}",
            "source.prompt_field",
        )
    text = row[prompt_field]
    if not isinstance(text, str):
        raise ctx.error(
            f"{where}: {kind} {prompt_field!r} is a {type(text).__name__}, not a string",
            "source.prompt_field",
        )
    if "\x00" in text:
        raise ctx.error(f"{where}: {kind} {prompt_field!r} holds a NUL byte", "source.prompt_field")
    max_tokens = None
    if max_tokens_field is not None:
        if max_tokens_field not in row:
            raise ctx.error(
                f"{where} has no {kind} {max_tokens_field!r}{_fields_hint(list(row))}",
                "source.max_tokens_field",
            )
        max_tokens = parse_max_tokens(row[max_tokens_field], where, ctx)
    return Candidate(text, max_tokens)


def load_jsonl(source: JsonlSource, ctx: LoadContext) -> list[Candidate]:
    """One prompt per non-blank line; each line a JSON object holding ``prompt_field``."""
    path = ctx.resolve(source.path)
    _open_checked(path, ctx)
    out: list[Candidate] = []
    try:
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                where = f"{path.name} line {lineno}"
                if json_depth_error(line) is not None:
                    raise ctx.error(
                        f"{where}: nested deeper than {MAX_DEPTH} levels", "source.path"
                    )
                try:
                    row = json_loads(line)
                except json.JSONDecodeError as e:
                    raise ctx.error(f"{where}: not valid JSON ({e.msg})", "source.path") from None
                if not isinstance(row, dict):
                    raise ctx.error(f"{where}: expected a JSON object", "source.path")
                out.append(
                    _row_candidate(
                        row, where, source.prompt_field, source.max_tokens_field, ctx, "field"
                    )
                )
    except (OSError, UnicodeDecodeError) as e:
        raise ctx.error(f"cannot read {path}: {one_line(e)}", "source.path") from None
    return out


def load_csv(source: CsvSource, ctx: LoadContext) -> list[Candidate]:
    """One prompt per row of a CSV file whose header names the columns."""
    path = ctx.resolve(source.path)
    _open_checked(path, ctx)
    out: list[Candidate] = []
    try:
        # utf-8-sig: spreadsheet exports often start with a byte-order mark.
        with path.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            for column, field in (
                (source.prompt_field, "source.prompt_field"),
                (source.max_tokens_field, "source.max_tokens_field"),
            ):
                if column is not None and column not in header:
                    raise ctx.error(
                        f"{path.name} has no column {column!r}{_fields_hint(list(header))}",
                        field,
                    )
            for row in reader:
                where = f"{path.name} line {reader.line_num}"
                if row.get(source.prompt_field) is None:
                    # DictReader fills missing trailing cells with None: a short row.
                    raise ctx.error(f"{where}: row has too few columns", "source.path")
                out.append(
                    _row_candidate(
                        dict(row),
                        where,
                        source.prompt_field,
                        source.max_tokens_field,
                        ctx,
                        "column",
                    )
                )
    except csv.Error as e:
        raise ctx.error(f"{path.name}: not valid CSV ({e})", "source.path") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ctx.error(f"cannot read {path}: {one_line(e)}", "source.path") from None
    return out
