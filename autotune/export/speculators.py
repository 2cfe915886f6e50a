"""Training data for vLLM Speculators from a study: the prompts it measured, the target's own
greedy responses, and the commands that train an EAGLE-3 or DFlash draft on them.

When a model has no draft, or its best draft accepts little on a workload, the way forward is to
train one on the target's own outputs for that workload (self-distillation). This module writes
exactly the prompt set the study measured (checked by its digest) in the format vLLM Speculators'
data pipeline reads, and with ``with_responses`` runs the study's target on the vLLM engine to
produce the responses as the assistant turns.

The format follows vllm-project/speculators at commit
c05b95b303f7d4f21e8d7624e0ffa1c2d9b4d73b (2026-08-20):

- ``src/speculators/data_generation/preprocessing.py``: ``load_raw_dataset`` reads a local
  ``.jsonl`` with ``datasets.load_dataset("json", ...)``; ``build_speculator_training_dataset``
  passes rows that carry ``input_ids`` and ``loss_mask`` straight through
  (``_passthrough_pretokenized``: equal lengths, rows with no supervised token dropped) and
  renders rows with a ``conversations`` list (``role``/``content`` turns) through the target's
  vLLM ``/v1/chat/completions/render`` endpoint.
- ``scripts/response_regeneration/script.py`` (``build_boundary_sample``,
  ``_sample_from_response``) and ``docs/cli/response_regeneration.md`` ("Output Format"): a
  speculator-format row is ``id``, ``primary_id``, ``input_ids`` (the prompt as the target saw
  it, then the generated tokens), ``loss_mask`` (0 over the prompt, 1 over the generated
  tokens), ``text`` (a decode for review) and ``metadata``. ``responses.jsonl`` is written so.
- ``docs/user_guide/tutorials/train.md`` (Steps 1-6): the ``prepare_data.py``,
  ``launch_vllm.py`` and ``train.py`` commands for Eagle-3 and DFlash (online mode), and
  ``checkpoints/checkpoint_best``, which vLLM serves directly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from autotune.errors import NoResultError, SpecError

if TYPE_CHECKING:
    from autotune.engine._base import PreparedWorkload
    from autotune.engine.vllm.generate import Generation
    from autotune.spec.loader import ResolvedStudy

SPECULATORS_REPO = "https://github.com/vllm-project/speculators"
SPECULATORS_COMMIT = "c05b95b303f7d4f21e8d7624e0ffa1c2d9b4d73b"
"""The Speculators commit whose data format and commands this module follows."""

PROMPTS_FILE = "prompts.jsonl"
RESPONSES_FILE = "responses.jsonl"
README_FILE = "README.md"
STUDY_FILE = "measure-draft.yaml"
FILES = (PROMPTS_FILE, RESPONSES_FILE, README_FILE, STUDY_FILE)

DFLASH_BLOCK_SIZE = 16
"""Speculators' default DFlash ``--block-size`` (docs/cli/train.md); vLLM drafts N <= block - 1."""
EAGLE3_MAX_N = 3
DRAFT_VOCAB_SIZE = 32000
"""The ``--draft-vocab-size`` of the tutorial's commands; omitted for a smaller vocabulary."""


@dataclass(frozen=True)
class SpeculatorsExport:
    """What ``autotune export --speculators-data`` wrote."""

    study: str
    workload: str
    workload_digest: str
    output: Path
    files: tuple[Path, ...]
    prompts: int
    responses: int
    """Rows in ``responses.jsonl`` (0 without ``--with-responses``)."""
    response_tokens: int


# --- the prompt set --------------------------------------------------------------------------


def prepared_workload(resolved: ResolvedStudy, workload: str) -> PreparedWorkload:
    """The workload's prompts exactly as the study's tuner prepares them (the study's
    ``measurement.max_prompts``/``max_tokens`` caps applied), with their digest."""
    from autotune.datasets import prepare

    return prepare(*resolved.measured_workload(workload))


def measured_prompts(
    resolved: ResolvedStudy, study: str, workload: str, digests: Sequence[str]
) -> PreparedWorkload:
    """The prompt set the study measured for ``workload``: rebuilt from its workload snapshot
    and checked against ``digests`` (the measured ones, newest last), so the export holds
    exactly the prompts the measurements were taken on."""
    if resolved.landscape is not None:
        raise SpecError(
            f"study {study!r} replays a recorded landscape: it has no prompts to export",
            source="--speculators-data",
        )
    if workload not in resolved.workloads:
        known = ", ".join(sorted(resolved.workloads)) or "none"
        raise SpecError(
            f"study {study!r} has no workload {workload!r} (its workloads: {known})",
            source="--workload",
        )
    if not digests:
        raise NoResultError(
            f"study {study!r} has measured nothing on {workload!r} yet: run it first, so the "
            "export holds the prompts it measured"
        )
    prepared = prepared_workload(resolved, workload)
    if prepared.digest != digests[-1]:
        raise NoResultError(
            f"the prompts of {workload!r} rebuilt now (digest {prepared.digest[:12]}) are not "
            f"the ones study {study!r} measured last (digest {digests[-1][:12]}): the workload's "
            "source changed since (a dataset package upgraded?)"
        )
    return prepared


def prompt_rows(study: str, prepared: PreparedWorkload) -> list[dict[str, Any]]:
    """One ``conversations`` row per prompt (a single user turn, or a chat log's history up to
    the measured turn), the schema Speculators' ``prepare_data.py`` renders and its response
    regeneration reads."""
    return [
        {
            "id": f"{prepared.name}-{i}",
            "conversations": p.chat(),
            "metadata": _metadata(study, prepared, i, p.max_tokens),
        }
        for i, p in enumerate(prepared.prompts)
    ]


def _metadata(study: str, prepared: PreparedWorkload, i: int, max_tokens: int) -> dict[str, Any]:
    return {
        "idx": i,
        "study": study,
        "workload": prepared.name,
        "workload_digest": prepared.digest,
        "chat_template": prepared.chat_template,
        "max_tokens": max_tokens,
    }


# --- the target's responses ------------------------------------------------------------------


def generate_responses(resolved: ResolvedStudy, prepared: PreparedWorkload) -> list[Generation]:
    """The study's target's greedy responses to ``prepared``, started through the engine layer
    (:func:`autotune.engine.vllm.generate.generate_greedy`) with the study's engine args, TP and
    environment, without a speculative config."""
    from autotune.engine._base import EngineConfig
    from autotune.engine.vllm.generate import generate_greedy

    config = EngineConfig(
        model=resolved.model,
        tensor_parallel_size=resolved.tensor_parallel_size,
        engine_args=resolved.engine_args,
        env=resolved.env,
    )
    return generate_greedy(config, prepared)


def response_rows(
    study: str, model: str, prepared: PreparedWorkload, generations: Sequence[Generation]
) -> list[dict[str, Any]]:
    """Speculator-format rows (Response Regeneration's output schema): the prompt's token ids
    with loss mask 0, then the target's generated ids with loss mask 1."""
    rows = []
    for i, (p, g) in enumerate(zip(prepared.prompts, generations, strict=True)):
        meta = _metadata(study, prepared, i, p.max_tokens)
        meta.update(
            finish_reason=g.finish_reason,
            is_tool_call=False,
            usage={"prompt_tokens": len(g.prompt_ids), "completion_tokens": len(g.output_ids)},
            model=model,
            sampling_params={"temperature": 0.0, "max_tokens": p.max_tokens},
        )
        rows.append(
            {
                "id": f"{prepared.name}-{i}_gen0",
                "primary_id": f"{prepared.name}-{i}",
                "input_ids": [*g.prompt_ids, *g.output_ids],
                "loss_mask": [0] * len(g.prompt_ids) + [1] * len(g.output_ids),
                "text": g.text,
                "metadata": meta,
            }
        )
    return rows


# --- what Speculators' reader accepts --------------------------------------------------------


def check_speculator_rows(rows: Iterable[Mapping[str, Any]], source: str = "rows") -> int:
    """Check rows against what Speculators' ``_passthrough_pretokenized`` requires and return
    the number of supervised tokens. Raises ``ValueError`` naming the row and field."""
    supervised = 0
    count = 0
    for n, row in enumerate(rows):
        count += 1
        ids, mask = row.get("input_ids"), row.get("loss_mask")
        if not isinstance(ids, list) or not all(isinstance(t, int) and t >= 0 for t in ids):
            raise ValueError(f"{source}: row {n}: input_ids is not a list of token ids")
        if not isinstance(mask, list) or not all(m in (0, 1) for m in mask):
            raise ValueError(f"{source}: row {n}: loss_mask is not a list of 0/1")
        if len(ids) != len(mask):
            raise ValueError(
                f"{source}: row {n}: input_ids has {len(ids)} tokens, loss_mask {len(mask)}"
            )
        if not any(mask):
            # prepare_data.py drops such a row ("unsupervised"): it trains nothing.
            raise ValueError(f"{source}: row {n}: loss_mask supervises no token")
        supervised += sum(mask)
    if not count:
        raise ValueError(f"{source}: no rows")
    return supervised


def check_prompt_rows(rows: Iterable[Mapping[str, Any]], source: str = "rows") -> int:
    """Check ``conversations`` rows as Speculators reads them (``role``/``content`` turns, at
    least one user turn, as response regeneration needs) and return their number."""
    count = 0
    for n, row in enumerate(rows):
        count += 1
        conv = row.get("conversations")
        if not isinstance(conv, list) or not conv:
            raise ValueError(f"{source}: row {n}: conversations is not a non-empty list")
        for turn in conv:
            if not isinstance(turn, Mapping) or not isinstance(turn.get("content"), str):
                raise ValueError(f"{source}: row {n}: a turn has no text content")
        if not any(t.get("role") == "user" for t in conv):
            raise ValueError(f"{source}: row {n}: conversations has no user turn")
    if not count:
        raise ValueError(f"{source}: no rows")
    return count


# --- the commands ----------------------------------------------------------------------------


def target_path(model: str) -> str:
    """The target as Speculators' scripts take it: an HF id or a local path (``tiny:NAME``
    references resolve to their local checkpoint)."""
    from autotune.engine.models import resolve_model

    return resolve_model(model)


def _vocab_size(target: str) -> int | None:
    config = Path(target) / "config.json"
    try:
        size = json.loads(config.read_text()).get("vocab_size")
    except (OSError, ValueError):
        return None
    return size if isinstance(size, int) else None


def study_snippet(resolved: ResolvedStudy, workload: str, output: Path) -> str:
    """The ``autotune study create`` YAML that measures the trained drafts on the same prompt
    set (same workload, caps, concurrency and repeats as the exported study)."""
    spec = resolved.spec
    checkpoints = {
        m: str(output / m / "checkpoints" / "checkpoint_best") for m in ("eagle3", "dflash")
    }
    data: dict[str, Any] = {
        "name": f"{spec.name}-trained-draft",
        "model": spec.model.model_dump(exclude_defaults=True),
        "workloads": [workload],
        "concurrency": list(spec.concurrency),
        "methods": [
            {
                "method": "eagle3",
                "draft": checkpoints["eagle3"],
                "num_speculative_tokens": {"min": 1, "max": EAGLE3_MAX_N},
            },
            {
                "method": "dflash",
                "draft": checkpoints["dflash"],
                "num_speculative_tokens": {"min": 1, "max": DFLASH_BLOCK_SIZE - 1},
            },
        ],
        "repeats": spec.repeats,
        # The same caps give the same prompt set (digest), so the new draft is measured on
        # exactly the prompts it was trained for.
        "measurement": spec.measurement.model_dump(exclude_defaults=True),
    }
    if spec.trust_remote_code:
        data["trust_remote_code"] = True
    return yaml.safe_dump(data, sort_keys=False)


def commands_readme(
    resolved: ResolvedStudy,
    study: str,
    prepared: PreparedWorkload,
    output: Path,
    *,
    with_responses: bool,
) -> str:
    """README.md of the export: what is in it and the commands, as Speculators' training
    tutorial (docs/user_guide/tutorials/train.md at :data:`SPECULATORS_COMMIT`) states them."""
    target = target_path(resolved.model)
    vocab = _vocab_size(target)
    vocab_arg = (
        f" \\\n  --draft-vocab-size {DRAFT_VOCAB_SIZE}"
        if vocab is None or vocab > DRAFT_VOCAB_SIZE
        else ""
    )
    out = str(output)
    data = f"{out}/{RESPONSES_FILE}"
    prepared_dir = f"{out}/prepared"
    tutorial = f"{SPECULATORS_REPO}/blob/{SPECULATORS_COMMIT}/docs/user_guide/tutorials/train.md"
    lines = [
        f"# Speculators training data: study {study}, workload {prepared.name}",
        "",
        f"Exported by `autotune export --speculators-data {study} --workload {prepared.name}"
        f"{' --with-responses' if with_responses else ''}`: the {len(prepared.prompts)} prompts "
        f"the study measured (workload digest `{prepared.digest}`), target `{resolved.model}`.",
        "",
        f"- `{PROMPTS_FILE}`: one row per prompt, `conversations` with the user turn (the schema "
        "Speculators' `prepare_data.py` renders and its response regeneration reads).",
    ]
    if with_responses:
        lines.append(
            f"- `{RESPONSES_FILE}`: speculator-format rows (`input_ids`, `loss_mask`), the schema "
            "Speculators' response regeneration writes: the prompt as the target saw it "
            "(mask 0), then the target's greedy response generated on vLLM (mask 1). This is "
            "the on-policy data training needs; `prepare_data.py` takes it without a render "
            "endpoint."
        )
    lines += [
        f"- `{STUDY_FILE}`: the autotune study that measures the trained drafts.",
        "",
        f"Commands as Speculators' training tutorial states them ({tutorial}), online mode, "
        "run from a clone of https://github.com/vllm-project/speculators (the scripts are not "
        "in the PyPI package). Give `prepare_data.py` the file, not this directory: it would "
        "read every .jsonl here. On several GPUs run `train.py` under "
        "`torchrun --standalone --nproc_per_node N` as the tutorial shows.",
        "",
    ]
    if not with_responses:
        lines += [
            "## 0. Responses from the target",
            "",
            "Training needs the target's own responses. Generate them on the study's engine:",
            "",
            "```bash",
            f"autotune export --speculators-data {study} --workload {prepared.name} "
            f"--output {out} --with-responses",
            "```",
            "",
            "or with your own pipeline, then render the conversations with "
            "`prepare_data.py --render-endpoint http://localhost:8000` (step 1).",
            "",
        ]
    lines += [
        "## 1. Prepare the data (speculators venv)",
        "",
        "```bash",
        "python scripts/prepare_data.py \\",
        f"  --model {target} \\",
        f"  --data {data} \\",
        f"  --output {prepared_dir} \\",
        "  --seq-length 8192",
        "```",
        "",
        "## 2. Serve the target for its hidden states (vLLM venv)",
        "",
        "```bash",
        f"python scripts/launch_vllm.py {target}",
        "```",
        "",
        "## 3a. Train an EAGLE-3 draft (speculators venv)",
        "",
        "```bash",
        "python scripts/train.py \\",
        f"  --verifier-name-or-path {target} \\",
        f"  --data-path {prepared_dir} \\",
        f"  --save-path {out}/eagle3/checkpoints{vocab_arg} \\",
        "  --epochs 5 \\",
        "  --total-seq-len 8192 \\",
        "  --vllm-endpoint http://localhost:8000/v1 \\",
        "  --on-missing generate \\",
        "  --on-generate delete",
        "```",
        "",
        "## 3b. Train a DFlash draft (speculators venv)",
        "",
        "```bash",
        "python scripts/train.py \\",
        f"  --verifier-name-or-path {target} \\",
        f"  --data-path {prepared_dir} \\",
        f"  --save-path {out}/dflash/checkpoints{vocab_arg} \\",
        "  --epochs 5 \\",
        "  --total-seq-len 8192 \\",
        "  --speculator-type dflash \\",
        "  --num-layers 5 \\",
        "  --lr 3e-4 \\",
        "  --vllm-endpoint http://localhost:8000/v1 \\",
        "  --on-missing generate \\",
        "  --on-generate delete",
        "```",
        "",
        f"Each run keeps its lowest-validation-loss epoch as `checkpoints/checkpoint_best`, a "
        f"speculators checkpoint vLLM loads directly. DFlash trains with block size "
        f"{DFLASH_BLOCK_SIZE} by default, so vLLM drafts at most N = {DFLASH_BLOCK_SIZE - 1} "
        "with it.",
        "",
        "## 4. Measure the trained drafts with autotune",
        "",
        "```bash",
        f"autotune study create {out}/{STUDY_FILE}",
        f"autotune study run {resolved.spec.name}-trained-draft",
        f"autotune recommend --model {resolved.model_alias or resolved.model} "
        f"--workload {prepared.name} --explain",
        "```",
        "",
        f"`{STUDY_FILE}`:",
        "",
        "```yaml",
        study_snippet(resolved, prepared.name, output).rstrip(),
        "```",
        "",
    ]
    return "\n".join(lines)


# --- writing ---------------------------------------------------------------------------------


def check_output(output: Path) -> None:
    """Refuse an output that is a file or already holds an export (bad input, nothing written)."""
    if output.exists() and not output.is_dir():
        raise SpecError(f"{output} is a file, not a directory", source="--output")
    taken = [name for name in FILES if (output / name).exists()]
    if taken:
        raise SpecError(
            f"{output} already holds {', '.join(taken)}; choose another directory",
            source="--output",
        )


def write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """One JSON object per line, written to a temporary name and renamed into place."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
