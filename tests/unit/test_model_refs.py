"""Model references through the engine's registry: product code never imports autotune.testing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from autotune.engine.models import register_model_refs, resolve_model

REPO = Path(__file__).resolve().parents[2]


def test_registered_prefix_resolves_and_others_pass_through():
    register_model_refs("mine:", lambda ref: f"/models/{ref[5:]}")
    assert resolve_model("mine:a") == "/models/a"
    assert resolve_model("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"
    assert resolve_model("/abs/path") == "/abs/path"
    assert resolve_model("other:thing") == "other:thing"  # nobody claims it: unchanged


def test_tiny_refs_resolve_in_a_process_that_never_imported_testing():
    """What a Ray actor does: the engine resolves tiny:NAME without naming autotune.testing."""
    code = (
        "import sys\n"
        "from autotune.engine.vllm import resolve_ref\n"
        "print(resolve_ref('tiny:llama'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert Path(out.stdout.strip(), "config.json").is_file()


def test_no_product_module_imports_the_testing_package():
    offenders = [
        str(p.relative_to(REPO))
        for p in (REPO / "autotune").rglob("*.py")
        if "testing" not in p.parts
        and any(
            line.strip().startswith(("from autotune.testing", "import autotune.testing"))
            for line in p.read_text().splitlines()
        )
    ]
    assert offenders == []
