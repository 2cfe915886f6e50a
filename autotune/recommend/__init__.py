"""Choosing the recommended engine config from measurements, and rendering it for vLLM."""

from autotune.recommend.choose import Choice, ConfigScore, cells, choose, rank, score, screen

__all__ = ["Choice", "ConfigScore", "cells", "choose", "rank", "score", "screen"]
