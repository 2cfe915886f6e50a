"""The tiny models on the real vLLM (CPU) engine: every drafter accepts some tokens, never all.

One engine per method (the unavoidable cost: a speculative config is fixed per engine), each in
its own process so engines never share state. The models come from the default tiny cache, so
`make demo` and later runs reuse them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.testing import TINY_NAMES, build

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed"),
]

NUM_SPECULATIVE_TOKENS = 2

ENGINE_SCRIPT = """
import json, sys

PROMPTS = [
    "Write a Python function that returns the sum of a list.",
    "def parse_args(argv):",
    "Explain how a hash table works.",
    "class Stack:\\n    def push(self, item):",
    "Write a function to read a CSV file and return the rows as dicts.",
    "What does the functools.lru_cache decorator do?",
    "import json\\n\\ndef load(path):",
    "Implement binary search in Python.",
]
COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_accepted_tokens")
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"

if __name__ == "__main__":
    from vllm import LLM, SamplingParams

    model, spec = sys.argv[1], json.loads(sys.argv[2])
    llm = LLM(model=model, speculative_config=spec, enforce_eager=True, dtype="bfloat16",
              gpu_memory_utilization=0.3, max_model_len=1024, disable_log_stats=False, seed=0)
    params = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    llm.chat([[{"role": "user", "content": p}] for p in PROMPTS], params, use_tqdm=False)
    out = {"per_pos": []}
    for m in llm.get_metrics():
        if m.name in COUNTERS:
            out[m.name.split(":")[1]] = m.value
        elif m.name == PER_POS:
            out["per_pos"] = list(m.values)
    print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="session")
def tiny_models() -> dict[str, Path]:
    return {name: build(name) for name in TINY_NAMES}


def _cases() -> list[tuple[str, str, str | None]]:
    """(method, target, draft) per speculative method the CPU build runs."""
    return [
        ("draft_model", "llama", "draft"),
        ("eagle3", "llama", "eagle3"),
        ("dflash", "llama", "dflash"),
        ("mtp", "mtp", None),
    ]


@pytest.mark.parametrize(("method", "target", "draft"), _cases(), ids=[c[0] for c in _cases()])
def test_acceptance_is_in_between(
    tiny_models: dict[str, Path], tmp_path: Path, method: str, target: str, draft: str | None
) -> None:
    spec: dict[str, object] = {"method": method, "num_speculative_tokens": NUM_SPECULATIVE_TOKENS}
    if draft is not None:
        spec["model"] = str(tiny_models[draft])
    script = tmp_path / "engine.py"
    script.write_text(ENGINE_SCRIPT)
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        # One process per engine: starts in seconds instead of ~15 s with separate workers.
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    }
    proc = subprocess.run(
        [sys.executable, str(script), str(tiny_models[target]), json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    drafts, accepted = result["spec_decode_num_drafts"], result["spec_decode_num_accepted_tokens"]
    per_pos = result["per_pos"]
    assert drafts > 0
    assert len(per_pos) == NUM_SPECULATIVE_TOKENS and sum(per_pos) == accepted
    # Acceptance strictly between 0 and 1, and every draft position accepts something.
    assert 0 < accepted < drafts * NUM_SPECULATIVE_TOKENS, result
    assert all(n > 0 for n in per_pos), result
