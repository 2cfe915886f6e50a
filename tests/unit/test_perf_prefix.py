"""autotune.perf.prefix: the prefix ratio fitted from the recorded sweeps, and the method table
that states it (``make bench-prefix`` prints the same comparison)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from autotune.perf.prefix import PrefixRatio, fit_prefix_ratios
from autotune.spec.methods import METHODS

REPO = Path(__file__).resolve().parents[2]


def _fit_script():
    spec = importlib.util.spec_from_file_location("fit_prefix", REPO / "bench" / "fit_prefix.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_fit_pools_repeats_and_compares_smaller_with_larger_n_only():
    runs = [
        ("ngram", "cell", 1, (0.8,), 2),
        ("ngram", "cell", 2, (0.5, 0.4), 1),
        ("ngram", "other", 2, (0.9, 0.9), 1),  # another cell: never compared with "cell"
        ("eagle3", "cell", 3, (0.6, 0.5, 0.4), 1),  # one N only: nothing to compare
    ]
    fitted = fit_prefix_ratios(runs)
    assert set(fitted) == {"ngram"}
    assert fitted["ngram"].low == pytest.approx(1.6)
    assert fitted["ngram"].high == pytest.approx(1.6)
    assert fitted["ngram"].pairs == 1


def test_bounds_invert_for_a_smaller_run():
    r = PrefixRatio(0.9, 1.2, 10)
    assert r.bounds(from_larger=True) == (0.9, 1.2)
    low, high = r.bounds(from_larger=False)
    assert low == pytest.approx(1 / 1.2) and high == pytest.approx(1 / 0.9)
    assert r.rounded() == PrefixRatio(0.9, 1.2, 10)
    assert PrefixRatio(0.9249, 1.2301, 1).rounded() == PrefixRatio(0.92, 1.24, 1)


def test_method_table_covers_every_recorded_sweep():
    # The stated ratio is measured, not assumed: it must cover what the real sweeps show, and
    # be no wider than that fit rounded outward to two decimals.
    script = _fit_script()
    paths = script.recorded_landscapes(REPO / "bench" / "landscapes")
    assert {p.stem for p in paths} >= {"cpu-tiny-llama", "cpu-tiny-mtp", "cpu-tiny-knobs"}
    fitted = script.fit(paths)
    assert {"ngram", "draft_model", "eagle3", "mtp", "dflash"} <= set(fitted)
    for method, r in fitted.items():
        rounded = r.rounded()
        assert METHODS[method].prefix_ratio == (rounded.low, rounded.high), method
    # The trajectory effect is real: on every method some smaller N accepted more.
    assert all(r.high > 1.0 for r in fitted.values())


def test_dflash_and_dspark_are_not_prefix_consistent():
    assert not METHODS["dflash"].prefix_consistent
    assert not METHODS["dspark"].prefix_consistent
