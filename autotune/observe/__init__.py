"""``autotune observe``: a running vLLM server's ``/metrics`` read over a window (``metrics``:
scraping and vLLM's counter names; ``window``: the scrape loop and its deltas; ``predict``: the
study's perf model with the live acceptance; ``run``: tying them to a study)."""
