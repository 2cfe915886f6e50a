"""The package's layers, read from the source: no import circles between files, each heavy
dependency imported in its home only, no pair of subpackages that import each other, and spec/
at the bottom (pydantic, yaml and the standard library only).

Every import counts: module level, inside functions, and ``importlib.import_module("...")`` with
a literal name (a lazy import is still a dependency of the layer that makes it).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "autotune"

HOMES = {
    "vllm": {"engine"},
    "ray": {"cluster"},
    "sqlalchemy": {"store"},
    "pandas": {"report"},
    "matplotlib": {"report"},
    "plotly": {"report"},
    # Optuna's home is search/; the store creates its schema.
    "optuna": {"search", "store"},
}

KNOWN_PAIRS: set[tuple[str, str]] = set()
"""Pairs of subpackages allowed to import each other: none (the last, engine and spec, went in
issue #19: resolution is given the engine's facts, autotune.spec.engine_facts)."""

SPEC_MAY_IMPORT = {"pydantic", "yaml", "annotated_types"}
"""Third-party packages spec/ may import (annotated_types comes with pydantic)."""


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> tuple[set[str], set[str]]:
    """(autotune modules, top-level third-party packages) that ``name`` imports."""
    inner: set[str] = set()
    outer: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".")
                if path.name != "__init__.py":
                    pkg = pkg[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join([*pkg, base] if base else pkg)
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            targets = [node.args[0].value]
        for target in targets:
            if target.split(".")[0] != "autotune":
                outer.add(target.split(".")[0])
                continue
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                inner.add(target)
    return inner, outer


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    modules = _modules()
    graph, third = {}, {}
    for name, path in modules.items():
        graph[name], third[name] = _imports(name, path, modules)
    return graph, third


def _subpackage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "(root)"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_file_level_import_circles():
    graph, _ = _graph()
    assert _cycles(graph) == []


def test_each_heavy_dependency_is_imported_in_its_home_only():
    _, third = _graph()
    users: dict[str, set[str]] = defaultdict(set)
    for module, packages in third.items():
        for package in packages & HOMES.keys():
            users[package].add(_subpackage(module))
    for package, home in HOMES.items():
        assert users[package] <= home, (package, sorted(users[package] - home))
    assert users["vllm"] == {"engine"}  # and vLLM is really used there


def test_no_new_pair_of_subpackages_imports_each_other():
    graph, _ = _graph()
    edges = {
        (_subpackage(a), _subpackage(b))
        for a, targets in graph.items()
        for b in targets
        if _subpackage(a) != _subpackage(b)
    }
    pairs = {tuple(sorted(e)) for e in edges if (e[1], e[0]) in edges}
    assert pairs <= KNOWN_PAIRS, sorted(pairs - KNOWN_PAIRS)
    assert len(pairs) == 0


def test_spec_is_the_bottom_layer():
    """spec/ imports only itself and autotune.errors, and no third-party package besides
    pydantic and yaml: reading a study file costs no engine, cluster or store import."""
    graph, third = _graph()
    spec = [m for m in graph if _subpackage(m) == "spec"]
    assert spec
    for module in spec:
        inner = {t for t in graph[module] if _subpackage(t) != "spec"}
        assert inner <= {"autotune.errors"}, (module, sorted(inner))
        outer = third[module] - set(sys.stdlib_module_names)
        assert outer <= SPEC_MAY_IMPORT, (module, sorted(outer))


def test_the_checker_sees_lazy_and_importlib_imports(tmp_path: Path):
    # A checker that misses these would pass a circle it cannot see.
    modules = {"autotune.a": tmp_path / "a.py", "autotune.b": tmp_path / "b.py"}
    modules["autotune.a"].write_text(
        "import importlib\n\ndef f():\n    from autotune import b\n"
        "    importlib.import_module('autotune.b')\n    import vllm\n"
    )
    inner, outer = _imports("autotune.a", modules["autotune.a"], modules)
    assert inner == {"autotune.b"} and "vllm" in outer
    assert _cycles({"x": {"y"}, "y": {"x"}}) == [["x", "y"]]
