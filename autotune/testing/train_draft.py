"""The tiny trainer's data entry point: a tiny EAGLE-3 draft trained on exported rows only.

``python -m autotune.testing.train_draft DATA.jsonl OUT [--steps N]`` trains a one-layer EAGLE-3
head for the tiny target (``tiny:llama``) on speculator-format rows, the ``input_ids`` and
``loss_mask`` that ``autotune export --speculators-data --with-responses`` writes and vLLM
Speculators' ``prepare_data.py`` passes through, and saves a checkpoint vLLM loads as an
``eagle3`` draft. It is the test stand-in for Speculators' ``train.py``: the same data, the
tiny models' own recipe (:mod:`autotune.testing._tiny_build`).

The head and its training are ``build_eagle3``'s: the target's aux hidden states, unrolled over
3 draft steps, distilled against the served target's distribution. What differs is the data:
random windows of the rows instead of the built-in corpus, and a draft counts in the loss only
where the token it predicts is supervised (loss mask 1, the target's response), as Speculators
masks its loss. This module is not one of ``tiny.py``'s recipe sources, so adding it leaves the
cached tiny builds valid.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from autotune.testing._checkpoint import llama_config, load_weights, save_weights, write_json
from autotune.testing._tiny_build import (
    AUX_LAYER_IDS,
    NUM_DRAFT_POSITIONS,
    POSITION_DECAY,
    RECIPE,
    TARGET,
    VOCAB_SIZE,
    Stage,
    _decoder_layer,
    _normal,
    train,
)
from autotune.testing._tiny_nets import Weights, eagle3_chain, target_forward

REPORT_FILE = "autotune_train_report.json"
"""What a run records in OUT: steps, windows, the loss before and after, the data's digest."""


def load_rows(path: Path) -> list[tuple[Tensor, Tensor]]:
    """(input_ids, loss_mask) of every speculator-format row of a JSONL file."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f):
            if not line.strip():
                continue
            row = json.loads(line)
            ids, mask = row.get("input_ids"), row.get("loss_mask")
            if not isinstance(ids, list) or not isinstance(mask, list) or len(ids) != len(mask):
                raise ValueError(f"{path}: row {n}: needs input_ids and loss_mask of one length")
            if max(ids, default=0) >= VOCAB_SIZE:
                raise ValueError(f"{path}: row {n}: a token id is outside the tiny vocabulary")
            rows.append((torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.long)))
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def row_windows(
    rows: Sequence[tuple[Tensor, Tensor]], length: int, batch: int, seed: int
) -> Iterator[tuple[Tensor, Tensor]]:
    """Endless seeded batches of windows (ids [B, length], mask [B, length]) of the rows, each
    placed so that it reaches into the row's supervised part."""
    usable = [r for r in rows if len(r[0]) >= length and bool(r[1].any())]
    if not usable:
        raise ValueError(f"no row is {length} tokens long with a supervised token")
    gen = torch.Generator().manual_seed(seed)
    while True:
        ids, masks = [], []
        for r in torch.randint(0, len(usable), (batch,), generator=gen).tolist():
            row_ids, mask = usable[r]
            first = int(mask.nonzero()[0])
            hi = len(row_ids) - length
            lo = max(0, min(first - length // 2, hi))
            s = int(torch.randint(lo, hi + 1, (1,), generator=gen))
            ids.append(row_ids[s : s + length])
            masks.append(mask[s : s + length])
        yield torch.stack(ids), torch.stack(masks)


def masked_position_loss(drafts: Tensor, teacher: Tensor, mask: Tensor) -> Tensor:
    """``per_position_loss`` of the tiny recipe, counting draft i at anchor a only where the
    token it predicts (a + 2 + i) is supervised."""
    t, n = drafts.shape[1], drafts.shape[2]
    losses = []
    for i in range(n):
        target = teacher[:, 1 + i : 1 + i + t].softmax(-1)
        ce = -(target * drafts[:, :, i].log_softmax(-1)).sum(-1)
        weight = mask[:, 2 + i : 2 + i + t].to(ce.dtype)
        losses.append(POSITION_DECAY**i * (ce * weight).sum() / weight.sum().clamp(min=1.0))
    return torch.stack(losses).sum() / n


def train_eagle3(data: Path, out: Path, llama: Path, steps: int | None = None) -> dict[str, Any]:
    """Train the tiny EAGLE-3 head on ``data`` (speculator-format JSONL) and save it to ``out``."""
    base = RECIPE["eagle3"]
    stage = Stage(
        steps=steps or base.steps,
        batch=base.batch,
        lr=base.lr,
        seed=base.seed,
        seq_len=base.seq_len,
    )
    rows = load_rows(data)
    length = min(stage.seq_len + NUM_DRAFT_POSITIONS + 1, min(len(r[0]) for r in rows))
    target = load_weights(llama)
    h = TARGET.hidden_size
    gen = torch.Generator().manual_seed(stage.seed)
    w: Weights = {
        "fc.weight": _normal(gen, h, len(AUX_LAYER_IDS) * h),
        "midlayer.hidden_norm.weight": torch.ones(h),
        **_decoder_layer(gen, "midlayer.", TARGET, 2 * h),
        "norm.weight": target["model.norm.weight"].clone(),
        "lm_head.weight": target["lm_head.weight"].clone(),
    }
    embed = target["model.embed_tokens.weight"]

    def loss_fn(batch: tuple[Tensor, Tensor]) -> Tensor:
        ids, mask = batch
        with torch.no_grad():
            teacher, stream = target_forward(target, ids, TARGET)
        t = ids.shape[1] - NUM_DRAFT_POSITIONS - 1
        feats = torch.cat([stream[j] for j in AUX_LAYER_IDS], dim=-1)[:, :t]
        drafts = torch.stack(eagle3_chain(w, TARGET, feats, ids, embed, NUM_DRAFT_POSITIONS), 2)
        return masked_position_loss(drafts, teacher, mask)

    probe = next(row_windows(rows, length, 16, stage.seed + 1))
    with torch.no_grad():
        before = loss_fn(probe).item()
    start = time.perf_counter()
    train(w, loss_fn, row_windows(rows, length, stage.batch, stage.seed), stage)  # type: ignore[arg-type]
    with torch.no_grad():
        after = loss_fn(probe).item()
    out.mkdir(parents=True, exist_ok=True)
    config = {
        **llama_config(TARGET, 1),
        "architectures": ["LlamaForCausalLMEagle3"],
        "draft_vocab_size": VOCAB_SIZE,
        "target_hidden_size": h,
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": list(AUX_LAYER_IDS),
            "use_aux_hidden_state": True,
        },
    }
    write_json(out / "config.json", config)
    save_weights(w, out)
    report = {
        "data": str(data),
        "rows": len(rows),
        "supervised_tokens": int(sum(int(m.sum()) for _, m in rows)),
        "window": length,
        "steps": stage.steps,
        "loss_before": round(before, 4),
        "loss_after": round(after, 4),
        "train_s": round(time.perf_counter() - start, 2),
    }
    write_json(out / REPORT_FILE, report)
    return report


def main(argv: Sequence[str]) -> None:
    """``python -m autotune.testing.train_draft DATA OUT [--steps N]``; prints the report."""
    import argparse

    from autotune.engine.tiny import build

    parser = argparse.ArgumentParser(prog="python -m autotune.testing.train_draft")
    parser.add_argument("data", type=Path, help="speculator-format JSONL (input_ids, loss_mask)")
    parser.add_argument("out", type=Path, help="directory for the EAGLE-3 checkpoint")
    parser.add_argument("--steps", type=int, default=None, help="training steps [recipe's]")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    report = train_eagle3(args.data, args.out, build("llama"), args.steps)
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
