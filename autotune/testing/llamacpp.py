"""A llama.cpp ``llama-server`` ``/metrics`` page in llama.cpp's own exposition format, for
testing ``observe`` where no llama.cpp server runs.

:func:`exposition` writes what ``server_task_result_metrics::to_metrics()`` (ggml-org/llama.cpp
``tools/server/server-task.cpp``) writes for the spec-decode counters and the request gauges: a
``# HELP``/``# TYPE`` pair and one unlabelled line per metric, prefixed ``llamacpp:``, and the
per-position counter only once a position was counted. The values come from a scrape of a real
server (the recorded vLLM captures in tests/data), so only the names and the format are llama.cpp's.
"""

from __future__ import annotations

from autotune.observe.metrics import Scrape


def _num(x: float) -> str:
    # C++ `stream << double` prints integral values without a decimal point
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def exposition(s: Scrape, requests_deferred: float = 0.0) -> str:
    """``s`` as llama.cpp's server writes its counters and gauges."""
    counters = [
        ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated",
         s.num_draft_tokens),
        ("spec_decode_num_accepted_tokens_total",
         "Speculative: Total draft tokens accepted by the target model", s.num_accepted_tokens),
        ("spec_decode_num_drafts_total",
         "Speculative: Total speculative decoding verification steps", s.num_drafts),
    ]  # fmt: skip
    gauges = [
        ("requests_processing", "Number of requests processing", s.num_requests_running),
        ("requests_deferred", "Number of requests deferred", requests_deferred),
    ]
    lines: list[str] = []
    for kind, items in (("counter", counters), ("gauge", gauges)):
        for name, help_text, value in items:
            lines += [
                f"# HELP llamacpp:{name} {help_text}",
                f"# TYPE llamacpp:{name} {kind}",
                f"llamacpp:{name} {_num(value)}",
            ]
    if s.accepted_per_pos and s.num_drafts:
        name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
        lines += [f"# HELP {name} Accepted tokens per draft position", f"# TYPE {name} counter"]
        lines += [f'{name}{{position="{i}"}} {_num(a)}' for i, a in enumerate(s.accepted_per_pos)]
    return "\n".join(lines) + "\n"
