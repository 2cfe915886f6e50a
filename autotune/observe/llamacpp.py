"""llama.cpp's ``llama-server`` ``/metrics`` (started with ``--metrics``) under the names
:mod:`autotune.observe.metrics` reads from vLLM: the ``llamacpp:`` spec-decode counters.

The names are llama.cpp's own, from ``server_task_result_metrics::to_metrics()`` in
ggml-org/llama.cpp ``tools/server/server-task.cpp`` (the counters of llama.cpp #26389):
``spec_decode_num_drafts_total`` ("Total speculative decoding verification steps", vLLM's
``num_drafts``), ``spec_decode_num_draft_tokens_total``, ``spec_decode_num_accepted_tokens_total``
and the labelled ``spec_decode_num_accepted_tokens_per_pos_total{position="i"}``, which llama.cpp
writes only once a draft position was counted; the running-requests gauge is
``llamacpp:requests_processing``. Prometheus' parser drops a counter's ``_total`` from its family
name, so the families are named without it here, as vLLM's are.
"""

from __future__ import annotations

PREFIX = "llamacpp:"

TO_VLLM = {
    "llamacpp:spec_decode_num_drafts": "vllm:spec_decode_num_drafts",
    "llamacpp:spec_decode_num_draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "llamacpp:spec_decode_num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens",
    "llamacpp:spec_decode_num_accepted_tokens_per_pos": (
        "vllm:spec_decode_num_accepted_tokens_per_pos"
    ),
    "llamacpp:requests_processing": "vllm:num_requests_running",
}
"""llama.cpp's metric family -> the vLLM family observe reads for the same quantity."""

OPTIONAL = ("vllm:spec_decode_num_accepted_tokens_per_pos",)
"""What llama.cpp leaves out until it has counted something (a server that never drafted)."""
