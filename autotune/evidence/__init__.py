"""The evidence layer: what the measurements say, read the same way by search, recommend and
report.

- :mod:`autotune.evidence.scores`: one config's repeats as robust statistics (median, MAD, the
  95% t interval of the median and of a ratio of medians, ``ConfigScore``);
- :mod:`autotune.evidence.cells`: cells and levels, the newest prompt set, the baseline's runs
  and drift;
- :mod:`autotune.evidence.objectives`: the SLO's latency metrics, goodput per measurement and
  per level, the geometric mean over levels;
- :mod:`autotune.evidence.points`: one cell's repeats as a performance-model point.

It imports the standard library, :mod:`autotune.spec`, :mod:`autotune.perf` and
:mod:`autotune.errors` (and, lazily, two pure-Python facts of the engine: the loop guard's limit
and per-request latencies), never the layers that read it (tests/unit/test_import_layers.py).
"""
