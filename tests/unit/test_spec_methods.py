"""The one method table (autotune/spec/methods.py): no list of method names anywhere else in the
package, every set of methods derived from ``METHODS``, every behaviour read from a rule's fields,
so that a new method is one ``MethodRule`` (plus its own knobs in spec/knobs.py)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import get_args

import pytest

from autotune.spec import methods
from autotune.spec.knobs import KNOBS, knob_table
from autotune.spec.methods import (
    ALL_DRAFTING,
    METHODS,
    MODEL_DRAFTERS,
    Method,
    MethodRule,
    RuleContext,
    check,
    max_n,
    method_set,
    min_n,
    model_drafters,
)

PACKAGE = Path(__file__).resolve().parents[2] / "autotune"

ALLOWED = {
    (
        "engine/tiny.py",
        "('llama', 'draft', 'eagle3', 'dflash', 'mtp')",
    ): "the tiny checkpoints autotune trains, named by the drafter they are, not a method set",
    (
        "export/speculators.py",
        "('eagle3', 'dflash')",
    ): "the two drafters vLLM Speculators trains (its --speculator-type values)",
    (
        "recommend/normalize.py",
        "out.get('method') in ('ngram', 'ngram_gpu')",
    ): "vLLM's two spellings of n-gram's method name, read back to one",
}
"""Literals of method names that are not a set of methods autotune tunes, each with why."""


def method_name_literals(source: str) -> list[str]:
    """The set/tuple/list literals in ``source`` holding two or more method names, and the
    ``in``/``not in`` tests against a literal holding one, as source text."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Set | ast.Tuple | ast.List):
            names = [
                e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in METHODS
            ]
            if len(names) >= 2:
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators, strict=True):
                if (
                    isinstance(op, ast.In | ast.NotIn)
                    and isinstance(right, ast.Set | ast.Tuple | ast.List)
                    and any(isinstance(e, ast.Constant) and e.value in METHODS for e in right.elts)
                ):
                    found.append(ast.unparse(node))
    return found


def test_the_scan_finds_lists_of_method_names() -> None:
    source = (
        'A = frozenset({"ngram", "suffix"})\n'
        'if m in ("dflash", "dspark"): pass\n'
        'if m not in ["mtp"]: pass\n'
        'B = ("ngram", 1, 1)\n'  # one name with other values: a row, not a set of methods
        'C = {"eagle3": 1, "mtp": 2}\n'
    )
    assert sorted(method_name_literals(source)) == [
        "('dflash', 'dspark')",
        "m in ('dflash', 'dspark')",
        "m not in ['mtp']",
        "{'ngram', 'suffix'}",
    ]


def test_no_list_of_method_names_outside_the_table() -> None:
    found = {
        (path.relative_to(PACKAGE).as_posix(), text)
        for path in sorted(PACKAGE.rglob("*.py"))
        for text in method_name_literals(path.read_text())
    }
    unexplained = sorted(found - ALLOWED.keys())
    assert not unexplained, (
        "a list of method names outside autotune/spec/methods.py: derive it from METHODS "
        f"(methods.method_set) or add a MethodRule field: {unexplained}"
    )
    assert not ALLOWED.keys() - found, f"stale ALLOWED entries: {sorted(ALLOWED.keys() - found)}"


def test_method_literal_is_the_table() -> None:
    assert get_args(Method) == tuple(METHODS)
    assert frozenset(METHODS) == ALL_DRAFTING
    assert all(name == rule.name for name, rule in METHODS.items())


def test_a_new_rule_joins_every_derived_set() -> None:
    """A rule added to a copy of the table, saying yes to every shared trait, is in every set of
    methods derived from the table: the shared knobs' too (a knob of one method names it)."""
    yes = MethodRule(
        "fake",
        needs_draft=True,
        parallel_draft=False,
        prefix_consistent=True,
        accepts_draft=True,
        v2_runner=True,
        takes_parallel_drafting=True,
    )
    table = {**METHODS, "fake": yes}
    assert method_set(lambda rule: True, table) == ALL_DRAFTING | {"fake"}
    assert model_drafters(table) == MODEL_DRAFTERS | {"fake"}
    knobs = knob_table(table)
    shared = [name for name, knob in KNOBS.items() if len(knob.methods) > 1]
    assert set(shared) == {
        "parallel_drafting",
        "rejection_sample_method",
        "draft_tensor_parallel_size",
    }
    for name in shared:
        assert knobs[name].methods == KNOBS[name].methods | {"fake"}, name
    # One that says no to each is in none of them but the set of all methods.
    no = MethodRule(
        "plain",
        needs_draft=False,
        parallel_draft=False,
        prefix_consistent=False,
        accepts_draft=False,
        v2_runner=False,
    )
    table = {**METHODS, "plain": no}
    assert model_drafters(table) == MODEL_DRAFTERS
    assert {n: k.methods for n, k in knob_table(table).items()} == {
        n: k.methods for n, k in KNOBS.items()
    }


def test_the_table_as_it_was_written() -> None:
    """The derived sets equal the lists they replaced, on the methods those lists knew (a new
    method joins them by its rule, without editing this test)."""
    before = {"ngram", "draft_model", "eagle3", "mtp", "dflash", "dspark", "suffix"}
    assert before <= ALL_DRAFTING
    assert model_drafters() & before == {"draft_model", "eagle3", "mtp", "dflash", "dspark"}
    assert KNOBS["parallel_drafting"].methods & before == {"eagle3", "draft_model"}
    assert KNOBS["rejection_sample_method"].methods & before == before - {"suffix"}
    assert KNOBS["draft_tensor_parallel_size"].methods == MODEL_DRAFTERS


CONTEXTS = [
    RuleContext(block_size=8),
    RuleContext(block_size=8, sample_from_anchor=False),
    RuleContext(),
    RuleContext(mtp_layers=2),
    RuleContext(draft_vocab_size=100, target_vocab_size=200),
]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_rules_read_the_fields_not_the_name(monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    """A copy of each rule under another name is checked exactly as the original."""
    monkeypatch.setitem(METHODS, "copy", dataclasses.replace(METHODS[method], name="copy"))
    for ctx in CONTEXTS:
        assert (min_n("copy", ctx), max_n("copy", ctx)) == (min_n(method, ctx), max_n(method, ctx))
        for ns in ([1, 2, 3], [4], [7, 8], [15, 16]):
            original, copied = check(method, ns, ctx), check("copy", ns, ctx)
            assert copied == dataclasses.replace(
                original,
                errors=tuple(e.replace(method, "copy") for e in original.errors),
                warnings=tuple(w.replace(method, "copy") for w in original.warnings),
            ), (method, ctx, ns)


def test_block_and_layer_rules() -> None:
    """What the fields mean, on the methods that have them."""
    block = RuleContext(block_size=8)
    assert (min_n("dflash", block), max_n("dflash", block)) == (1, 7)
    assert (min_n("dspark", block), max_n("dspark", block)) == (8, 8)
    one_plus_n = RuleContext(block_size=8, sample_from_anchor=False)
    assert (min_n("dspark", one_plus_n), max_n("dspark", one_plus_n)) == (7, 7)
    assert max_n("eagle3", block) == methods.GLOBAL_MAX_N
    assert "dflash: N <= block_size - 1 = 7" in check("dflash", [8], block).errors[0]
    assert "multiple of 2" in check("mtp", [3], RuleContext(mtp_layers=2)).errors[0]
    assert not check("eagle3", [3], RuleContext(mtp_layers=2)).errors
    vocab = RuleContext(draft_vocab_size=100, target_vocab_size=200)
    assert "vocabulary" in check("draft_model", [2], vocab).errors[0]
    assert not check("eagle3", [2], vocab).errors
