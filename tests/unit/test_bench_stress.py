"""bench/stress.py: the landscape families of `make bench-stress` have the shapes they claim,
are seeded, and the target tolerance is the choosing rule's own tie band at the noise."""

from __future__ import annotations

import importlib.util
import itertools
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from autotune.bench.search import landscape_truth
from autotune.engine.readers.landscape import read_landscape

REPO = Path(__file__).resolve().parents[2]


def _stress():
    spec = importlib.util.spec_from_file_location("stress", REPO / "bench" / "stress.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


STRESS = _stress()
SYN = STRESS._synthetic()


def _write(family: str, index: int, folder: Path) -> tuple[object, Path]:
    spec, _ = STRESS.family_landscape(family, index)
    folder.mkdir(parents=True, exist_ok=True)
    return spec, SYN.write(spec, folder)


@pytest.mark.parametrize("family", STRESS.FAMILIES)
def test_every_family_is_seeded_and_readable(family: str, tmp_path: Path):
    _, first = _write(family, 0, tmp_path / "a")
    _, again = _write(family, 0, tmp_path / "b")
    assert first.read_text() == again.read_text()
    assert read_landscape(first)


def test_never_pays_leaves_the_baseline_best_by_three_percent_everywhere():
    for i in range(3):
        spec, _ = STRESS.family_landscape("never-pays", i)
        for d in spec.drafters:
            for n in SYN.n_values(d):
                for w in spec.workloads:
                    for c in spec.concurrency:
                        tput = (1 + sum(SYN._at_n(d, w, n))) / spec.cost.step_s(n, c, d.parallel)
                        assert tput * spec.cost.step_s(0, c, False) < 0.97


def test_dspark_runs_at_one_n_to_concurrency_256(tmp_path: Path):
    _, path = _write("dspark-bands", 0, tmp_path)
    points = read_landscape(path)
    assert len({p.num_speculative_tokens for p in points if p.method == "dspark"}) == 1
    assert max(p.concurrency for p in points) == 256


def test_the_block_drafter_curve_peaks_at_n6_as_published():
    spec, _ = STRESS.family_landscape("non-prefix", 1)
    block = next(d for d in spec.drafters if d.method == "dflash")
    w = spec.workloads[0]
    al = {n: 1 + sum(SYN._at_n(block, w, n)) for n in SYN.n_values(block)}
    assert al[6] == pytest.approx(3.77) and al[8] == pytest.approx(3.47)
    assert max(al, key=al.__getitem__) == 6


def test_trajectory_members_stay_inside_the_fitted_prefix_ratio():
    from autotune.spec.methods import METHODS

    for i in (0, 2):
        spec, _ = STRESS.family_landscape("non-prefix", i)
        for d in spec.drafters:
            low, high = METHODS[d.method].prefix_ratio
            assert low - 1 <= d.trajectory <= high - 1
        assert any(d.trajectory != 0 for d in spec.drafters)


def test_knob_variants_are_separate_arms_of_one_method(tmp_path: Path):
    _, path = _write("knobs", 0, tmp_path)
    arms = defaultdict(set)
    for p in read_landscape(path):
        if p.params:
            arms[p.method].add(p.params)
    assert any(len(v) == 2 for v in arms.values())


def test_outliers_are_left_out_of_the_truth(tmp_path: Path):
    _, path = _write("outliers", 0, tmp_path)
    points = read_landscape(path)
    cells = defaultdict(list)
    for p in points:
        cells[(p.config, p.workload, p.concurrency)].append(p.output_throughput_tok_s)
    slowed = {k: v for k, v in cells.items() if min(v) < 0.85 * statistics.median(v)}
    assert slowed  # the family's transients are in the file
    truth = landscape_truth(points, repeats=3)
    for (config, w, c), tputs in slowed.items():
        rest = [t for t in tputs if t >= 0.85 * statistics.median(tputs)]
        assert truth.throughput[(w, c)][config] == pytest.approx(statistics.fmean(rest))


def test_tolerance_is_the_choosing_rules_tie_band_at_the_noise():
    # sqrt(2) * t(0.975, 2) * sigma / sqrt(3) = 3.51 sigma, never below the 1 % tie margin.
    assert [STRESS.tolerance_pct(s, 3) for s in (0.25, 0.5, 1.0, 2.0)] == [1.0, 2.0, 4.0, 8.0]
    # tie+band: that band (at least the 1 % margin) plus the 3.51 sigma error band once more.
    assert [STRESS.tolerance_pct(s, 3, "tie+band") for s in (0.25, 0.5, 1.0, 2.0)] == [
        2.0,
        4.0,
        8.0,
        15.0,
    ]
    with pytest.raises(ValueError, match="unknown tolerance rule"):
        STRESS.tolerance_pct(1.0, 3, "tie")


def test_per_level_holds_low_c_noise_to_each_levels_own_band():
    spec, noise = STRESS.family_landscape("low-c-noise", 0)
    # 10 repeats: sqrt(2) * t(0.975, 9) / sqrt(10) = 1.01 sigma, whole percent up, at least 1 %
    assert STRESS.level_tolerances(spec, noise) == 21.0  # the noisiest level's (c=2, 20 %)
    assert STRESS.level_tolerances(spec, noise, per_level=True) == {
        1: 11.0,
        2: 21.0,
        4: 8.0,
        8: 1.0,
        32: 1.0,
    }
    plain, plain_noise = STRESS.random_landscape(0)  # one sigma at every level
    assert STRESS.level_tolerances(plain, plain_noise, per_level=True) == STRESS.tolerance_pct(
        plain_noise, plain.repeats
    )


@pytest.mark.slow  # two full grid replays: `make test` runs it
def test_the_grid_misses_stress_35_at_the_band_and_meets_it_at_tie_plus_band(tmp_path: Path):
    """The full grid (every config measured) answers (w1, c=16) of stress-35 with N=5, which the
    1 % tie margin calls tied with N=7 on the measured medians and which is truly 1.1 % below:
    the band misses by the tie rule alone, tie+band does not."""
    from autotune.bench.search import run_strategy

    spec, noise = STRESS.random_landscape(35)
    path = SYN.write(spec, tmp_path)
    band = run_strategy(path, "grid", 0, STRESS.tolerance_pct(noise, spec.repeats))
    wider = run_strategy(path, "grid", 0, STRESS.tolerance_pct(noise, spec.repeats, "tie+band"))
    assert band["engine_seconds_to_target"] is None
    assert 1.0 < band["final_regret_pct"] < 2.0
    assert wider["engine_seconds_to_target"] is not None
    assert wider["final_regret_pct"] == band["final_regret_pct"]


def test_low_concurrency_noise_has_the_reported_shape(tmp_path: Path):
    """vllm#53436's run-to-run noise: CV about 10 % at c=1, 20 % at c=2, 7.5 % at c=4, under
    1 % from c=8, 10 recorded repeats a cell; measured on the written landscapes' repeats (the
    median over cells of each level's CV), all three members."""
    for index in range(3):
        _, path = _write("low-c-noise", index, tmp_path / str(index))
        cells: dict[tuple, list[float]] = defaultdict(list)
        for p in read_landscape(path):
            cells[(p.config, p.workload, p.concurrency)].append(p.output_throughput_tok_s)
        assert {len(v) for v in cells.values()} == {10}
        cv: dict[int, list[float]] = defaultdict(list)
        for (_, _, c), values in cells.items():
            cv[c].append(100 * statistics.stdev(values) / statistics.mean(values))
        typical = {c: statistics.median(v) for c, v in cv.items()}
        assert sorted(typical) == [1, 2, 4, 8, 32]
        assert 7 < typical[1] < 13 and 14 < typical[2] < 26 and 5 < typical[4] < 10
        assert typical[8] < 1 and typical[32] < 1


def _best_n(spec, w: str, c: int, drafter) -> int:
    tput = {0: 1.0 / spec.cost.step_s(0, c, False)}
    for n in SYN.n_values(drafter):
        tput[n] = (1 + sum(SYN._at_n(drafter, w, n))) / spec.cost.step_s(n, c, drafter.parallel)
    return max(tput, key=tput.__getitem__)


def test_high_accept_members_have_the_issue_shape():
    """First positions accept about 0.9, the best N is 6 or more at c=1 and falls with load."""
    for i in range(3):
        spec, _ = STRESS.family_landscape("high-accept", i)
        (mtp,) = spec.drafters
        assert spec.concurrency[0] == 1
        for w in spec.workloads:
            assert min(mtp.acceptance[w][:3]) >= 0.89
            best = [_best_n(spec, w, c, mtp) for c in spec.concurrency]
            assert best[0] >= 6 and best[-1] < best[0]
            assert all(b <= a for a, b in itertools.pairwise(best))


def test_mid_c_peak_members_peak_inside_and_lose_to_off_at_256():
    for i in range(3):
        spec, _ = STRESS.family_landscape("mid-c-peak", i)
        block = next(d for d in spec.drafters if d.method == "dspark")
        (n,) = SYN.n_values(block)
        assert spec.concurrency[-1] == 256
        for w in spec.workloads:
            al = 1 + sum(SYN._at_n(block, w, n))
            assert al == pytest.approx(SYN.DSV4_DSPARK_AL[n - 1])
            speedup = [
                al * spec.cost.step_s(0, c, False) / spec.cost.step_s(n, c, True)
                for c in spec.concurrency
            ]
            top = speedup.index(max(speedup))
            assert 0 < top < len(speedup) - 1 and speedup[-1] <= 0.7
            assert speedup[top] >= 1.2


def test_stall_after_5_curves_gain_little_past_their_stall():
    for i in range(3):
        spec, _ = STRESS.family_landscape("stall-after-5", i)
        (chain,) = spec.drafters
        for w in spec.workloads:
            curve = chain.acceptance[w]
            assert len(curve) == 7 and max(curve[6:]) <= 0.05 and curve[4] > curve[6]
            assert _best_n(spec, w, 1, chain) >= 5
