"""The vLLM backend: one ``AsyncLLM`` engine in this process and what it needs.

- :mod:`~autotune.engine.vllm.args`: an engine config's ``AsyncEngineArgs`` keywords and the
  prompts as rendered for the engine (also used by the server path and generation);
- :mod:`~autotune.engine.vllm.engine`: :class:`~autotune.engine.vllm.engine.VLLMEngine`;
- :mod:`~autotune.engine.vllm.load`: its closed-loop load generator;
- :mod:`~autotune.engine.vllm.counters`: vLLM's spec-decode counters and their deltas;
- :mod:`~autotune.engine.vllm.env`: an engine config's environment applied and restored;
- :mod:`~autotune.engine.vllm.stderr` and :mod:`~autotune.engine.vllm.failures`: the child
  processes' stderr while an engine starts, and a failure's reason in one line;
- :mod:`~autotune.engine.vllm.checks`: checks against the installed vLLM's classes and source;
- :mod:`~autotune.engine.vllm.generate`: greedy responses on vLLM's offline ``LLM``.

vLLM itself is imported lazily, inside the functions that need it; this package's
``__init__`` imports nothing.
"""
