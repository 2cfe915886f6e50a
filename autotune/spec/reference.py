"""The study-file and workload-file reference, rendered as Markdown from the pydantic models.

``docs/study-file.md`` is this module's output (``make docs``, or
``python -m autotune.spec.reference docs/study-file.md``); a unit test regenerates it and
compares, so the reference cannot drift from what ``study create`` accepts. Every row is one
key: its path in the YAML file, its type, its default, its bounds and the field's own
description.
"""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from autotune.spec.study import StudySpec
from autotune.spec.workload import WorkloadSpec

HEADER = """\
# Study and workload files: the reference

Generated from the pydantic models (`autotune/spec/study.py`, `autotune/spec/workload.py`) by
`make docs` (`python -m autotune.spec.reference docs/study-file.md`); a unit test checks that this
file is what they render, so it describes exactly what `autotune study create` accepts. Unknown
keys are refused; integers, booleans and numbers are strict (`"3"`, `3.0` and `true` are not the
integer 3; `.inf` and `.nan` are refused). A key in a list of objects is written `methods[].method`,
one in a map `slo.workloads.NAME.p99_tpot_ms`; a `|` between types means either.
"""


@dataclass(frozen=True)
class Row:
    """One key of a spec file."""

    path: str
    type: str
    default: str
    bounds: str
    description: str


def _strip(annotation: Any) -> tuple[Any, list[Any]]:
    """The annotation without ``Annotated`` layers, and the metadata those layers carried."""
    metadata: list[Any] = []
    while get_origin(annotation) is Annotated:
        base, *extra = get_args(annotation)
        metadata.extend(extra)
        annotation = base
    return annotation, metadata


def _members(annotation: Any) -> list[Any]:
    """The members of a union (``X | None`` included), else the annotation itself."""
    if get_origin(annotation) in (Union, types.UnionType):
        return list(get_args(annotation))
    return [annotation]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _type_name(annotation: Any) -> str:
    annotation, _ = _strip(annotation)
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        names = [_type_name(a) for a in get_args(annotation) if a is not type(None)]
        return " \\| ".join(dict.fromkeys(names))
    if origin is Literal:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in get_args(annotation))
    if origin is list:
        (item,) = get_args(annotation)
        return f"list of {_type_name(item)}"
    if origin is dict:
        _, value = get_args(annotation)
        return f"map of {_type_name(value)}"
    if _is_model(annotation):
        return "object"
    simple = {int: "integer", float: "number", bool: "boolean", str: "string"}
    if annotation is Any:
        return "any"
    return simple.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _bounds(metadata: list[Any], prefix: str = "") -> list[str]:
    out: list[str] = []
    for m in metadata:
        if isinstance(m, FieldInfo):
            out += _bounds(list(m.metadata), prefix)
            continue
        for cls, attr, sign in (
            (annotated_types.Ge, "ge", "≥"),
            (annotated_types.Gt, "gt", ">"),
            (annotated_types.Le, "le", "≤"),
            (annotated_types.Lt, "lt", "<"),
        ):
            if isinstance(m, cls):
                value = getattr(m, attr)
                shown = f"{value:,}" if isinstance(value, int) else f"{value:g}"
                out.append(f"{prefix}{sign} {shown}")
        if isinstance(m, annotated_types.MinLen):
            out.append(f"{prefix}length ≥ {m.min_length}")
        if isinstance(m, annotated_types.MaxLen):
            out.append(f"{prefix}length ≤ {m.max_length:,}")
        pattern = getattr(m, "pattern", None)
        if isinstance(pattern, str):
            out.append(f"{prefix}matches `{pattern}`")
    return out


def _item_bounds(annotation: Any) -> list[str]:
    """Bounds on a list's items or a map's values (``list[Annotated[int, Field(ge=1)]]``)."""
    annotation, _ = _strip(annotation)
    for member in _members(annotation):
        member, _ = _strip(member)
        if get_origin(member) in (list, dict):
            _, metadata = _strip(get_args(member)[-1])
            return _bounds(metadata, "each ")
    return []


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "see below"
    return f"`{json.dumps(value)}`"


def _nested(annotation: Any) -> tuple[str, list[type[BaseModel]]] | None:
    """The models a field holds and how their keys extend its path: ``''`` for an object,
    ``'[]'`` for a list of objects, ``'.NAME'`` for a map of objects."""
    annotation, _ = _strip(annotation)
    suffix, models = "", []
    for member in _members(annotation):
        member, _ = _strip(member)
        if get_origin(member) is list:
            member, suffix = _strip(get_args(member)[0])[0], "[]"
        elif get_origin(member) is dict:
            member, suffix = _strip(get_args(member)[1])[0], ".NAME"
        models += [m for m in (_strip(a)[0] for a in _members(member)) if _is_model(m)]
    return (suffix, models) if models else None


def _variant(model: type[BaseModel]) -> str | None:
    """The ``kind`` that selects a model in a discriminated union, if it has one."""
    kind = model.model_fields.get("kind")
    if kind is None:
        return None
    (value,) = get_args(_strip(kind.annotation)[0])
    return str(value)


def _sections(
    model: type[BaseModel], path: str, title: str
) -> Iterator[tuple[str, str, list[Row]]]:
    """``(title, model docstring, rows)`` for the model, then for every model it nests."""
    rows: list[Row] = []
    later: list[tuple[str, str, type[BaseModel]]] = []
    for name, info in model.model_fields.items():
        key = f"{path}.{name}" if path else name
        nested = _nested(info.annotation)
        description = " ".join((info.description or "").split())
        if name == "kind" and not description:
            description = "Selects this form."
        if nested is not None:
            suffix, models = nested
            if len(models) > 1:
                description += " One of the forms below, chosen by `kind`."
            else:
                description += " Keys below."
            for m in models:
                kind = _variant(m) if len(models) > 1 else None
                sub = f"`{key}{suffix}`" + (f" with `kind: {kind}`" if kind else "")
                later.append((sub, key + suffix, m))
        _, metadata = _strip(info.annotation)
        bounds = _bounds([info, *metadata]) + _item_bounds(info.annotation)
        rows.append(
            Row(
                path=f"`{key}`",
                type=_type_name(info.annotation),
                default=_default(info),
                bounds=", ".join(bounds) or "-",
                description=description.strip() or "-",
            )
        )
    doc = " ".join((model.__doc__ or "").split()).replace("``", "`")
    yield title, doc, rows
    for sub_title, sub_path, m in later:
        yield from _sections(m, sub_path, sub_title)


def _table(rows: list[Row]) -> list[str]:
    lines = ["| key | type | default | bounds | description |", "|---|---|---|---|---|"]
    for r in rows:
        cells = [r.path, r.type, r.default, r.bounds, r.description.replace("|", "\\|")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render() -> str:
    """The whole reference, as ``docs/study-file.md`` holds it."""
    lines = [HEADER]
    for heading, model in (
        ("Study files (`studies/*.yaml`)", StudySpec),
        ("Workload files (`workloads/*.yaml`)", WorkloadSpec),
    ):
        lines.append(f"## {heading}\n")
        for title, doc, rows in _sections(model, "", "top level"):
            lines.append(f"### {title}\n")
            if doc:
                lines.append(f"{doc}\n")
            lines.extend(_table(rows))
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the reference to the path given (``docs/study-file.md``), or print it."""
    args = sys.argv[1:] if argv is None else argv
    text = render()
    if args:
        Path(args[0]).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
