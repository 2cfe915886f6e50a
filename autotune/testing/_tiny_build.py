"""The recipes behind :mod:`autotune.testing.tiny`: corpus, tokenizer, training, checkpoint files.

Imported only when a tiny model is built: it needs torch, tokenizers, transformers, safetensors.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import sysconfig
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from autotune.testing._checkpoint import (
    copy_tokenizer,
    llama_config,
    load_weights,
    run_build,
    save_weights,
    write_json,
)
from autotune.testing._tiny_nets import (
    Dims,
    Weights,
    dflash_block,
    eagle3_chain,
    greedy_generate,
    mimo_mtp_chain,
    target_forward,
)

# Stdlib modules shipped as sources by CPython 3.10-3.13; any that are missing are skipped.
CORPUS_MODULES = (
    "argparse.py", "ast.py", "calendar.py", "collections/__init__.py", "configparser.py",
    "csv.py", "dataclasses.py", "difflib.py", "enum.py", "fractions.py", "functools.py",
    "heapq.py", "inspect.py", "json/decoder.py", "json/encoder.py", "json/__init__.py",
    "logging/__init__.py", "pprint.py", "queue.py", "random.py", "shutil.py", "statistics.py",
    "string.py", "textwrap.py", "threading.py", "tokenize.py", "typing.py", "subprocess.py",
)  # fmt: skip
MIN_CORPUS_BYTES = 300_000

VOCAB_SIZE = 1024
BOS, EOS, UNK, MASK = "<s>", "</s>", "<unk>", "<|mask|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
SPECIAL_TOKENS = (BOS, EOS, UNK, MASK, *ROLE_TOKENS)  # ids 0..7, in this order
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

TARGET = Dims(hidden_size=256, intermediate_size=1024, num_layers=4, num_heads=4,
              vocab_size=VOCAB_SIZE)  # fmt: skip
DRAFT_LAYERS = 2  # the draft starts as the target's first two layers
AUX_LAYER_IDS = (1, 2, 3)  # residual stream after target layers 0, 1, 2 (vLLM's indexing)
DFLASH_BLOCK_SIZE = 4
DFLASH_LAYERS = 1
NUM_DRAFT_POSITIONS = 3  # draft steps unrolled in training and scored in simulation
POSITION_DECAY = 0.8  # loss weight ratio between consecutive draft positions

GENERATED_FILE = "autotune_self_generated.json"  # JSON, not weights: vLLM ignores it
GENERATED_PROMPT_LEN = 32
GENERATED_NEW_TOKENS = 128
GENERATED_TRAIN, GENERATED_EVAL = 64, 16
HELD_OUT = 0.05  # tail of the corpus token stream, for the target's held-out loss


@dataclass(frozen=True)
class Stage:
    """One training run: the knobs that trade build time for acceptance."""

    steps: int
    batch: int
    lr: float
    seed: int
    seq_len: int


RECIPE: Mapping[str, Stage] = {
    # Short windows buy more updates per second; nothing here needs a long context to learn.
    "llama": Stage(steps=240, batch=16, lr=3e-3, seed=1, seq_len=64),
    "draft": Stage(steps=40, batch=16, lr=1e-3, seed=2, seq_len=64),
    "eagle3": Stage(steps=100, batch=8, lr=4e-3, seed=3, seq_len=64),
    # DFlash must learn where each mask slot sits from positions alone: it needs more updates.
    "dflash": Stage(steps=160, batch=8, lr=3e-3, seed=4, seq_len=64),
    "mtp": Stage(steps=100, batch=8, lr=4e-3, seed=5, seq_len=64),
}


# --- corpus and tokenizer ------------------------------------------------------------------


def corpus_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [root / m for m in CORPUS_MODULES if (root / m).is_file()]
    size = sum(f.stat().st_size for f in files)
    if size < MIN_CORPUS_BYTES:
        raise RuntimeError(
            f"tiny models train on Python stdlib sources; found only {size} bytes under {root}"
        )
    return files


def build_tokenizer(out: Path) -> Any:
    """Train the byte-level BPE on the corpus; save it with its chat template to ``out``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(f) for f in corpus_files()], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        additional_special_tokens=[MASK, *ROLE_TOKENS],
        model_max_length=2048,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))
    return fast


def load_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def corpus_ids(tokenizer: Any) -> tuple[Tensor, Tensor]:
    """The corpus as one token stream (documents end with EOS), split into train and held-out."""
    ids: list[int] = []
    for f in corpus_files():
        # The backend encoder: whole files are never fed to a model, so no length warning.
        ids.extend(tokenizer.backend_tokenizer.encode(f.read_text(encoding="utf-8")).ids)
        ids.append(tokenizer.eos_token_id)
    stream = torch.tensor(ids, dtype=torch.long)
    cut = int(len(stream) * (1 - HELD_OUT))
    return stream[:cut], stream[cut:]


def windows(stream: Tensor, length: int, batch: int, seed: int) -> Iterator[Tensor]:
    """Endless seeded batches [batch, length] of random windows of a token stream."""
    gen = torch.Generator().manual_seed(seed)
    while True:
        starts = torch.randint(0, len(stream) - length, (batch,), generator=gen)
        yield torch.stack([stream[s : s + length] for s in starts.tolist()])


def mixed_windows(
    stream: Tensor, generated: Tensor, length: int, batch: int, seed: int
) -> Iterator[Tensor]:
    """Half corpus windows, half windows of the target's own greedy continuations.

    At inference a drafter reads the target's own output, which for a small model is far more
    repetitive than the corpus; published heads likewise train on target-regenerated data.
    """
    gen = torch.Generator().manual_seed(seed)
    own_n = batch // 2
    corpus = windows(stream, length, batch - own_n, seed + 1000)
    while True:
        rows = torch.randint(0, len(generated), (own_n,), generator=gen).tolist()
        offs = torch.randint(0, generated.shape[1] - length + 1, (own_n,), generator=gen)
        own = [generated[r, o : o + length] for r, o in zip(rows, offs.tolist(), strict=True)]
        yield torch.cat([next(corpus), torch.stack(own)])


# --- training and scoring ------------------------------------------------------------------


def train(
    params: Weights, loss_fn: Callable[[Tensor], Tensor], batches: Iterator[Tensor], stage: Stage
) -> None:
    """AdamW, linear warm-up then cosine decay to 10%; updates ``params`` in place."""
    tensors = list(params.values())
    for p in tensors:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(tensors, lr=stage.lr, weight_decay=0.01, betas=(0.9, 0.95))
    warmup = max(1, stage.steps // 10)

    def schedule(i: int) -> float:
        if i < warmup:
            return (i + 1) / warmup
        progress = (i - warmup) / max(1, stage.steps - warmup)
        return 0.1 + 0.45 * (1.0 + math.cos(progress * math.pi))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    for _ in range(stage.steps):
        loss = loss_fn(next(batches))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(tensors, 1.0)
        opt.step()
        sched.step()
    for p in tensors:
        p.requires_grad_(False)


def distill_loss(student_logits: Tensor, teacher_logits: Tensor) -> Tensor:
    """Cross-entropy against the target's distribution (forward KL up to a constant)."""
    v = student_logits.shape[-1]
    teacher = teacher_logits.reshape(-1, v).softmax(-1)
    return -(teacher * student_logits.reshape(-1, v).log_softmax(-1)).sum(-1).mean()


def per_position_loss(drafts: Tensor, teacher: Tensor) -> Tensor:
    """Distillation loss of drafts [B, T, N, V] against teacher rows [B, >= T + N, V].

    Draft i at anchor a predicts the token at a + 2 + i, whose target distribution is teacher
    row a + 1 + i. Later positions weigh less: they are reached less often.
    """
    t, n = drafts.shape[1], drafts.shape[2]
    losses = [distill_loss(drafts[:, :, i], teacher[:, 1 + i : 1 + i + t]) for i in range(n)]
    return torch.stack([POSITION_DECAY**i * loss for i, loss in enumerate(losses)]).sum() / n


def simulated_acceptance(drafts: Tensor, sequences: Tensor, first_anchor: int) -> list[float]:
    """Greedy acceptance per position, as vLLM counts it, of drafts on the target's own text.

    ``sequences`` [B, L] are the target's greedy continuations, so the token at a + 2 + i is what
    the target would verify for draft i at anchor a (drafts [B, T, N], token ids). Draft i is
    accepted when it and every earlier draft match. Averaged over every anchor of the generated
    part, not only over the anchors vLLM's step boundaries land on.
    """
    t, n = drafts.shape[1], drafts.shape[2]
    truth = torch.stack([sequences[:, 2 + i : 2 + i + t] for i in range(n)], dim=-1)
    accepted = (drafts == truth).long().cumprod(-1)[:, first_anchor:]
    return [round(x, 4) for x in accepted.float().mean((0, 1)).tolist()]


def _normal(gen: torch.Generator, out_dim: int, in_dim: int, std: float = 0.02) -> Tensor:
    return torch.randn(out_dim, in_dim, generator=gen) * std


def _decoder_layer(gen: torch.Generator, prefix: str, dims: Dims, qkv_in: int) -> Weights:
    """A freshly initialised pre-norm decoder layer under HF/vLLM weight names."""
    h, i = dims.hidden_size, dims.intermediate_size
    out_std = 0.02 / (2 * dims.num_layers) ** 0.5  # residual branches start near identity
    return {
        prefix + "input_layernorm.weight": torch.ones(h),
        prefix + "post_attention_layernorm.weight": torch.ones(h),
        prefix + "self_attn.q_proj.weight": _normal(gen, h, qkv_in),
        prefix + "self_attn.k_proj.weight": _normal(gen, h, qkv_in),
        prefix + "self_attn.v_proj.weight": _normal(gen, h, qkv_in),
        prefix + "self_attn.o_proj.weight": _normal(gen, h, h, out_std),
        prefix + "mlp.gate_proj.weight": _normal(gen, i, h),
        prefix + "mlp.up_proj.weight": _normal(gen, i, h),
        prefix + "mlp.down_proj.weight": _normal(gen, h, i, out_std),
    }


# --- the models ----------------------------------------------------------------------------


def build_llama(out: Path, deps: Mapping[str, Path]) -> dict[str, Any]:
    """Tokenizer, then the target trained briefly on the corpus; then its own generations."""
    del deps
    stage = RECIPE["llama"]
    tokenizer = build_tokenizer(out)
    train_ids, held = corpus_ids(tokenizer)
    gen = torch.Generator().manual_seed(stage.seed)
    w: Weights = {
        "model.embed_tokens.weight": _normal(gen, VOCAB_SIZE, TARGET.hidden_size),
        "model.norm.weight": torch.ones(TARGET.hidden_size),
        "lm_head.weight": _normal(gen, VOCAB_SIZE, TARGET.hidden_size),
    }
    for n in range(TARGET.num_layers):
        w.update(_decoder_layer(gen, f"model.layers.{n}.", TARGET, TARGET.hidden_size))

    def next_token_loss(batch: Tensor) -> Tensor:
        logits, _ = target_forward(w, batch[:, :-1], TARGET)
        return F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), batch[:, 1:].reshape(-1))

    window = stage.seq_len + 1
    train(w, next_token_loss, windows(train_ids, window, stage.batch, stage.seed), stage)
    n_held = len(held) // window
    with torch.no_grad():
        held_loss = next_token_loss(held[: n_held * window].view(n_held, window))
    write_json(out / "config.json", llama_config(TARGET, TARGET.num_layers))
    save_weights(w, out)
    # Generate from the bf16 weights vLLM will serve, so drafters learn the served target.
    served = load_weights(out)
    generated = {
        "train": self_generate(served, tokenizer, train_ids, GENERATED_TRAIN, seed=11),
        "eval": self_generate(served, tokenizer, held, GENERATED_EVAL, seed=12),
    }
    (out / GENERATED_FILE).write_text(json.dumps({k: v.tolist() for k, v in generated.items()}))
    return {"held_out_loss": round(held_loss.item(), 4)}


def self_generate(w: Weights, tokenizer: Any, stream: Tensor, n: int, seed: int) -> Tensor:
    """The target's greedy continuations of ``n`` corpus snippets, half of them as chat turns."""
    ids = tokenizer.convert_tokens_to_ids
    newline = tokenizer.backend_tokenizer.encode("\n").ids
    head = torch.tensor([ids(BOS), ids("<|user|>"), *newline])
    tail = torch.tensor([ids("<|end|>"), *newline, ids("<|assistant|>"), *newline])
    raw = next(windows(stream, GENERATED_PROMPT_LEN, n - n // 2, seed))
    body = next(windows(stream, GENERATED_PROMPT_LEN - len(head) - len(tail), n // 2, seed + 1))
    chat = torch.cat([head.expand(n // 2, -1), body, tail.expand(n // 2, -1)], dim=1)
    return torch.cat([greedy_generate(w, p, TARGET, GENERATED_NEW_TOKENS) for p in (raw, chat)])


@dataclass(frozen=True)
class TrainingData:
    """What every drafter trains on: the served target, the corpus and the target's text."""

    target: Weights
    tokenizer: Any
    corpus: Tensor
    generated: Tensor
    generated_eval: Tensor

    @classmethod
    def load(cls, llama: Path) -> TrainingData:
        tokenizer = load_tokenizer(llama)
        corpus, _ = corpus_ids(tokenizer)
        generated = json.loads((llama / GENERATED_FILE).read_text())
        return cls(
            target=load_weights(llama),
            tokenizer=tokenizer,
            corpus=corpus,
            generated=torch.tensor(generated["train"], dtype=torch.long),
            generated_eval=torch.tensor(generated["eval"], dtype=torch.long),
        )

    def batches(self, length: int, stage: Stage) -> Iterator[Tensor]:
        return mixed_windows(self.corpus, self.generated, length, stage.batch, stage.seed)

    def teacher(self, batch: Tensor) -> tuple[Tensor, list[Tensor]]:
        with torch.no_grad():
            return target_forward(self.target, batch, TARGET)

    def aux_features(self, stream: list[Tensor], anchors: int) -> Tensor:
        return torch.cat([stream[j] for j in AUX_LAYER_IDS], dim=-1)[:, :anchors]

    def score(self, drafts_of: Callable[[Tensor], Tensor]) -> list[float]:
        """Simulated acceptance per position on held-out generations (no engine involved)."""
        seqs = self.generated_eval
        with torch.no_grad():
            drafts = drafts_of(seqs).argmax(-1)
        return simulated_acceptance(drafts, seqs, first_anchor=GENERATED_PROMPT_LEN - 1)


def build_draft(out: Path, deps: Mapping[str, Path]) -> dict[str, Any]:
    """A smaller Llama: the target's first two layers, distilled on the target's distribution."""
    stage, data = RECIPE["draft"], TrainingData.load(deps["llama"])
    w = {
        k: v.clone()
        for k, v in data.target.items()
        if not k.startswith("model.layers.") or int(k.split(".")[2]) < DRAFT_LAYERS
    }
    dims = dataclasses.replace(TARGET, num_layers=DRAFT_LAYERS)

    def loss_fn(batch: Tensor) -> Tensor:
        teacher, _ = data.teacher(batch)
        return distill_loss(target_forward(w, batch, dims)[0], teacher)

    train(w, loss_fn, data.batches(stage.seq_len, stage), stage)

    def drafts_of(seqs: Tensor) -> Tensor:
        # Draft i at anchor a reads the target's tokens up to a + 1 + i (they match the draft's
        # own earlier proposals whenever those were accepted) and predicts the next one.
        logits, _ = target_forward(w, seqs, dims)
        t = seqs.shape[1] - NUM_DRAFT_POSITIONS - 1
        return torch.stack([logits[:, 1 + i : 1 + i + t] for i in range(NUM_DRAFT_POSITIONS)], 2)

    write_json(out / "config.json", llama_config(TARGET, DRAFT_LAYERS))
    save_weights(w, out)
    copy_tokenizer(deps["llama"], out)
    return {"simulated_acceptance_per_pos": data.score(drafts_of)}


def build_eagle3(out: Path, deps: Mapping[str, Path]) -> dict[str, Any]:
    """A one-layer EAGLE-3 head on the target's aux hidden states, trained over 3 draft steps."""
    stage, data = RECIPE["eagle3"], TrainingData.load(deps["llama"])
    h = TARGET.hidden_size
    gen = torch.Generator().manual_seed(stage.seed)
    w: Weights = {
        "fc.weight": _normal(gen, h, len(AUX_LAYER_IDS) * h),
        "midlayer.hidden_norm.weight": torch.ones(h),
        **_decoder_layer(gen, "midlayer.", TARGET, 2 * h),
        "norm.weight": data.target["model.norm.weight"].clone(),
        # Its own lm_head, as published heads have; it starts as the target's.
        "lm_head.weight": data.target["lm_head.weight"].clone(),
    }
    embed = data.target["model.embed_tokens.weight"]

    def drafts(batch: Tensor, teacher_stream: list[Tensor]) -> Tensor:
        t = batch.shape[1] - NUM_DRAFT_POSITIONS - 1
        feats = data.aux_features(teacher_stream, t)
        return torch.stack(eagle3_chain(w, TARGET, feats, batch, embed, NUM_DRAFT_POSITIONS), 2)

    def loss_fn(batch: Tensor) -> Tensor:
        teacher, stream = data.teacher(batch)
        return per_position_loss(drafts(batch, stream), teacher)

    train(w, loss_fn, data.batches(stage.seq_len + NUM_DRAFT_POSITIONS + 1, stage), stage)
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
    score = data.score(lambda seqs: drafts(seqs, data.teacher(seqs)[1]))
    return {"simulated_acceptance_per_pos": score}


def build_dflash(out: Path, deps: Mapping[str, Path]) -> dict[str, Any]:
    """A one-layer DFlash block drafter on the target's aux hidden states, block size 4."""
    stage, data = RECIPE["dflash"], TrainingData.load(deps["llama"])
    h, hd = TARGET.hidden_size, TARGET.head_dim
    mask_id = data.tokenizer.convert_tokens_to_ids(MASK)
    gen = torch.Generator().manual_seed(stage.seed)
    w: Weights = {
        "fc.weight": _normal(gen, h, len(AUX_LAYER_IDS) * h),
        "hidden_norm.weight": torch.ones(h),
        "norm.weight": data.target["model.norm.weight"].clone(),
    }
    for n in range(DFLASH_LAYERS):
        w.update(_decoder_layer(gen, f"layers.{n}.", TARGET, h))
        w[f"layers.{n}.self_attn.q_norm.weight"] = torch.ones(hd)
        w[f"layers.{n}.self_attn.k_norm.weight"] = torch.ones(hd)
    # DFlash checkpoints ship neither: vLLM shares the target's embedding and lm_head.
    embed, lm_head = data.target["model.embed_tokens.weight"], data.target["lm_head.weight"]

    def drafts(batch: Tensor, teacher_stream: list[Tensor]) -> Tensor:
        t = batch.shape[1] - NUM_DRAFT_POSITIONS - 1
        feats = data.aux_features(teacher_stream, t)
        return dflash_block(w, TARGET, feats, batch, embed, lm_head, DFLASH_BLOCK_SIZE, mask_id)

    def loss_fn(batch: Tensor) -> Tensor:
        teacher, stream = data.teacher(batch)
        return per_position_loss(drafts(batch, stream), teacher)

    train(w, loss_fn, data.batches(stage.seq_len + NUM_DRAFT_POSITIONS + 1, stage), stage)
    config = {
        **llama_config(TARGET, DFLASH_LAYERS),
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "block_size": DFLASH_BLOCK_SIZE,
        "num_target_layers": TARGET.num_layers,
        "dflash_config": {
            "mask_token_id": mask_id,
            "target_layer_ids": [j - 1 for j in AUX_LAYER_IDS],
        },
    }
    write_json(out / "config.json", config)
    save_weights(w, out)
    score = data.score(lambda seqs: drafts(seqs, data.teacher(seqs)[1]))
    return {"simulated_acceptance_per_pos": score}


def build_mtp(out: Path, deps: Mapping[str, Path]) -> dict[str, Any]:
    """A MiMo-style target: the llama's weights on a Qwen2 body plus one trained MTP layer."""
    stage, data = RECIPE["mtp"], TrainingData.load(deps["llama"])
    h = TARGET.hidden_size
    gen = torch.Generator().manual_seed(stage.seed)
    p = "model.mtp_layers.0."
    w: Weights = {
        p + "token_layernorm.weight": torch.ones(h),
        p + "hidden_layernorm.weight": torch.ones(h),
        p + "input_proj.weight": _normal(gen, h, 2 * h),
        **_decoder_layer(gen, p, TARGET, h),
        p + "final_layernorm.weight": data.target["model.norm.weight"].clone(),
    }
    for proj in "qkv":  # Qwen2 attention has q/k/v biases
        w[f"{p}self_attn.{proj}_proj.bias"] = torch.zeros(h)
    embed, lm_head = data.target["model.embed_tokens.weight"], data.target["lm_head.weight"]

    def drafts(batch: Tensor, teacher_stream: list[Tensor]) -> Tensor:
        t = batch.shape[1] - NUM_DRAFT_POSITIONS - 1
        last = teacher_stream[TARGET.num_layers][:, :t]
        chain = mimo_mtp_chain(w, TARGET, last, batch, embed, lm_head, NUM_DRAFT_POSITIONS)
        return torch.stack(chain, 2)

    def loss_fn(batch: Tensor) -> Tensor:
        teacher, stream = data.teacher(batch)
        return per_position_loss(drafts(batch, stream), teacher)

    train(w, loss_fn, data.batches(stage.seq_len + NUM_DRAFT_POSITIONS + 1, stage), stage)
    weights = dict(data.target)
    for n in range(TARGET.num_layers):  # the llama has no q/k/v bias: Qwen2's are zero
        for proj in "qkv":
            weights[f"model.layers.{n}.self_attn.{proj}_proj.bias"] = torch.zeros(h)
    weights.update(w)
    config = {
        **llama_config(TARGET, TARGET.num_layers),
        "architectures": ["MiMoForCausalLM"],
        "model_type": "qwen2",
        "num_nextn_predict_layers": 1,
        "use_sliding_window": False,
        "max_window_layers": TARGET.num_layers,
    }
    for key in ("attention_bias", "mlp_bias", "head_dim"):
        del config[key]
    write_json(out / "config.json", config)
    save_weights(weights, out)
    copy_tokenizer(deps["llama"], out)
    score = data.score(lambda seqs: drafts(seqs, data.teacher(seqs)[1]))
    return {"simulated_acceptance_per_pos": score}


BUILDERS: Mapping[str, Callable[[Path, Mapping[str, Path]], dict[str, Any]]] = {
    "llama": build_llama,
    "draft": build_draft,
    "eagle3": build_eagle3,
    "dflash": build_dflash,
    "mtp": build_mtp,
}


def main(argv: list[str]) -> None:
    """``python -m autotune.testing._tiny_build NAME OUT [DEP=PATH ...]``: build into OUT (some
    CPU kernels, index and attention backward, vary from run to run unless made deterministic).
    Run by :func:`autotune.testing.tiny.build`, which owns caching, locking and renaming."""
    run_build(argv, BUILDERS, RECIPE)


if __name__ == "__main__":
    main(sys.argv[1:])
