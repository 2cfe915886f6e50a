"""``autotune workload ...``: list workloads and show their prompts with token statistics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from autotune.cli._common import console, echo_json, json_option


@click.group()
def workload() -> None:
    """List workloads and look at their prompts.

    Workloads are found in $AUTOTUNE_WORKLOADS, ./workloads and the repository's workloads/.

    \b
    Example:
      autotune workload list
      autotune workload show code
    """


@workload.command("list")
@json_option
def list_(as_json: bool) -> None:
    """List the workloads autotune can find and where their prompts come from.

    The data column says whether a workload holds a real dataset (with the package that ships
    it and the data's licence), generated prompts, or a file's.

    \b
    Example:
      autotune workload list --json
    """
    from autotune.datasets import provenance
    from autotune.spec.loader import list_workload_names, load_workload

    rows: list[dict[str, Any]] = []
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
    if as_json:
        echo_json(rows)
        return
    from rich.table import Table

    table = Table("name", "kind", "data", "prompts", "max_tokens", "description")
    for r in rows:
        table.add_row(
            r["name"],
            r["kind"],
            r["data"],
            str(r["num_prompts"]),
            str(r["max_tokens"]),
            r["description"],
        )
    console().print(table)


@workload.command("show")
@click.argument("name")
@click.option("--count", type=int, default=3, show_default=True, help="Sample prompts to print.")
@click.option(
    "--tokenizer",
    default=None,
    metavar="MODEL",
    help="Count tokens with this model's tokenizer (HF id, path or tiny:NAME) "
    "[default: the tokenizer of autotune's tiny CPU model].",
)
@json_option
def show(name: str, count: int, tokenizer: str | None, as_json: bool) -> None:
    """Show a workload: its settings, sample prompts and token statistics.

    \b
    Example:
      autotune workload show code
      autotune workload show chat --tokenizer Qwen/Qwen3-Next-80B-A3B-Instruct
    """
    from autotune.datasets import prepare, provenance, token_stats
    from autotune.spec.loader import load_workload

    spec, path = load_workload(name)
    origin = provenance(spec)
    prepared = prepare(spec, Path(path).parent)
    tok_name = tokenizer or "autotune's tiny BPE; --tokenizer MODEL for your model's"
    tok = _tokenizer(tokenizer) if tokenizer else _tiny_tokenizer()
    stats = token_stats(list(prepared.prompts), tok)
    if as_json:
        echo_json(
            {
                "name": spec.name,
                "digest": prepared.digest,
                "spec": spec.model_dump(mode="json"),
                "data": origin.label(),
                "data_note": origin.note,
                "tokenizer": tok_name,
                "stats": stats,
                "samples": [p.text for p in prepared.prompts[:count]],
            }
        )
        return
    con = console()
    con.print(f"[bold]{spec.name}[/bold]  {spec.source.kind}  ({path})")
    if spec.description:
        con.print(spec.description)
    con.print(
        f"data    {origin.label()}" + (f": {origin.note}" if origin.note else ""), markup=False
    )
    con.print(
        f"prompts {len(prepared.prompts)}  max_tokens {spec.max_tokens}  "
        f"temperature {spec.temperature}  seed {spec.seed}  chat_template {spec.chat_template}"
    )
    con.print(f"digest  {prepared.digest}")
    con.print(f"tokens  ({tok_name})  " + "  ".join(f"{k} {_fmt(v)}" for k, v in stats.items()))
    for i, p in enumerate(prepared.prompts[:count]):
        text = p.text if len(p.text) <= 600 else p.text[:600] + " …"
        con.print(f"\n[dim]--- prompt {i} (max_tokens {p.max_tokens}) ---[/dim]")
        con.print(text, markup=False)


def _fmt(v: Any) -> str:
    return f"{v:,.1f}" if isinstance(v, float) else str(v)


def _tiny_tokenizer() -> Any:
    """The tiny CPU model's byte-level BPE: trained in seconds, without building the model."""
    import contextlib
    import tempfile

    from transformers import AutoTokenizer

    from autotune.testing import tiny

    llama = tiny.default_cache_dir() / "llama"
    if (llama / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(llama))
    out = tiny.default_cache_dir() / "tokenizer"
    if not (out / "tokenizer.json").exists():
        from pathlib import Path as _Path

        from autotune.testing._tiny_build import build_tokenizer

        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = _Path(tempfile.mkdtemp(dir=out.parent))
        build_tokenizer(tmp)
        with contextlib.suppress(OSError):  # another process finished first
            tmp.rename(out)
    return AutoTokenizer.from_pretrained(str(out))


def _tokenizer(name: str) -> Any:
    """A tokenizer with ``encode``; tiny:NAME builds autotune's CPU model's tokenizer."""
    from autotune.errors import SpecError

    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    if name.startswith("tiny:"):
        from autotune.testing import resolve

        name = resolve(name)
    try:
        return AutoTokenizer.from_pretrained(name)
    except Exception as exc:
        raise SpecError(
            f"cannot load tokenizer: {str(exc).splitlines()[0]}", source="--tokenizer"
        ) from None
