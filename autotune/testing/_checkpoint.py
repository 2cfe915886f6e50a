"""The checkpoint files of the locally built models (weights, tokenizer, config, the build
report) and :func:`run_build`, the child-process entry both recipe modules
(:mod:`autotune.testing._tiny_build`, :mod:`autotune.testing._smollm2_build`) run.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from autotune.testing._tiny_nets import Dims, Weights


def save_weights(w: Weights, path: Path) -> None:
    tensors = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in sorted(w.items())}
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})


def load_weights(path: Path) -> Weights:
    """A checkpoint's weights as float32 (values exactly the bf16 ones vLLM serves)."""
    return {k: v.to(torch.float32) for k, v in load_file(str(path / "model.safetensors")).items()}


def copy_tokenizer(src: Path, dst: Path) -> None:
    for f in sorted(src.iterdir()):
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            shutil.copy2(f, dst / f.name)


def write_json(path: Path, obj: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def llama_config(dims: Dims, num_layers: int) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": dims.vocab_size,
        "hidden_size": dims.hidden_size,
        "intermediate_size": dims.intermediate_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": dims.num_heads,
        "num_key_value_heads": dims.num_heads,
        "head_dim": dims.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": dims.rms_norm_eps,
        "rope_theta": dims.rope_theta,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "torch_dtype": "bfloat16",
    }


def run_build(
    argv: list[str],
    builders: Mapping[str, Callable[[Path, Mapping[str, Path]], dict[str, Any]]],
    recipe: Mapping[str, Any],
    *,
    warn_only: bool = False,
) -> None:
    """``NAME OUT [DEP=PATH ...]``: build NAME into OUT with ``builders`` (deterministic kernels:
    an error, or with ``warn_only`` a warning, where a CPU kernel has none) and write the report
    :func:`autotune.testing.tiny.build` folds into the model's info file."""
    from autotune.testing.tiny import REPORT_FILE

    name, out, *dep_args = argv
    deps = {dep: Path(path) for dep, path in (a.split("=", 1) for a in dep_args)}
    torch.manual_seed(0)  # every draw is seeded explicitly; this only guards stray ones
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    start = time.perf_counter()
    metrics = builders[name](Path(out), deps)
    report = {
        "build_s": round(time.perf_counter() - start, 2),
        "recipe": dataclasses.asdict(recipe[name]),
        "metrics": metrics,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
    }
    write_json(Path(out) / REPORT_FILE, report)
