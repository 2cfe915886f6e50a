"""Read the JSONL that SGLang's ``scripts/playground/bench_speculative.py`` appends to ``--output``
into :class:`~autotune.engine.readers.imported.ImportedSweep` records.

Source read: sgl-project/sglang, ``scripts/playground/bench_speculative.py`` at commits
01d2a3d0d57bc35da92de3833d72412c0b448210 and 96fd6bf0cbbf0f41b825f74890fadadb0ff14712 (the same
record in both). ``main`` starts one server per (batch_size, steps, topk, num_draft_tokens), with
``--speculative-num-steps steps --speculative-eagle-topk topk --speculative-num-draft-tokens
num_draft_tokens`` unless ``steps == 0`` (no speculation), and ``--max-running-requests
batch_size``; ``send_one_batch`` sends its fixed prompt list at ``max_concurrency=batch_size``
with 512 output tokens and writes one line per config::

    {"batch_size": .., "steps": .., "topk": .., "num_draft_tokens": .., "acc_length": ..,
     "step_time": .., "speed": .., "completion_tokens": ..}

``acc_length`` is the server's mean accepted tokens per verify step, bonus token included
(vLLM's mean acceptance length; 1.0 without speculation); ``step_time`` the 20th percentile of
the server's decode step times at that batch size, in seconds; ``speed = acc_length /
step_time``, the decode speed of one request in tokens/s; ``completion_tokens`` the mean output
tokens per request. Neither the speculative algorithm nor the draft is written (they are server
flags), so ``autotune import`` takes them as ``--method`` and ``--draft``; the target is
``--model`` (some copies of the script also write ``model_path``, which is read when present).

Mapping: ``batch_size`` is the concurrency level; ``steps`` is N (a chain drafter with ``topk =
1`` proposes ``num_draft_tokens = steps + 1`` tokens, the first the verified one); ``topk > 1``
is tree drafting, which vLLM has no knob for, and is refused. Output throughput is ``speed *
batch_size`` (every request in the batch decodes at that speed: a decode-only rate at the
20th-percentile step, not an end-to-end throughput). The acceptance length is stored as drafts
and accepted tokens scaled to :data:`autotune.engine.replay.REPLAY_DRAFTS` drafts; per-position
acceptance and latencies are not recorded. A config written twice (a rerun appended to the same
file) gives repeats 0, 1, ...
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

from autotune.engine._base import EngineConfig, Measurement
from autotune.engine.readers.imported import (
    SGLANG_BENCH,
    ImportedRun,
    ImportedSweep,
    check_cells,
    config_from_speculative,
)
from autotune.engine.replay import REPLAY_DRAFTS
from autotune.errors import SpecError
from autotune.spec.reading import MAX_LANDSCAPE_BYTES

KEYS = (
    "batch_size",
    "steps",
    "topk",
    "num_draft_tokens",
    "acc_length",
    "step_time",
    "speed",
    "completion_tokens",
)
"""What every line of bench_speculative.py's output has."""

WORKLOAD = "bench_speculative"
"""The default workload name: the script's own fixed prompt list."""


def read_sglang_bench(
    path: Path | str,
    *,
    model: str | None,
    method: str,
    draft: str | None = None,
    workload: str | None = None,
) -> ImportedSweep:
    """Every line of a bench_speculative.py JSONL. Raises SpecError naming the file, the line
    and the field on a line that does not parse or lacks a key."""
    file = Path(path).resolve()
    source = str(path)
    if not file.is_file():
        raise SpecError("file not found", source=source)
    if file.stat().st_size > MAX_LANDSCAPE_BYTES:
        raise SpecError(f"larger than {MAX_LANDSCAPE_BYTES} bytes", source=source)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read: {exc}", source=source) from None
    name = workload or WORKLOAD
    digest = f"sglang-bench:{hashlib.sha256(name.encode()).hexdigest()[:16]}"
    seen: Counter[tuple[int, int, int]] = Counter()
    models: set[str] = set()
    runs: list[ImportedRun] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        at = f"line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpecError(f"not JSON ({exc.msg})", source=source, field=at) from None
        if not isinstance(record, dict):
            raise SpecError("not a JSON object", source=source, field=at)
        target = model or record.get("model_path")
        if not isinstance(target, str) or not target:
            raise SpecError("not recorded: give --model", source=source, field=f"{at}.model_path")
        models.add(target)
        values = {key: _number(record, key, source, at) for key in KEYS}
        for key, low in (("batch_size", 1.0), ("speed", 1e-12), ("step_time", 1e-12)):
            if values[key] < low:
                raise SpecError("must be positive", source=source, field=f"{at}.{key}")
        if values["acc_length"] < 1.0:
            raise SpecError(
                "below 1 (it counts the bonus token)", source=source, field=f"{at}.acc_length"
            )
        steps, topk, batch = int(values["steps"]), int(values["topk"]), int(values["batch_size"])
        config = _config(target, method, draft, steps, topk, source, at)
        cell = (steps, topk, batch)
        repeat = seen[cell]
        seen[cell] += 1
        runs.append(ImportedRun(config, _measurement(values, name, digest, batch, repeat, steps)))
    if not runs:
        raise SpecError("no records (an empty file)", source=source)
    if len(models) > 1:
        raise SpecError(
            f"runs of several models ({', '.join(sorted(models))})",
            source=source,
            field="model_path",
        )
    check_cells(runs, source)
    return ImportedSweep(
        tool=SGLANG_BENCH, label="sglang", path=file, model=models.pop(), runs=tuple(runs)
    )


def _number(record: dict[str, Any], key: str, source: str, at: str) -> float:
    value = record.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise SpecError("missing or not a non-negative number", source=source, field=f"{at}.{key}")
    if key in ("batch_size", "steps", "topk", "num_draft_tokens") and value != int(value):
        raise SpecError("not an integer", source=source, field=f"{at}.{key}")
    return float(value)


def _config(
    model: str, method: str, draft: str | None, steps: int, topk: int, source: str, at: str
) -> EngineConfig:
    if steps == 0:
        return EngineConfig(model=model)
    if topk != 1:
        raise SpecError(
            f"topk {topk} is tree drafting, which vLLM's --speculative-config has no knob for "
            "(import the topk = 1 rows)",
            source=source,
            field=f"{at}.topk",
        )
    spec: dict[str, Any] = {"method": method, "num_speculative_tokens": steps}
    if draft is not None:
        spec["model"] = draft
    return config_from_speculative(model, spec, source=source, field="--method")


def _measurement(
    values: dict[str, float], workload: str, digest: str, batch: int, repeat: int, steps: int
) -> Measurement:
    acc = values["acc_length"]
    drafts = REPLAY_DRAFTS if steps else 0
    accepted = round((acc - 1.0) * drafts) if steps else 0
    return Measurement(
        workload=workload,
        workload_digest=digest,
        concurrency=batch,
        repeat=repeat,
        seed=0,
        num_requests=0,
        num_prompt_tokens=0,
        num_output_tokens=round(values["completion_tokens"] * batch),
        measure_s=0.0,
        output_throughput_tok_s=values["speed"] * batch,
        request_throughput_req_s=0.0,
        num_drafts=drafts,
        num_draft_tokens=drafts * steps,
        num_accepted_tokens=accepted,
        max_inflight=batch,
    )
