"""The model catalog's reference page, rendered as Markdown from ``autotune models --json``'s data.

``docs/catalog.md`` is this module's output (``make docs``, or
``python -m autotune.spec.catalog_reference docs/catalog.md``); a unit test regenerates it and
compares, so the page cannot drift from ``autotune/catalog/models.yaml``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

from autotune.spec.catalog import load_catalog

HEADER = """\
# The model catalog

Generated from `autotune/catalog/models.yaml` by `make docs`
(`python -m autotune.spec.catalog_reference docs/catalog.md`): the same data as
`autotune models --json`, and a unit test checks that this page is what the catalog renders. A
study's `model.name` may be an alias below, any Hugging Face id or a local path; the catalog
gives an alias its methods, published drafts, N bounds and tensor-parallel sizes per device.
Published acceptance curves are priors for the search's first batch, never measurements.
"""


def _cell(value: object) -> str:
    text = "-" if value in (None, "", {}, []) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _lines() -> Iterator[str]:
    yield HEADER
    for alias, entry in load_catalog().models.items():
        data = entry.model_dump(mode="json")
        yield f"## `{alias}`\n"
        yield f"{_cell(data['description'])}\n"
        yield "| field | value |"
        yield "|---|---|"
        yield f"| model | `{data['model']}` |"
        yield f"| source | {_cell(data['source'])} |"
        tp = ", ".join(f"{k}={v}" for k, v in data["tensor_parallel_size"].items())
        yield f"| tensor_parallel_size | {_cell(tp)} |"
        for key in ("engine_args", "env"):
            pairs = ", ".join(f"`{k}={v}`" for k, v in data[key].items())
            yield f"| {key} | {_cell(pairs)} |"
        yield ""
        methods = data["methods"]
        if methods:
            yield "| method | draft | N | params |"
            yield "|---|---|---|---|"
            for name, m in methods.items():
                n = f"1..{m['n_max']}" if m["n_max"] else "-"
                if m["block_size"]:
                    n = f"block {m['block_size']}"
                params = ", ".join(f"`{k}={v}`" for k, v in m["params"].items())
                draft = f"`{m['draft']}`" if m["draft"] else "-"
                yield f"| {name} | {draft} | {n} | {_cell(params)} |"
            yield ""
        for name, m in methods.items():
            for curve in m["acceptance_curves"]:
                by_n = " ".join(f"{n}:{al}" for n, al in curve["acceptance_length_by_n"].items())
                yield (
                    f"Published acceptance length by N, {name} "
                    f"({_cell(curve['workload'])}; {_cell(curve['condition'])}): {by_n}. "
                    f"Measured: {_cell(curve['measured'])}; source: {curve['source']}\n"
                )


def render() -> str:
    """The catalog page as Markdown."""
    return "\n".join(_lines()).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the page to the path given (``docs/catalog.md``), or print it."""
    args = sys.argv[1:] if argv is None else argv
    text = render()
    if args:
        Path(args[0]).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
