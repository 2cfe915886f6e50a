"""``autotune verify``: the recommendation served by ``vllm serve`` and measured by ``vllm bench
serve``, compared with the study's in-process numbers (``compare`` is pure; ``server`` starts
the server and calls the benchmark client; ``run`` ties them to a study)."""
