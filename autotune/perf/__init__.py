"""The acceptance × cost performance model: predicts throughput of untried (method, N) configs.

Pure numpy, no I/O. The tuner fits it to the points measured so far for one (model, workload)
and asks which engine configs could still beat the incumbent.

Equations (per method, concurrency c; vLLM's counters, a_i = accepted_per_pos[i] / num_drafts):

    E(N)               = a_1 + ... + a_N            expected accepted draft tokens per step
    acceptance length  = 1 + E(N)                   tokens per sequence per step, bonus included
    T(N, c)            = c · (1 + E(N)) / t_step(N, c)
    t_base(c)          = c / T_baseline(c)          the baseline step (N = 0, E = 0)
    observed t_step    = c · (1 + E_run) / T_run    from each run, with its own acceptance
    t_step(N, c)       = A(c) + B(c) · N,           A >= t_base(c), B >= 0

Acceptance. vLLM accepts drafts as a prefix, so a_i never rises with i. For prefix-consistent
drafters (all but suffix and dspark) the token at position i does not depend on N, so a run at
N_max measures a_1..a_Nmax for every smaller N; runs are pooled position by position (a_1 as a
weighted mean, later positions through pooled conditional rates a_i / a_(i-1)), weighted by
repeats × drafts per output token (≈ 1 / (1 + E)). Acceptance measured at c is used as is;
positions measured only at other concurrencies take the pooled value, bounded by the per-c
extremes; positions past the longest run decay geometrically, bounded by 0 and the last a_i.
For the other methods a_i holds only for the N it was measured at; another N is centred on the
nearest measured N with E anywhere in [0, N].

Step cost. A chain drafter (mtp, eagle3, draft_model, ngram) pays one draft step per token, and
verification grows with the N + 1 tokens per sequence: the prior is A = t_base, B = extra / N.
A parallel drafter (dflash, dspark) drafts all N in one pass: A = t_base + draft pass, and B is
only verification growth, estimated from how the baseline's step grows with batch size,
(t_base at c·(N+1) sequences − t_base(c)) / N. With one N at c that split is a prior (or the
split fitted at the nearest concurrency with two or more N); with two or more N at c the line
is a least-squares fit in relative error. The range of a prediction is not a confidence
interval: it is every line (A, B) that passes through every run's throughput band (± half its
repeats' spread) and the constraints above, combined with the acceptance bounds. With one N it
spans every split of the extra cost, so it shrinks as soon as a second N is measured. A method
not measured at c borrows the step-time ratio to the baseline from the concurrencies where it
was (nearest in log c for the center, all of them for the range).

Where this breaks:
- t_step is assumed linear in N at each c. At low c the verification step is bound by reading
  the weights, so extra tokens are nearly free; at high c it turns compute-bound and grows with
  c·(N+1) tokens. A knee between the two inside the N range makes t_step convex in N: a line
  fitted on one side extrapolates too cheap or too dear on the other, and the range does not
  cover that.
- Acceptance is assumed independent of c (greedy decoding; batch numerics shift it slightly)
  and t_step independent of which tokens were accepted.
- Steps without a draft (ngram without a match) make the observed t_step an effective one:
  consistent across N as long as the share of draftless steps does not depend on N.
- Prefill is folded into the step time, so with short outputs the model mixes a per-token cost
  into a per-step one.
- A borrowed concurrency assumes the step ratio to the baseline carries over, which it does not
  once verification turns compute-bound; its range covers only the concurrencies measured.
"""

from autotune.perf.acceptance import (
    acceptance_curve,
    expected_accepted,
    extend_acceptance,
    mean_acceptance_length,
    pool_acceptance,
)
from autotune.perf.cost import StepCost, StepSample, fit_step_cost
from autotune.perf.model import PerfModel
from autotune.perf.records import UNKNOWN, Point, Prediction

__all__ = [
    "UNKNOWN",
    "PerfModel",
    "Point",
    "Prediction",
    "StepCost",
    "StepSample",
    "acceptance_curve",
    "expected_accepted",
    "extend_acceptance",
    "fit_step_cost",
    "mean_acceptance_length",
    "pool_acceptance",
]
