"""Readers of recorded sweeps, autotune's own and other tools': landscape files
(:mod:`~autotune.engine.readers.landscape`, what the ``replay`` backend serves), and the outputs
``autotune import`` reads into :class:`~autotune.engine.readers.imported.ImportedSweep` records
(``vllm bench sweep serve``: :mod:`~autotune.engine.readers.vllm_sweep`; SGLang's
``bench_speculative.py``: :mod:`~autotune.engine.readers.sglang_bench`).

A new reader of another tool's output is one module here that returns an ``ImportedSweep``, plus
the tool's name in :mod:`~autotune.engine.readers.imported` and its option through
``autotune.search.imported_study``, the API and the CLI (docs/development.md lists the files).
"""
