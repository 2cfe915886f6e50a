"""Benchmarks that run autotune end to end: clients above :mod:`autotune.api` (they create and
run real studies through the facade), so the facade and the layers below never import them.

``search``: the search strategies scored on recorded landscapes (``autotune bench search``,
``make bench-search``).
"""
