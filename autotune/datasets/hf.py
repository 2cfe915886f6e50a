"""Prompts from a Hugging Face dataset: from the hub (or its local cache) or a saved directory."""

from __future__ import annotations

from typing import Any

from autotune.datasets._base import Candidate, LoadContext, one_line
from autotune.spec.workload import HFSource


def load_hf(source: HFSource, ctx: LoadContext) -> list[Candidate]:
    """Rows of ``split``; a ``dataset`` that names an existing directory (relative to the
    workload file) is read with ``load_from_disk``, anything else with ``load_dataset``."""
    try:
        import datasets
    except ImportError:
        raise ctx.error(
            "kind 'hf' needs the datasets package (pip install 'autotune[hf]')", "source.kind"
        ) from None

    local = ctx.resolve(source.dataset)
    data: Any
    if local.is_dir():
        try:
            data = datasets.load_from_disk(str(local))
        except Exception as e:  # datasets raises many types; the user needs one line
            raise ctx.error(
                f"cannot load the saved dataset {local}: {one_line(e)}", "source.dataset"
            ) from None
        if isinstance(data, datasets.DatasetDict):
            if source.split not in data:
                raise ctx.error(
                    f"{local} has no split {source.split!r} (has {', '.join(data)})",
                    "source.split",
                )
            data = data[source.split]
    else:
        try:
            data = datasets.load_dataset(
                source.dataset, source.subset, split=source.split, revision=source.revision
            )
        except Exception as e:  # hub unreachable, unknown name or split, bad revision, ...
            raise ctx.error(
                f"cannot load {source.dataset!r} (no directory {local}; "
                f"load_dataset failed: {one_line(e)})",
                "source.dataset",
            ) from None

    columns = list(data.column_names)
    if source.prompt_field not in columns:
        raise ctx.error(
            f"the dataset has no column {source.prompt_field!r} (has {', '.join(columns)})",
            "source.prompt_field",
        )
    out: list[Candidate] = []
    for row, text in enumerate(data[source.prompt_field]):
        if not isinstance(text, str):
            raise ctx.error(
                f"row {row}: column {source.prompt_field!r} is a {type(text).__name__}, "
                "not a string",
                "source.prompt_field",
            )
        out.append(Candidate(text))
    return out
