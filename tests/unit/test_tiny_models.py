"""autotune.engine.tiny: the locally built tiny models (built once per session into a tmp dir).

Building all of them takes a minute or two on 2 cores; no vLLM engine is started here (that is
tests/integration/test_tiny_models_vllm.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from autotune.engine.tiny import (
    INFO_FILE,
    NEEDS,
    REAL_NAMES,
    TINY_NAMES,
    build,
    build_info,
    is_tiny,
    resolve,
    source_digest,
    weights_digest,
)
from autotune.errors import NotFoundError

if TYPE_CHECKING:  # torch is imported inside the tests that need it
    import torch

    from autotune.testing._tiny_nets import Dims, Weights


@pytest.fixture(scope="module")
def tiny_dir() -> Path:
    # The default cache, so the integration tests and the demo reuse these builds (CI builds
    # them once per machine).
    from autotune.engine.tiny import default_cache_dir

    root = default_cache_dir()
    for name in TINY_NAMES:
        build(name, root)
    return root


def _config(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())


def test_names_and_refs() -> None:
    from autotune.testing._smollm2_build import BUILDERS as REAL_BUILDERS
    from autotune.testing._tiny_build import BUILDERS

    assert set(TINY_NAMES) == set(BUILDERS)
    assert set(REAL_NAMES) == set(REAL_BUILDERS)
    assert set(NEEDS) == set(TINY_NAMES) | set(REAL_NAMES)
    assert is_tiny("tiny:smollm2-135m")
    assert is_tiny("tiny:llama") and not is_tiny("meta-llama/Llama-3.1-8B")
    assert resolve("meta-llama/Llama-3.1-8B") == "meta-llama/Llama-3.1-8B"
    assert resolve("/some/local/path") == "/some/local/path"
    with pytest.raises(NotFoundError, match="unknown tiny model 'nope'"):
        resolve("tiny:nope")


def test_import_is_light() -> None:
    code = (
        "import sys, autotune.testing; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_tokenizer_is_deterministic(tmp_path: Path) -> None:
    from autotune.testing._tiny_build import build_tokenizer

    build_tokenizer(tmp_path / "a")
    build_tokenizer(tmp_path / "b")
    a, b = (tmp_path / d / "tokenizer.json" for d in "ab")
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize("name", ["chat", "code", "mtbench"])
def test_the_token_counter_counts_as_the_transformers_tokenizer(name: str) -> None:
    """`workload show` counts with the `tokenizers` library alone; the ids are the ones the
    tiny model's `transformers` tokenizer gives, special tokens included."""
    from autotune.datasets import prepare
    from autotune.engine import default_token_counter, default_tokenizer
    from autotune.spec.loader import load_workload

    spec, path = load_workload(name)
    texts = [p.text for p in prepare(spec, Path(path).parent).prompts][:40]
    counter, hf = default_token_counter(), default_tokenizer()
    assert texts and all(counter.encode(t) == hf.encode(t) for t in texts)
    assert counter.encode("hello") == hf("hello")["input_ids"]


def _random_target(gen: torch.Generator, dims: Dims) -> Weights:
    """A random 2-layer Llama of ``dims`` (hidden 32, vocab 64) in checkpoint tensor names."""
    import torch

    from autotune.testing import _tiny_build as tb

    w = {
        "model.embed_tokens.weight": torch.randn(64, 32, generator=gen),
        "model.norm.weight": torch.ones(32),
        "lm_head.weight": torch.randn(64, 32, generator=gen),
    }
    for n in range(2):
        w.update(tb._decoder_layer(gen, f"model.layers.{n}.", dims, 32))
    return w


@pytest.mark.models
def test_training_is_deterministic() -> None:
    """A few seeded steps twice give bit-identical weights (deterministic kernels on)."""
    import torch

    from autotune.testing import _tiny_build as tb
    from autotune.testing._tiny_nets import Dims, target_forward

    dims = Dims(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, vocab_size=64)
    stream = torch.randint(0, 64, (4096,), generator=torch.Generator().manual_seed(0))
    stage = tb.Stage(steps=3, batch=4, lr=1e-3, seed=1, seq_len=16)
    digests = []
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        for _ in range(2):
            gen = torch.Generator().manual_seed(0)
            w = _random_target(gen, dims)

            def loss(batch: torch.Tensor, w: dict = w) -> torch.Tensor:
                logits, _ = target_forward(w, batch[:, :-1], dims)
                return torch.nn.functional.cross_entropy(
                    logits.reshape(-1, 64), batch[:, 1:].reshape(-1)
                )

            tb.train(w, loss, tb.windows(stream, 17, 4, seed=1), stage)
            digests.append(b"".join(w[k].numpy().tobytes() for k in sorted(w)))
    finally:
        torch.use_deterministic_algorithms(previous)
    assert digests[0] == digests[1]


@pytest.mark.models
def test_kv_cached_generation_matches_full_forward() -> None:
    import torch

    from autotune.testing._tiny_nets import Dims, greedy_generate, target_forward

    dims = Dims(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, vocab_size=64)
    gen = torch.Generator().manual_seed(0)
    w = _random_target(gen, dims)
    prompts = torch.randint(0, 64, (3, 5), generator=gen)
    out = greedy_generate(w, prompts, dims, max_new_tokens=6)
    logits, _ = target_forward(w, out[:, :-1], dims)
    assert torch.equal(logits.argmax(-1)[:, 4:], out[:, 5:])


def test_files_and_build_info(tiny_dir: Path) -> None:
    for name in TINY_NAMES:
        path = tiny_dir / name
        assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
        info = build_info(path)
        assert info["name"] == name
        assert info["source_digest"] == source_digest()
        assert info["weights_sha256"] == weights_digest(path)
        assert set(info["needs"]) == set(NEEDS[name])
    for name in ("llama", "draft", "mtp"):  # the models vLLM loads a tokenizer from
        files = {f.name for f in (tiny_dir / name).iterdir()}
        assert {"tokenizer.json", "tokenizer_config.json"} <= files
    # (Leftover ".NAME-*" temp dirs are not checked here: the cache is shared, and a build
    # killed mid-way, e.g. by the kill/resume test, may leave one; it is never renamed in.)


def test_configs(tiny_dir: Path) -> None:
    llama, draft = _config(tiny_dir / "llama"), _config(tiny_dir / "draft")
    assert llama["architectures"] == ["LlamaForCausalLM"]
    assert (llama["num_hidden_layers"], llama["hidden_size"], llama["vocab_size"]) == (4, 256, 1024)
    assert draft["architectures"] == ["LlamaForCausalLM"]
    assert draft["num_hidden_layers"] < llama["num_hidden_layers"]

    eagle3 = _config(tiny_dir / "eagle3")
    assert eagle3["architectures"] == ["LlamaForCausalLMEagle3"]
    aux = eagle3["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert all(0 < i <= llama["num_hidden_layers"] for i in aux)

    dflash = _config(tiny_dir / "dflash")
    assert dflash["architectures"] == ["DFlashDraftModel"]
    assert dflash["block_size"] == 4 and dflash["num_target_layers"] == 4

    mtp = _config(tiny_dir / "mtp")
    assert mtp["architectures"] == ["MiMoForCausalLM"] and mtp["model_type"] == "qwen2"
    assert mtp["num_nextn_predict_layers"] == 1


def test_vocabulary_is_shared(tiny_dir: Path) -> None:
    from transformers import AutoTokenizer

    ref = (tiny_dir / "llama" / "tokenizer.json").read_bytes()
    for name in ("draft", "mtp"):
        assert (tiny_dir / name / "tokenizer.json").read_bytes() == ref
    for name in TINY_NAMES:
        assert _config(tiny_dir / name)["vocab_size"] == 1024
    tok = AutoTokenizer.from_pretrained(str(tiny_dir / "llama"))
    assert len(tok) == 1024
    mask_id = _config(tiny_dir / "dflash")["dflash_config"]["mask_token_id"]
    assert tok.convert_ids_to_tokens(mask_id) == "<|mask|>"
    text = tok.apply_chat_template(
        [{"role": "user", "content": "def f(x):"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<s><|user|>\ndef f(x):<|end|>\n<|assistant|>\n"


def test_weight_shapes(tiny_dir: Path) -> None:
    from safetensors import safe_open

    def shapes(name: str) -> dict[str, list[int]]:
        with safe_open(str(tiny_dir / name / "model.safetensors"), "pt") as f:
            return {k: list(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118

    eagle3 = shapes("eagle3")
    assert eagle3["fc.weight"] == [256, 3 * 256]
    assert eagle3["midlayer.self_attn.q_proj.weight"] == [256, 2 * 256]
    assert "embed_tokens.weight" not in eagle3  # shared with the target by vLLM
    dflash = shapes("dflash")
    assert dflash["fc.weight"] == [256, 3 * 256]
    assert "lm_head.weight" not in dflash and "embed_tokens.weight" not in dflash
    mtp = shapes("mtp")
    assert mtp["model.mtp_layers.0.input_proj.weight"] == [256, 2 * 256]
    assert mtp["model.layers.0.self_attn.q_proj.bias"] == [256]
    llama = shapes("llama")
    assert all(mtp[k] == v for k, v in llama.items())  # the same body under the MiMo target


def test_simulated_acceptance_is_in_between(tiny_dir: Path) -> None:
    """Each drafter accepts some tokens, never all, and fewer at later positions."""
    for name in ("draft", "eagle3", "dflash", "mtp"):
        per_pos = build_info(tiny_dir / name)["metrics"]["simulated_acceptance_per_pos"]
        assert len(per_pos) == 3
        assert all(0.0 < a < 1.0 for a in per_pos), (name, per_pos)
        assert per_pos == sorted(per_pos, reverse=True), (name, per_pos)


def test_cached_and_resolved(tiny_dir: Path) -> None:
    before = {n: (tiny_dir / n / INFO_FILE).stat().st_mtime_ns for n in TINY_NAMES}
    assert resolve("tiny:eagle3", tiny_dir) == str(tiny_dir / "eagle3")
    assert build("mtp", tiny_dir) == tiny_dir / "mtp"
    after = {n: (tiny_dir / n / INFO_FILE).stat().st_mtime_ns for n in TINY_NAMES}
    assert before == after  # nothing rebuilt


def test_default_cache_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from autotune.engine.tiny import BUILD_VERSION, default_cache_dir

    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "tiny" / BUILD_VERSION


def test_concurrent_builds_build_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Racing builders: one builds under the lock, the others wait and reuse its result."""
    import threading
    import time

    from autotune.engine import tiny

    calls: list[str] = []

    def fake_run_build(name: str, out: Path, deps: dict[str, Path]) -> dict:
        calls.append(name)
        time.sleep(0.2)  # long enough for the other threads to reach the lock
        (out / "model.safetensors").write_bytes(name.encode())
        return {"metrics": {}}

    monkeypatch.setattr(tiny, "_run_build", fake_run_build)
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(build("draft", tmp_path))) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == ["llama", "draft"]
    assert results == [tmp_path / "draft"] * 3
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [
        "draft",
        "llama",
    ]


def test_stale_build_is_rebuilt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A build made by other recipe code, or from another build of its dependency, is redone."""
    from autotune.engine import tiny

    def fake_run_build(name: str, out: Path, deps: dict[str, Path]) -> dict:
        (out / "model.safetensors").write_bytes(f"{name}-{len(calls)}".encode())
        calls.append(name)
        return {"metrics": {}}

    calls: list[str] = []
    monkeypatch.setattr(tiny, "_run_build", fake_run_build)
    build("draft", tmp_path)
    info = build_info(tmp_path / "llama")
    info["source_digest"] = "other-code"
    (tmp_path / "llama" / INFO_FILE).write_text(json.dumps(info))
    build("draft", tmp_path)
    assert calls == ["llama", "draft", "llama", "draft"]  # new llama weights: draft redone too
    assert build_info(tmp_path / "draft")["needs"] == {"llama": weights_digest(tmp_path / "llama")}


def test_the_real_models_recipe_keys_its_own_builds_only() -> None:
    """Changing the SmolLM2 recipe rebuilds the SmolLM2 models, never the tiny ones (their
    digest reads only the tiny recipes), and a change of the tiny trainer it imports rebuilds
    both."""
    from autotune.engine import tiny

    assert source_digest("llama") == source_digest()
    assert source_digest("smollm2-135m") == source_digest("smollm2-135m-draft")
    assert source_digest("smollm2-135m") != source_digest("llama")
    assert "_smollm2_build.py" not in tiny._SOURCES
    assert set(tiny._SOURCES) < set(tiny._REAL_SOURCES)
    assert tiny.recipe_module("smollm2-135m").endswith("_smollm2_build")
    assert tiny.recipe_module("llama").endswith("_tiny_build")
