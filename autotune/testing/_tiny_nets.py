"""Functional torch forwards of the tiny target and its drafters, written to match vLLM's layers.

Weights are plain ``dict[str, Tensor]`` under the checkpoint names vLLM loads, so what is trained
here is exactly what gets saved. Each drafter forward reproduces how vLLM 0.32 feeds it (which
hidden state, which norm, which position, what the KV cache holds), so training targets the
inference-time inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

Weights = dict[str, Tensor]


@dataclass(frozen=True)
class Dims:
    """Shapes shared by a model and the layers built on it."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    vocab_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def linear(w: Weights, name: str, x: Tensor) -> Tensor:
    """``x @ W.T (+ b)`` for the checkpoint tensor ``name.weight`` (and ``name.bias``)."""
    bias = w.get(name + ".bias")
    return F.linear(x, w[name + ".weight"], bias)


def rope(x: Tensor, positions: Tensor, theta: float) -> Tensor:
    """Neox-style rotary embedding (HF ``rotate_half``, vLLM ``is_neox_style=True``).

    ``x`` is [B, heads, T, head_dim]; ``positions`` is [T].
    """
    half = x.shape[-1] // 2
    inv_freq = 1.0 / theta ** (torch.arange(half, dtype=torch.float32) / half)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    b, t, d = x.shape
    return x.view(b, t, num_heads, d // num_heads).transpose(1, 2)


def heads(w: Weights, name: str, x: Tensor, dims: Dims, positions: Tensor | None = None) -> Tensor:
    """Project ``x`` by checkpoint tensor ``name`` into [B, heads, T, head_dim], with RoPE at
    ``positions`` if given (the Llama/MiMo q, k and v projections)."""
    y = split_heads(linear(w, name, x), dims.num_heads)
    return y if positions is None else rope(y, positions, dims.rope_theta)


def merge_heads(x: Tensor) -> Tensor:
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def mlp(w: Weights, prefix: str, x: Tensor) -> Tensor:
    gate = linear(w, prefix + "gate_proj", x)
    up = linear(w, prefix + "up_proj", x)
    return linear(w, prefix + "down_proj", F.silu(gate) * up)


def causal_mask(t: int) -> Tensor:
    return torch.ones(t, t, dtype=torch.bool).tril()


def target_forward(w: Weights, ids: Tensor, dims: Dims) -> tuple[Tensor, list[Tensor]]:
    """Llama/Qwen2 decoder (zero or no q/k/v bias): logits and the residual stream.

    The residual stream list follows vLLM's aux-layer indexing: entry 0 is the embeddings and
    entry i the output of layer i-1, before the final norm. Entry ``num_layers`` is what a MiMo
    target hands its MTP layer (MiMoModel returns the un-normed residual).
    """
    t = ids.shape[1]
    positions = torch.arange(t)
    mask = causal_mask(t)
    h = w["model.embed_tokens.weight"][ids]
    stream = [h]
    for i in range(dims.num_layers):
        p = f"model.layers.{i}."
        x = rms_norm(h, w[p + "input_layernorm.weight"], dims.rms_norm_eps)
        q = heads(w, p + "self_attn.q_proj", x, dims, positions)
        k = heads(w, p + "self_attn.k_proj", x, dims, positions)
        v = heads(w, p + "self_attn.v_proj", x, dims)
        a = merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
        h = h + linear(w, p + "self_attn.o_proj", a)
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], dims.rms_norm_eps)
        h = h + mlp(w, p + "mlp.", x)
        stream.append(h)
    logits = F.linear(rms_norm(h, w["model.norm.weight"], dims.rms_norm_eps), w["lm_head.weight"])
    return logits, stream


@torch.no_grad()
def greedy_generate(w: Weights, prompts: Tensor, dims: Dims, max_new_tokens: int) -> Tensor:
    """Greedy continuation of equal-length prompts [B, P] with a KV cache: [B, P + new]."""
    eps = dims.rms_norm_eps
    cache: list[tuple[Tensor, Tensor]] = []
    ids = prompts
    step_ids = prompts
    for _ in range(max_new_tokens):
        start = ids.shape[1] - step_ids.shape[1]
        positions = torch.arange(start, ids.shape[1])
        t = step_ids.shape[1]
        # New queries see every cached key plus the causal part of their own.
        mask = torch.cat([torch.ones(t, start, dtype=torch.bool), causal_mask(t)], dim=1)
        h = w["model.embed_tokens.weight"][step_ids]
        for i in range(dims.num_layers):
            p = f"model.layers.{i}."
            x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
            q = heads(w, p + "self_attn.q_proj", x, dims, positions)
            k = heads(w, p + "self_attn.k_proj", x, dims, positions)
            v = heads(w, p + "self_attn.v_proj", x, dims)
            if len(cache) > i:
                k = torch.cat([cache[i][0], k], 2)
                v = torch.cat([cache[i][1], v], 2)
                cache[i] = (k, v)
            else:
                cache.append((k, v))
            a = merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
            h = h + linear(w, p + "self_attn.o_proj", a)
            h = h + mlp(w, p + "mlp.", rms_norm(h, w[p + "post_attention_layernorm.weight"], eps))
        last = rms_norm(h[:, -1], w["model.norm.weight"], eps)
        step_ids = F.linear(last, w["lm_head.weight"]).argmax(-1, keepdim=True)
        ids = torch.cat([ids, step_ids], dim=1)
    return ids


def _chain_mask(t: int, step: int) -> Tensor:
    """Which keys a chain drafter's query sees at draft step ``step`` (0-based), per anchor.

    Keys are laid out step by step, ``t`` anchors each. In vLLM the first pass writes the KV of
    every context position from the target's own hidden states; step s then adds one entry per
    request at position anchor + s. So anchor a at step s sees first-pass keys at positions <= a
    and its own entries of steps 1..s, never another anchor's draft entries.
    """
    eye = torch.eye(t, dtype=torch.bool)
    return torch.cat([causal_mask(t)] + [eye] * step, dim=1)


def eagle3_chain(
    w: Weights, dims: Dims, features: Tensor, tokens: Tensor, embed: Tensor, steps: int
) -> list[Tensor]:
    """EAGLE-3 head (vLLM ``llama_eagle3``), unrolled ``steps`` draft steps (training-time test).

    ``features`` [B, T, n_aux*H]: the target's aux hidden states at anchors 0..T-1.
    ``tokens`` [B, >= T + steps]: step s at anchor a reads token ``tokens[a + s + 1]`` (the
    token after the anchor, then the previous draft) at position a + s and predicts the next.
    Returns the logits of each step, [B, T, V].
    """
    t = features.shape[1]
    eps = dims.rms_norm_eps
    h = F.linear(features, w["fc.weight"])
    keys: list[Tensor] = []
    values: list[Tensor] = []
    out: list[Tensor] = []
    p = "midlayer."
    for s in range(steps):
        positions = torch.arange(t) + s
        e = rms_norm(embed[tokens[:, s + 1 : s + 1 + t]], w[p + "input_layernorm.weight"], eps)
        x = torch.cat([e, rms_norm(h, w[p + "hidden_norm.weight"], eps)], dim=-1)
        q = heads(w, p + "self_attn.q_proj", x, dims, positions)
        keys.append(heads(w, p + "self_attn.k_proj", x, dims, positions))
        values.append(heads(w, p + "self_attn.v_proj", x, dims))
        a = F.scaled_dot_product_attention(
            q, torch.cat(keys, 2), torch.cat(values, 2), attn_mask=_chain_mask(t, s)
        )
        r = h + linear(w, p + "self_attn.o_proj", merge_heads(a))
        prenorm = r + mlp(w, p + "mlp.", rms_norm(r, w[p + "post_attention_layernorm.weight"], eps))
        out.append(F.linear(rms_norm(prenorm, w["norm.weight"], eps), w["lm_head.weight"]))
        h = prenorm  # vLLM feeds the pre-norm output back as the next step's hidden state
    return out


def mimo_mtp_chain(
    w: Weights,
    dims: Dims,
    hidden: Tensor,
    tokens: Tensor,
    embed: Tensor,
    lm_head: Tensor,
    steps: int,
) -> list[Tensor]:
    """MiMo MTP layer 0 (vLLM ``mimo_mtp``), reused for ``steps`` draft steps as vLLM does.

    ``hidden`` [B, T, H]: the target's un-normed last residual at anchors 0..T-1.
    Token indexing as in :func:`eagle3_chain`; ``lm_head`` is the target's (shared).
    """
    t = hidden.shape[1]
    eps = dims.rms_norm_eps
    p = "model.mtp_layers.0."
    h = hidden
    keys: list[Tensor] = []
    values: list[Tensor] = []
    out: list[Tensor] = []
    for s in range(steps):
        positions = torch.arange(t) + s
        e = embed[tokens[:, s + 1 : s + 1 + t]]
        e = torch.where((positions == 0)[None, :, None], torch.zeros_like(e), e)
        x = linear(
            w,
            p + "input_proj",
            torch.cat(
                [
                    rms_norm(h, w[p + "hidden_layernorm.weight"], eps),
                    rms_norm(e, w[p + "token_layernorm.weight"], eps),
                ],
                dim=-1,
            ),
        )
        y = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = heads(w, p + "self_attn.q_proj", y, dims, positions)
        keys.append(heads(w, p + "self_attn.k_proj", y, dims, positions))
        values.append(heads(w, p + "self_attn.v_proj", y, dims))
        a = F.scaled_dot_product_attention(
            q, torch.cat(keys, 2), torch.cat(values, 2), attn_mask=_chain_mask(t, s)
        )
        r = x + linear(w, p + "self_attn.o_proj", merge_heads(a))
        r = r + mlp(w, p + "mlp.", rms_norm(r, w[p + "post_attention_layernorm.weight"], eps))
        normed = rms_norm(r, w[p + "final_layernorm.weight"], eps)
        out.append(F.linear(normed, lm_head))
        h = normed  # MiMoMTP returns the final-normed state; vLLM feeds that back
    return out


def dflash_block(
    w: Weights,
    dims: Dims,
    features: Tensor,
    tokens: Tensor,
    embed: Tensor,
    lm_head: Tensor,
    block_len: int,
    mask_token_id: int,
) -> Tensor:
    """DFlash drafter (vLLM ``qwen3_dflash``) for one block per anchor, all anchors at once.

    Anchor a (0..T-1) has context = fc(aux features) at positions <= a, written to the draft's
    KV cache as K = k_norm(k_proj(hidden_norm(c))), V = v_proj(hidden_norm(c)); its query block
    is [tokens[a+1], mask, ...] at positions a+1 .. a+block_len with non-causal attention inside
    the block. Returns logits [B, T, block_len - 1] of the mask slots, which predict the tokens
    at their own positions (tokens[a+2 ..]).
    """
    b, t, _ = features.shape
    eps = dims.rms_norm_eps
    nh = dims.num_heads
    ctx = rms_norm(F.linear(features, w["fc.weight"]), w["hidden_norm.weight"], eps)
    ctx_pos = torch.arange(t)
    # Query slots in anchor-major order: (a, j) at position a + 1 + j.
    q_pos = (torch.arange(t)[:, None] + 1 + torch.arange(block_len)[None, :]).reshape(-1)
    ids = torch.full((b, t, block_len), mask_token_id, dtype=torch.long)
    ids[:, :, 0] = tokens[:, 1 : 1 + t]
    h = embed[ids.reshape(b, t * block_len)]
    anchor = torch.arange(t).repeat_interleave(block_len)
    sees_ctx = ctx_pos[None, :] <= anchor[:, None]
    sees_block = anchor[:, None] == anchor[None, :]
    mask = torch.cat([sees_ctx, sees_block], dim=1)
    for i in range(_num_layers(w, "layers.")):
        p = f"layers.{i}."
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        qkv = [split_heads(linear(w, p + f"self_attn.{n}_proj", x), nh) for n in "qkv"]
        q = rope(rms_norm(qkv[0], w[p + "self_attn.q_norm.weight"], eps), q_pos, dims.rope_theta)
        k = rope(rms_norm(qkv[1], w[p + "self_attn.k_norm.weight"], eps), q_pos, dims.rope_theta)
        ck = split_heads(linear(w, p + "self_attn.k_proj", ctx), nh)
        ck = rope(rms_norm(ck, w[p + "self_attn.k_norm.weight"], eps), ctx_pos, dims.rope_theta)
        cv = split_heads(linear(w, p + "self_attn.v_proj", ctx), nh)
        a = F.scaled_dot_product_attention(
            q, torch.cat([ck, k], 2), torch.cat([cv, qkv[2]], 2), attn_mask=mask
        )
        r = h + linear(w, p + "self_attn.o_proj", merge_heads(a))
        h = r + mlp(w, p + "mlp.", rms_norm(r, w[p + "post_attention_layernorm.weight"], eps))
    logits = F.linear(rms_norm(h, w["norm.weight"], eps), lm_head)
    return logits.view(b, t, block_len, -1)[:, :, 1:]


def _num_layers(w: Weights, prefix: str) -> int:
    return len({k[len(prefix) :].split(".")[0] for k in w if k.startswith(prefix)})
