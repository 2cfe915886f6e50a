"""The package's layers, read from the source: no import circles between files, each heavy
dependency imported in its home only, no pair of subpackages that import each other, and spec/
at the bottom (pydantic, yaml and the standard library only), evidence/ under every layer that
reads it, and the statistics read from evidence/, never from recommend/.

Every import counts: module level, inside functions, and ``importlib.import_module("...")`` with
a literal name (a lazy import is still a dependency of the layer that makes it).
"""

from __future__ import annotations

import ast
import functools
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

VLLM_HOMES_IN_ENGINE = ("autotune.engine.vllm", "autotune.engine.server")
"""Inside engine/, the subpackages that import vLLM: the backend and the server path. Besides
them only the reader of vLLM's own sweep output (``readers.vllm_sweep``, which loads it with
vLLM's plot code) does; the Engine interface, the generic measurement pieces, ``replay`` and the
other readers never do."""

VLLM_READERS = {"autotune.engine.readers.vllm_sweep"}

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


def _walk(tree: ast.AST, runtime_only: bool = False) -> list[ast.AST]:
    """Every node of ``tree``; with ``runtime_only``, not those under ``if TYPE_CHECKING:``
    (imports for annotations only, never executed)."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if runtime_only and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A source file's syntax tree, parsed once per test process (every test here walks the
    same ~170 files)."""
    return ast.parse(path.read_text())


def _from_base(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` in module ``name`` (file ``path``) reads."""
    base = node.module or ""
    if node.level:
        pkg = name.split(".")
        if path.name != "__init__.py":
            pkg = pkg[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join([*pkg, base] if base else pkg)
    return base


def _imports(
    name: str, path: Path, modules: dict[str, Path], runtime_only: bool = False
) -> tuple[set[str], set[str]]:
    """(autotune modules, top-level third-party packages) that ``name`` imports (with
    ``runtime_only``: leaving out imports under ``if TYPE_CHECKING:``)."""
    inner: set[str] = set()
    outer: set[str] = set()
    for node in _walk(_tree(path), runtime_only):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(name, path, node)
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
            # `from package import module` runs the package's __init__ first and reads the
            # module from it: a dependency on the package as well as on the module.
            if base not in targets:
                targets.append(base)
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


def test_inside_the_engine_vllm_is_imported_by_the_vllm_backend_and_the_server_path_only():
    _, third = _graph()
    users = {module for module, packages in third.items() if "vllm" in packages}
    outside = {
        m
        for m in users
        if not any(m == home or m.startswith(home + ".") for home in VLLM_HOMES_IN_ENGINE)
    }
    assert outside == VLLM_READERS, sorted(outside ^ VLLM_READERS)
    for home in VLLM_HOMES_IN_ENGINE:  # and each home really uses it
        assert any(m.startswith(home + ".") for m in users), home


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
    # `from package import module` inside the package: a circle through the package's
    # __init__ (which imports the importing module), not only an edge to the sibling.
    (tmp_path / "p").mkdir()
    package = {
        "autotune.p": tmp_path / "p" / "__init__.py",
        "autotune.p.m": tmp_path / "p" / "m.py",
        "autotune.p.n": tmp_path / "p" / "n.py",
    }
    package["autotune.p"].write_text("from autotune.p.m import X\n")
    package["autotune.p.m"].write_text("from autotune.p import n\nX = n\n")
    package["autotune.p.n"].write_text("")
    graph = {name: _imports(name, path, package)[0] for name, path in package.items()}
    assert graph["autotune.p.m"] == {"autotune.p", "autotune.p.n"}
    assert _cycles(graph) == [["autotune.p", "autotune.p.m"]]


EVIDENCE_MAY_IMPORT = {
    "autotune.evidence",
    "autotune.spec",
    "autotune.perf",
    "autotune.errors",
    # Two pure-Python facts of the engine, imported where used: the loop guard's limit
    # (ConfigScore.degenerate) and per-request latencies from timings (request_goodput).
    "autotune.engine.degeneracy",
    "autotune.engine.stats",
}
"""What evidence/ may import when it runs: the layers below the ones that read it."""

EVIDENCE_MAY_ANNOTATE = {"autotune.store.records", "autotune.engine._base"}
"""What evidence/ may import for annotations only (under ``if TYPE_CHECKING:``): the records
it reads."""

EVIDENCE_THIRD_PARTY = {"scipy"}
"""Third-party packages evidence/ may import: scipy's t quantile (the median's interval)."""


def _within(module: str, allowed: set[str]) -> bool:
    return any(module == a or module.startswith(f"{a}.") for a in allowed)


def _evidence_violations(
    modules: dict[str, Path],
) -> list[tuple[str, str]]:
    """(evidence module, what it may not import) pairs."""
    bad: list[tuple[str, str]] = []
    for name, path in sorted(modules.items()):
        if not _within(name, {"autotune.evidence"}):
            continue
        runtime, third = _imports(name, path, modules, runtime_only=True)
        every, _ = _imports(name, path, modules)
        bad += [(name, t) for t in sorted(runtime) if not _within(t, EVIDENCE_MAY_IMPORT)]
        annotated = every - runtime
        allowed = EVIDENCE_MAY_IMPORT | EVIDENCE_MAY_ANNOTATE
        bad += [(name, t) for t in sorted(annotated) if not _within(t, allowed)]
        outer = third - set(sys.stdlib_module_names) - EVIDENCE_THIRD_PARTY
        bad += [(name, t) for t in sorted(outer)]
    return bad


def test_evidence_imports_no_layer_that_reads_it():
    """evidence/ (scores, cells, objectives, model points) imports the standard library, spec,
    perf and errors, never recommend, search, report, store or any other layer above it: search,
    recommend and report all read it, so it cannot read them."""
    modules = _modules()
    assert {"autotune.evidence.scores", "autotune.evidence.cells"} <= modules.keys()
    assert _evidence_violations(modules) == []


def test_the_evidence_check_fails_on_an_upper_layer(tmp_path: Path):
    # The check must see a lazy import of an upper layer and a runtime store import, and let an
    # annotation-only store record through.
    modules = _modules()
    fake = tmp_path / "fake.py"
    fake.write_text(
        "from typing import TYPE_CHECKING\n"
        "from autotune.spec.labels import PLAIN\n"
        "if TYPE_CHECKING:\n    from autotune.store.records import MeasurementRecord\n"
        "def f():\n    from autotune.recommend.choose import choose\n"
        "    from autotune.store import Store\n"
    )
    bad = _evidence_violations({**modules, "autotune.evidence.fake": fake})
    assert bad == [
        ("autotune.evidence.fake", "autotune.recommend.choose"),
        ("autotune.evidence.fake", "autotune.store"),
    ]


OUTER_LAYERS = ("search", "report", "observe", "export", "verify", "bench")
"""Subpackages that read recommend/ for its answers only (statistics come from evidence/)."""

ANSWERING = {
    "autotune.recommend": {"check"},  # the module: `from autotune.recommend import check`
    "autotune.recommend.choose": {"Choice", "choose", "choose_overall", "screen"},
    "autotune.recommend.slo": {
        "NoConfigMeetsSLO",
        "answers_by_goodput",
        "choose_goodput",
        "choose_level",
        "choose_overall_slo",
        "choose_slo",
        "pareto_front",
        "trade_off_rows",
    },
    "autotune.recommend.answer": {"recommend"},
    # which study answers, and how much of it was measured (a partial study's coverage note)
    "autotune.recommend.studies": {"FINISHED", "coverage"},
    # the one answer every surface renders (issue #31)
    "autotune.recommend.answer_value": {"Answer", "from_rows"},
    "autotune.recommend.check": {"label"},
    "autotune.recommend.render": {"dsd_config", "ranges", "serve_args"},
    "autotune.recommend.deployed": {"deployed_label"},
    # reading and comparing a --speculative-config the user deploys (verify --table reads one)
    "autotune.recommend.normalize": {
        "differences",
        "key",
        "normalize",
        "parse_config_text",
        "read_config_arg",
    },
    # check --measure's judging and its history lines
    "autotune.recommend.measured": {
        "DEFAULT_ACCEPTANCE_TOLERANCE",
        "MODE",
        "MeasuredCheck",
        "compare_acceptance",
        "history_line",
        "pooled",
    },
    "autotune.recommend.speedup_gate": {
        "DEFAULT_SPEEDUP_TOLERANCE_PCT",
        "LevelSpeedup",
        "SpeedupCheck",
        "paired_level",
        "speedup_band",
        "speedups",
    },
}
"""The names outside recommend/ (but api.py and cli/) may import from it: answering, checking
and rendering."""

BENCH_SCRIPTS = Path(__file__).resolve().parents[2] / "bench"


def _recommend_names(name: str, path: Path) -> set[tuple[str, str]]:
    """(recommend module, name) for every name module ``name`` imports from recommend/;
    ``(module, "*")`` for ``import autotune.recommend.x``."""
    out: set[tuple[str, str]] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            out |= {(a.name, "*") for a in node.names if _within(a.name, {"autotune.recommend"})}
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(name, path, node)
            if _within(base, {"autotune.recommend"}):
                out |= {(base, a.name) for a in node.names}
    return out


def _statistics_from_recommend(files: dict[str, Path]) -> list[tuple[str, str, str]]:
    return sorted(
        (name, module, imported)
        for name, path in files.items()
        for module, imported in _recommend_names(name, path)
        if imported not in ANSWERING.get(module, set())
    )


def _outer_files() -> dict[str, Path]:
    files = {n: p for n, p in _modules().items() if _subpackage(n) in OUTER_LAYERS}
    files |= {f"bench.{p.stem}": p for p in BENCH_SCRIPTS.glob("*.py")}
    return files


def test_outer_layers_import_only_answers_from_recommend():
    """search/, report/, observe/, export/, verify/ and bench/ (and the bench scripts) read
    scores, intervals, cells, drift and goodput from evidence/: from recommend/ they import
    only what answers (ANSWERING)."""
    files = _outer_files()
    assert {_subpackage(n) for n in files} >= set(OUTER_LAYERS)
    assert _statistics_from_recommend(files) == []
    # No evidence name is on the list: what the evidence layer defines is never an answer.
    evidence = {n: p for n, p in _modules().items() if _within(n, {"autotune.evidence"})}
    defined = {name for path in evidence.values() for name in _defined(path)}
    assert {"ConfigScore", "score", "latest_digest", "measurement_goodput", "MAD_SCALE"} <= defined
    assert defined.isdisjoint(set().union(*ANSWERING.values()))


def _defined(path: Path) -> set[str]:
    """The names a module defines at its top level (functions, classes, constants)."""
    out: set[str] = set()
    for node in _tree(path).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def test_the_recommend_check_fails_on_a_statistics_name(tmp_path: Path):
    fake = tmp_path / "fake.py"
    fake.write_text(
        "from autotune.recommend.choose import choose\n"
        "def f():\n    from autotune.recommend.choose import ConfigScore\n"
        "    from autotune.recommend import choose as c\n"
    )
    assert _statistics_from_recommend({"autotune.search.fake": fake}) == [
        ("autotune.search.fake", "autotune.recommend", "choose"),
        ("autotune.search.fake", "autotune.recommend.choose", "ConfigScore"),
    ]
