"""The workloads as `autotune workload list` and `autotune workload show` print them: where each
was found, where its prompts come from, and their token statistics."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import SpecError

if TYPE_CHECKING:
    from autotune.datasets.provenance import Provenance
    from autotune.engine._base import PreparedWorkload
    from autotune.spec.workload import WorkloadSpec


@dataclass(frozen=True)
class WorkloadView:
    """A workload as `autotune workload show` prints it."""

    spec: WorkloadSpec
    path: Path
    prepared: PreparedWorkload
    tokenizer_name: str
    stats: dict[str, float | int]
    origin: Provenance
    """Where the prompts come from (:func:`autotune.datasets.provenance`)."""
    prompt_lengths: list[int] = field(default_factory=list)
    """Each prompt's length in tokens (characters where no tokenizer loads)."""
    length_unit: str = "tokens"


def show_workload(name: str, tokenizer: str | None = None) -> WorkloadView:
    """A workload's prompts and token statistics, counted with ``tokenizer`` (HF id, path or
    ``tiny:NAME``) or, by default, the byte-level BPE of autotune's tiny CPU model."""
    from autotune.datasets import prepare, provenance, token_stats
    from autotune.datasets.stats import prompt_lengths
    from autotune.spec.loader import load_workload

    spec, path = load_workload(name)
    prepared = prepare(spec, Path(path).parent)
    tok_name = tokenizer or "autotune's tiny BPE; --tokenizer MODEL for your model's"
    tok = _load_tokenizer(tokenizer) if tokenizer else _default_tokenizer()
    stats = token_stats(list(prepared.prompts), tok)
    lengths = prompt_lengths(list(prepared.prompts), tok)
    unit = "tokens" if tok is not None else "chars"
    return WorkloadView(
        spec, Path(path), prepared, tok_name, stats, provenance(spec), lengths, unit
    )


def _default_tokenizer() -> Any:
    """The tiny CPU model's BPE, ``encode`` only (:func:`autotune.engine.default_token_counter`)."""
    from autotune.engine import default_token_counter

    return default_token_counter()


def _load_tokenizer(name: str) -> Any:
    """A tokenizer with ``encode``; ``tiny:NAME`` resolves through the engine's model hooks."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    from autotune.engine import resolve_model

    name = resolve_model(name)
    try:
        return AutoTokenizer.from_pretrained(name)
    except Exception as exc:
        raise SpecError(
            f"cannot load tokenizer: {str(exc).splitlines()[0]}", source="--tokenizer"
        ) from None


def list_workloads() -> list[dict[str, str | int | None]]:
    """The workloads autotune can find, with where each was found and whether its prompts are
    a real dataset, generated, or a file's."""
    from autotune.datasets import provenance
    from autotune.spec.loader import list_workload_names, load_workload

    rows: list[dict[str, str | int | None]] = []
    for name in list_workload_names():
        spec, path = load_workload(name)
        rows.append(
            {
                "name": spec.name,
                "kind": spec.source.kind,
                "data": provenance(spec).label(),
                "num_prompts": spec.num_prompts,
                "max_tokens": spec.max_tokens,
                "description": spec.description,
                "path": str(path),
            }
        )
    return rows
