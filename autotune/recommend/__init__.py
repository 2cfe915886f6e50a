"""Choosing the recommended engine config from measurements, and rendering it for vLLM.

The statistics it chooses by (scores, intervals, cells, goodput) are the evidence layer's,
:mod:`autotune.evidence`."""

from autotune.evidence.decide import rank
from autotune.recommend.choose import Choice, choose, screen

__all__ = ["Choice", "choose", "rank", "screen"]
