"""Write bench/landscapes/synthetic-*.csv: search-benchmark landscapes built from published
per-position acceptance and an explicitly assumed step-cost model.

The acceptance side is copied from the cited tables (see SOURCES below and each CSV's header). The
cost side (how long one engine step takes for N and concurrency c) is an assumption written out in
:class:`Cost`; its parameters are chosen to give each landscape the shape it is meant to test, and
are stated in the CSV header. Nothing here is a measurement; read_landscape skips the '#' lines.

Usage: .venv/bin/python bench/make_synthetic.py [--out bench/landscapes] [--summary]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autotune.engine.readers.landscape import LandscapePoint, read_landscape, write_landscape

ROCM_DFLASH = (
    "AMD ROCm blog 'DFlash Speculative Decoding on AMD Instinct MI355X: Up to 5x Faster Qwen3.5 "
    "Inference' (16 Sep 2026), "
    "https://github.com/ROCm/rocm-blogs/blob/release/blogs/artificial-intelligence/"
    "dflash-on-MI355x/README.md"
)
REDHAT_MAVERICK = (
    "RedHatAI model card 'Llama-4-Maverick-17B-128E-Instruct-speculators.eagle3', section "
    "Evaluations / Acceptance lengths, "
    "https://huggingface.co/RedHatAI/Llama4-Maverick-17B-128E-Instruct-speculator.eagle3 "
    "(README.md at a3bc47dd2b18ad27be775ca151068b6d6beed642)"
)


# --- acceptance: from the cited numbers ---------------------------------------------------------


def from_segment_lengths(al3: float, al7: float, al15: float) -> tuple[float, ...]:
    """a_1..a_15 from the acceptance lengths at N = 3, 7 and 15 (a table with only those N).

    AL(N) = 1 + a_1 + ... + a_N, so the table fixes the sums over positions 1-3, 4-7 and 8-15
    and nothing finer: each a_i is its segment's mean (a step curve, non-increasing here).
    """
    sums = (al3 - 1.0, al7 - al3, al15 - al7)
    curve = (sums[0] / 3,) * 3 + (sums[1] / 4,) * 4 + (sums[2] / 8,) * 8
    return tuple(round(a, 4) for a in curve)


def from_lengths_per_k(lengths: Sequence[float]) -> tuple[float, ...]:
    """a_1..a_K from acceptance lengths measured at every k = 1..K: a_k = AL(k) - AL(k-1)."""
    prev, out = 1.0, []
    for al in lengths:
        out.append(round(max(al - prev, 0.0), 4))
        prev = al
    return tuple(out)


# Qwen3.5-27B, Table 1 of ROCM_DFLASH: AL at MTP steps / DFlash N = 3, 7, 15 (concurrency 1).
QWEN27_MTP = {
    "math": from_segment_lengths(3.675, 5.869, 7.371),  # GSM8K row
    "code": from_segment_lengths(3.684, 6.027, 8.022),  # HumanEval row
}
QWEN27_DFLASH = {
    "math": from_segment_lengths(3.690, 6.177, 8.495),
    "code": from_segment_lengths(3.755, 6.625, 10.377),
}
# Qwen3.5-35B-A3B, Table 2 of ROCM_DFLASH.
QWEN35_MTP = {
    "chat": from_segment_lengths(3.065, 4.111, 4.683),  # MT-Bench row
    "code": from_segment_lengths(3.407, 4.836, 5.435),  # MBPP row
}
QWEN35_DFLASH = {
    "chat": from_segment_lengths(2.943, 3.960, 4.631),
    "code": from_segment_lengths(3.434, 5.163, 6.133),
}
# Llama-4-Maverick EAGLE-3, REDHAT_MAVERICK: AL at k = 1..7.
MAVERICK_EAGLE3 = {
    "code": from_lengths_per_k((1.83, 2.45, 2.94, 3.26, 3.47, 3.57, 3.62)),  # HumanEval
    "math": from_lengths_per_k((1.86, 2.56, 3.08, 3.53, 3.73, 3.91, 4.02)),  # gsm8k
    "summarize": from_lengths_per_k((1.69, 2.12, 2.37, 2.52, 2.60, 2.63, 2.63)),  # CNN/DM
}

INFERENCEX_DSV4 = (
    "SemiAnalysis InferenceX golden acceptance-length curves, DeepSeek-V4-Pro (DSpark and MTP, "
    "N = 1..8), as quoted in issue #22 and tests/unit/test_model_strategy.py"
)
# DeepSeek-V4-Pro, INFERENCEX_DSV4: DSpark's AL peaks at N = 6 (3.77) and falls by N = 8 (3.47),
# so a run at N is no prefix of a larger run; MTP plateaus at 2.55 from N = 4.
DSV4_DSPARK_AL = (1.84, 2.51, 3.01, 3.36, 3.61, 3.77, 3.73, 3.47)
DSV4_MTP_AL = (1.79, 2.27, 2.49, 2.54, 2.55, 2.55, 2.54, 2.58)


# --- cost: an assumption ------------------------------------------------------------------------


def _smooth_max(a: float, b: float) -> float:
    # A soft roofline corner: max(a, b) away from the knee, a little above it near the knee.
    return float((a**4 + b**4) ** 0.25)


@dataclass(frozen=True)
class Cost:
    """ASSUMED step time of one engine step, in seconds.

    t_step(N, c) = max~(weights_s · touched(B), weights_s · B / compute_knee_tokens)
                   + fixed_s + kv_s_per_seq · c
                   + [N > 0] · (spec_overhead_s + draft)
    with B = c · (N + 1) tokens verified, touched(B) the share of weights read for B tokens
    (1 for a dense model; for a MoE, dense_share + the experts that B tokens route to), and
    draft = N · draft_step_s · max~(1, c / draft_knee_seqs) for a chain drafter or
    draft_pass_s · max~(1, B / draft_knee_tokens) for a parallel one. max~ is a smooth max.
    """

    weights_s: float
    compute_knee_tokens: float
    fixed_s: float
    kv_s_per_seq: float
    spec_overhead_s: float
    draft_step_s: float
    draft_pass_s: float
    draft_knee_seqs: float
    draft_knee_tokens: float
    dense_share: float = 1.0
    experts: int = 1
    experts_per_token: int = 1

    def touched(self, tokens: float) -> float:
        if self.dense_share >= 1.0:
            return 1.0
        routed = 1.0 - (1.0 - self.experts_per_token / self.experts) ** tokens
        return self.dense_share + (1.0 - self.dense_share) * routed

    def step_s(self, n: int, c: int, parallel: bool) -> float:
        tokens = c * (n + 1)
        verify = _smooth_max(
            self.weights_s * self.touched(tokens),
            self.weights_s * tokens / self.compute_knee_tokens,
        )
        t = verify + self.fixed_s + self.kv_s_per_seq * c
        if n == 0:
            return t
        if parallel:
            draft = self.draft_pass_s * _smooth_max(1.0, tokens / self.draft_knee_tokens)
        else:
            draft = n * self.draft_step_s * _smooth_max(1.0, c / self.draft_knee_seqs)
        return t + self.spec_overhead_s + draft

    def describe(self) -> str:
        moe = (
            f"MoE touched(B) = {self.dense_share} + {1 - self.dense_share:.2f}"
            f"*(1-(1-{self.experts_per_token}/{self.experts})^B)"
            if self.dense_share < 1.0
            else "dense: touched(B) = 1"
        )
        return (
            f"weights_s={self.weights_s} compute_knee_tokens={self.compute_knee_tokens} "
            f"fixed_s={self.fixed_s} kv_s_per_seq={self.kv_s_per_seq} "
            f"spec_overhead_s={self.spec_overhead_s} draft_step_s={self.draft_step_s} "
            f"draft_pass_s={self.draft_pass_s} draft_knee_seqs={self.draft_knee_seqs} "
            f"draft_knee_tokens={self.draft_knee_tokens}; {moe}"
        )


@dataclass(frozen=True)
class Drafter:
    method: str
    draft: str | None
    parallel: bool
    acceptance: dict[str, tuple[float, ...]]
    """workload -> a_1..a_Nmax (cited)."""
    engine_start_s: float
    """ASSUMED engine start cost of this method's engines."""
    trajectory: float = 0.0
    """How much more a smaller N accepts than the prefix of the largest N's curve: a run at N
    has a_i x (1 + trajectory x (N_max - N) / (N_max - 1)), capped at 1. The recorded CPU sweep
    shows this effect (n-gram on code: a_1 = 0.771 at N = 1, 0.707 at N = 4; ``make
    bench-prefix``); 0 is an exact prefix."""
    al_by_n: tuple[float, ...] = ()
    """Published acceptance length at N = 1, 2, ... when a run at N is not the largest run's
    prefix at all (a block drafter whose AL peaks and falls, InferenceX's DSpark curve): a run at
    N has the ``acceptance`` curve's first N positions scaled so that 1 + a_1 + ... + a_N is
    AL(N) (each a_i capped at 1). Empty: ``trajectory`` decides."""
    n_values: tuple[int, ...] = ()
    """The N this drafter runs at (DSpark's N is its checkpoint's block); empty: 1..N_max."""
    params: tuple[tuple[str, Any], ...] = ()
    """Knobs besides N (the landscape's ``params`` column): drafters of one method that differ
    in them are separate arms of the search."""


@dataclass(frozen=True)
class Landscape:
    name: str
    model: str
    shape: str
    """What the landscape is meant to test, in one line."""
    sources: tuple[str, ...]
    acceptance_note: str
    cost_note: str
    workloads: tuple[str, ...]
    concurrency: tuple[int, ...]
    cost: Cost
    drafters: tuple[Drafter, ...]
    baseline_start_s: float
    noise_pct: float
    """Relative sigma of the seeded Gaussian noise on each repeat's throughput, in percent."""
    acceptance_noise_pct: float = 0.5
    """Relative sigma of the noise on each repeat's a_i (kept non-increasing), in percent."""
    outlier_share: float = 0.0
    """Share of repeats slowed by a transient (another process on the machine): such a repeat's
    throughput is cut by ``outlier_pct`` percent (a uniform draw in the range), its acceptance
    untouched. The recorded CPU sweeps show it: repeats recorded under load spread up to 52 %
    (cpu-tiny-llama's first recording) and 114 % (cpu-tiny-knobs'), see bench/README.md."""
    outlier_pct: tuple[float, float] = (15.0, 40.0)
    noise_by_concurrency: tuple[tuple[int, float], ...] = ()
    """(concurrency, sigma in percent) pairs that replace ``noise_pct`` at those levels: GPU
    run-to-run noise is largest at low concurrency (vllm#53436)."""
    repeats: int = 3
    output_tokens: int = 256
    seed: int = 0
    extra: tuple[str, ...] = field(default_factory=tuple)


def measured_tokens(spec: Landscape, c: int) -> int:
    # ASSUMED: max(32, 4·c) requests of `output_tokens` each per measurement.
    return max(32, 4 * c) * spec.output_tokens


def build(spec: Landscape) -> list[LandscapePoint]:
    """Every (config, workload, concurrency, repeat) row of the landscape, seeded."""
    rng = np.random.default_rng(spec.seed)
    points: list[LandscapePoint] = []
    configs: list[tuple[Drafter | None, int]] = [(None, 0)]
    for d in spec.drafters:
        configs += [(d, n) for n in n_values(d)]
    for drafter, n in configs:
        for w in spec.workloads:
            for c in spec.concurrency:
                for r in range(spec.repeats):
                    acc: tuple[float, ...] = ()
                    if drafter is not None:
                        acc = _noisy_acceptance(_at_n(drafter, w, n), spec, rng)
                    parallel = drafter.parallel if drafter else False
                    step = spec.cost.step_s(n, c, parallel)
                    tput = c * (1.0 + sum(acc)) / step
                    sigma = dict(spec.noise_by_concurrency).get(c, spec.noise_pct)
                    tput *= 1.0 + rng.normal(0.0, sigma / 100.0)
                    if spec.outlier_share > 0 and rng.random() < spec.outlier_share:
                        tput *= 1.0 - rng.uniform(*spec.outlier_pct) / 100.0
                    points.append(
                        LandscapePoint(
                            model=spec.model,
                            workload=w,
                            method=drafter.method if drafter else "none",
                            draft=drafter.draft if drafter else None,
                            num_speculative_tokens=n,
                            concurrency=c,
                            repeat=r,
                            params=drafter.params if drafter else (),
                            output_throughput_tok_s=tput,
                            mean_acceptance_length=1.0 + sum(acc) if drafter else None,
                            acceptance_per_pos=acc,
                            engine_start_s=drafter.engine_start_s
                            if drafter
                            else spec.baseline_start_s,
                            measure_s=measured_tokens(spec, c) / tput,
                        )
                    )
    return points


def n_values(drafter: Drafter) -> tuple[int, ...]:
    """The N a drafter's landscape rows have: its ``n_values``, else 1..N_max."""
    n_max = min(len(a) for a in drafter.acceptance.values())
    return drafter.n_values or tuple(range(1, n_max + 1))


def _at_n(drafter: Drafter, workload: str, n: int) -> tuple[float, ...]:
    """a_1..a_N of a run at N: the cited curve's prefix, raised by the drafter's trajectory, or
    scaled to the published AL(N) (``al_by_n``)."""
    curve = drafter.acceptance[workload]
    n_max = min(len(a) for a in drafter.acceptance.values())
    if drafter.al_by_n:
        scale = (drafter.al_by_n[n - 1] - 1.0) / max(sum(curve[:n]), 1e-9)
        return tuple(min(1.0, a * scale) for a in curve[:n])
    lift = 1.0 + drafter.trajectory * (n_max - n) / max(n_max - 1, 1)
    return tuple(min(1.0, a * lift) for a in curve[:n])


def _noisy_acceptance(
    curve: Sequence[float], spec: Landscape, rng: np.random.Generator
) -> tuple[float, ...]:
    noisy = np.asarray(curve, dtype=float) * (
        1.0 + rng.normal(0.0, spec.acceptance_noise_pct / 100.0, len(curve))
    )
    # Prefix acceptance never rises with the position, and is a rate.
    noisy = np.minimum.accumulate(np.clip(noisy, 0.0, 1.0))
    return tuple(round(float(a), 4) for a in noisy)


def header(spec: Landscape) -> list[str]:
    lines = [
        f"SYNTHETIC landscape '{spec.name}' for autotune's search benchmark - NOT a measurement.",
        f"Shape it tests: {spec.shape}",
        "Acceptance (cited):",
        *[f"  {s}" for s in spec.sources],
        f"  {spec.acceptance_note}",
        "Cost side: an explicit ASSUMPTION, not measured anywhere:",
        f"  {Cost.__doc__.splitlines()[0] if Cost.__doc__ else ''}",
        "  t_step = smoothmax(weights_s*touched(B), weights_s*B/compute_knee_tokens) + fixed_s"
        " + kv_s_per_seq*c + [N>0]*(spec_overhead_s + draft), B = c*(N+1);",
        "  chain draft = N*draft_step_s*smoothmax(1, c/draft_knee_seqs);"
        " parallel draft = draft_pass_s*smoothmax(1, B/draft_knee_tokens)",
        f"  parameters: {spec.cost.describe()}",
        f"  {spec.cost_note}",
        "  throughput = c*(1 + a_1 + ... + a_N)/t_step;"
        f" measure_s = max(32, 4c) requests x {spec.output_tokens} tokens / throughput;",
        "  engine_start_s (assumed): "
        + ", ".join(
            [f"none {spec.baseline_start_s:g}"]
            + [f"{d.method} {d.engine_start_s:g}" for d in spec.drafters]
        ),
        f"Noise: {spec.repeats} repeats; throughput x (1 + N(0, {spec.noise_pct}%)) per repeat;"
        f" a_i x (1 + N(0, {spec.acceptance_noise_pct}%)) kept non-increasing;"
        f" numpy default_rng seed {spec.seed}.",
        *(
            [
                "Noise by concurrency (replacing the sigma above there): "
                + ", ".join(f"c={c} {sigma:g}%" for c, sigma in spec.noise_by_concurrency)
                + " (shaped like vllm#53436)."
            ]
            if spec.noise_by_concurrency
            else []
        ),
        *(
            [
                f"Outliers: a share {spec.outlier_share:g} of repeats slowed by"
                f" {spec.outlier_pct[0]:g}-{spec.outlier_pct[1]:g}% (a transient, as under load)."
            ]
            if spec.outlier_share > 0
            else []
        ),
        *spec.extra,
        "Generated by bench/make_synthetic.py; edit that script, not this file.",
    ]
    return [f"# {line}".rstrip() for line in lines]


def write(spec: Landscape, out_dir: Path) -> Path:
    path = out_dir / f"synthetic-{spec.name}.csv"
    points = build(spec)
    write_landscape(path, points)
    body = path.read_text()
    path.write_text("\n".join(header(spec)) + "\n" + body)
    read_landscape(path)  # the replay engine must accept what we wrote
    return path


def summary(spec: Landscape) -> list[str]:
    """The true best config per (workload, concurrency): mean over repeats, as the bench scores."""
    points = build(spec)
    cells: dict[tuple[str, int, str, int], list[float]] = {}
    for p in points:
        key = (p.workload, p.concurrency, p.method, p.num_speculative_tokens)
        cells.setdefault(key, []).append(p.output_throughput_tok_s)
    lines = []
    for w in spec.workloads:
        for c in spec.concurrency:
            mine = {
                (m, n): float(np.mean(v))
                for (ww, cc, m, n), v in cells.items()
                if (ww, cc) == (w, c)
            }
            (m, n), best = max(mine.items(), key=lambda kv: kv[1])
            base = mine[("none", 0)]
            per_method = []
            for d in spec.drafters:
                ns = {nn: t for (mm, nn), t in mine.items() if mm == d.method}
                nb = max(ns, key=lambda k: ns[k])
                per_method.append(f"{d.method} N={nb} x{ns[nb] / base:.2f}")
            lines.append(
                f"{w:>9} c={c:<3} best {m} N={n} ({best:,.0f} tok/s, x{best / base:.2f}); "
                + "; ".join(per_method)
            )
    return lines


LANDSCAPES = (
    Landscape(
        name="qwen27b-dense",
        model="Qwen/Qwen3.5-27B",
        shape="a parallel drafter (dflash) and a chain drafter (mtp), N 1..15; the best N falls "
        "from 15 at low concurrency to 3-7 at high concurrency; repeats agree within ~1%.",
        sources=(
            ROCM_DFLASH + ", Table 1 (Qwen3.5-27B, concurrency 1): rows GSM8K -> workload "
            "math, HumanEval -> workload code.",
        ),
        acceptance_note="The table gives AL only at N = 3, 7, 15 (sums of a_1..a_3, a_4..a_7, "
        "a_8..a_15); each a_i is its segment's mean, a step curve.",
        cost_note="Calibrated at c=1 to the same blog: a dense 27B baseline of ~70 tok/s, MTP "
        "~245 tok/s at N=7 and N=15 and DFlash ~396 tok/s at N=15 on HumanEval (Figure 2 text), "
        "DFlash ~5x on MATH500; the compute knee and KV cost are guesses that make verification "
        "compute-bound at high concurrency.",
        workloads=("math", "code"),
        concurrency=(1, 8, 32, 64),
        cost=Cost(
            weights_s=0.0135,
            compute_knee_tokens=128,
            fixed_s=0.0,
            kv_s_per_seq=0.0001,
            spec_overhead_s=0.0026,
            draft_step_s=0.0010,
            draft_pass_s=0.0085,
            draft_knee_seqs=64,
            draft_knee_tokens=1024,
        ),
        drafters=(
            Drafter("mtp", None, False, QWEN27_MTP, engine_start_s=155.0),
            Drafter("dflash", "z-lab/Qwen3.5-27B-DFlash", True, QWEN27_DFLASH, 185.0),
        ),
        baseline_start_s=140.0,
        noise_pct=0.25,
        seed=0,
    ),
    Landscape(
        name="qwen35b-moe-noisy",
        model="Qwen/Qwen3.5-35B-A3B",
        shape="a MoE whose verification reads more experts as N grows; at concurrency 128 no "
        "speculative config beats the baseline on chat; noisy repeats (sigma 1.5%).",
        sources=(
            ROCM_DFLASH + ", Table 2 (Qwen3.5-35B-A3B, concurrency 1): rows MT-Bench -> "
            "workload chat, MBPP -> workload code.",
        ),
        acceptance_note="The table gives AL only at N = 3, 7, 15; each a_i is its segment's mean, "
        "a step curve.",
        cost_note="Parameters are guesses for a 35B MoE with 8 of 256 experts per token and a "
        "per-step fixed cost; chosen so spec decoding stops paying at c=128 on chat.",
        workloads=("chat", "code"),
        concurrency=(1, 16, 64, 128),
        cost=Cost(
            weights_s=0.0088,
            compute_knee_tokens=96,
            fixed_s=0.003,
            kv_s_per_seq=0.00002,
            spec_overhead_s=0.0012,
            draft_step_s=0.0006,
            draft_pass_s=0.0030,
            draft_knee_seqs=64,
            draft_knee_tokens=512,
            dense_share=0.15,
            experts=256,
            experts_per_token=8,
        ),
        drafters=(
            Drafter("mtp", None, False, QWEN35_MTP, engine_start_s=175.0),
            Drafter("dflash", "z-lab/Qwen3.5-35B-A3B-DFlash", True, QWEN35_DFLASH, 205.0),
        ),
        baseline_start_s=160.0,
        noise_pct=1.5,
        seed=1,
    ),
    Landscape(
        name="maverick-eagle3",
        model="meta-llama/Llama-4-Maverick-17B-128E-Instruct",
        shape="one chain drafter (eagle3, N 1..7) on three workloads; the best N falls from 4 to 1 "
        "with concurrency and summarize gains nothing at c=128; a small grid (8 configs).",
        sources=(
            REDHAT_MAVERICK + ": use cases Coding (HumanEval) -> code, Math Reasoning "
            "(gsm8k) -> math, Text Summarization (CNN/Daily Mail) -> summarize.",
        ),
        acceptance_note="The card gives AL at every k = 1..7, so a_k = AL(k) - AL(k-1) exactly "
        "(to the card's two decimals).",
        cost_note="Parameters are guesses for a TP=8 MoE with 1 of 128 experts per token and a "
        "large per-step fixed cost (launches, all-reduce); engine starts are long (400B weights).",
        workloads=("code", "math", "summarize"),
        concurrency=(1, 8, 32, 128),
        cost=Cost(
            weights_s=0.00625,
            compute_knee_tokens=64,
            fixed_s=0.004,
            kv_s_per_seq=0.00003,
            spec_overhead_s=0.0008,
            draft_step_s=0.0007,
            draft_pass_s=0.0,
            draft_knee_seqs=64,
            draft_knee_tokens=1,
            dense_share=0.05,
            experts=128,
            experts_per_token=1,
        ),
        drafters=(
            Drafter(
                "eagle3",
                "RedHatAI/Llama4-Maverick-17B-128E-Instruct-speculator.eagle3",
                False,
                MAVERICK_EAGLE3,
                engine_start_s=660.0,
            ),
        ),
        baseline_start_s=600.0,
        noise_pct=0.4,
        seed=2,
    ),
)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "landscapes")
    parser.add_argument("--summary", action="store_true", help="print the true best per level")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for spec in LANDSCAPES:
        path = write(spec, args.out)
        print(f"wrote {path}")
        if args.summary:
            for line in summary(spec):
                print(f"  {line}")


if __name__ == "__main__":
    main()
