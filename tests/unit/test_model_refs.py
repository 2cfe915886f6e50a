"""Model references (autotune.engine.models): the engine resolves tiny:NAME itself and never
imports autotune.testing (which imports the engine, not the reverse)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from autotune.engine.models import resolve_model

REPO = Path(__file__).resolve().parents[2]


def test_other_refs_pass_through():
    assert resolve_model("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"
    assert resolve_model("/abs/path") == "/abs/path"
    assert resolve_model("other:thing") == "other:thing"  # not the engine's: unchanged


def test_tiny_refs_resolve_in_a_process_that_never_imported_testing():
    """What a Ray actor does: the engine resolves tiny:NAME without importing autotune.testing
    (the recipes run in a child process of their own)."""
    code = (
        "import sys\n"
        "from autotune.engine.vllm.args import resolve_ref\n"
        "print(resolve_ref('tiny:llama'))\n"
        "print('autotune.testing' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    path, imported = out.stdout.split()
    assert Path(path, "config.json").is_file()
    assert imported == "False"


def _imported_modules(tree: ast.AST) -> list[str]:
    """Every module a file imports, at any depth, including ``importlib.import_module("...")``."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.append(str(node.args[0].value))
    return names


def test_no_product_module_imports_the_testing_package():
    offenders = [
        str(p.relative_to(REPO))
        for p in (REPO / "autotune").rglob("*.py")
        if "testing" not in p.parts
        and any(
            m == "autotune.testing" or m.startswith("autotune.testing.")
            for m in _imported_modules(ast.parse(p.read_text()))
        )
    ]
    assert offenders == []


def test_the_check_sees_function_level_and_importlib_imports():
    """The check above cannot pass by missing the ways the code used to import the package."""
    code = (
        "def f():\n"
        "    import importlib\n"
        "    importlib.import_module('autotune.testing')\n"
        "    from autotune.testing.tiny import build\n"
    )
    assert sorted(_imported_modules(ast.parse(code))) == [
        "autotune.testing",
        "autotune.testing.tiny",
        "importlib",
    ]
