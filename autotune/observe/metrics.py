"""One scrape of a vLLM server's Prometheus ``/metrics``: the speculative-decoding counters and
the running-requests gauge, under vLLM's own names (``vllm/v1/spec_decode/metrics.py``,
``vllm/v1/metrics/loggers.py``), parsed with ``prometheus_client``'s text parser; a llama.cpp
server's ``llamacpp:`` counters are read as their vLLM names (:mod:`autotune.observe.llamacpp`)."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field

from autotune.errors import SpecError

NUM_DRAFTS = "vllm:spec_decode_num_drafts"
NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
NUM_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
COUNTERS = (NUM_DRAFTS, NUM_DRAFT_TOKENS, NUM_ACCEPTED_TOKENS, ACCEPTED_PER_POS)
SOURCE = "--metrics-url"


@dataclass(frozen=True)
class Scrape:
    """vLLM's counters at one instant, summed over engines (the ``engine`` label)."""

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: tuple[int, ...]
    """Accepted tokens per draft position, position 0 first (vLLM's ``position`` label)."""
    num_requests_running: float
    model_names: tuple[str, ...] = field(default_factory=tuple)
    """The ``model_name`` label values the server reports."""


def fetch(url: str, timeout_s: float = 5.0) -> str:
    """The text of ``url``; one-line SpecError (exit 2) when it cannot be read."""
    if not url.startswith(("http://", "https://")):
        raise SpecError("must be an http:// or https:// URL", source=SOURCE, field=url)
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            body: bytes = r.read(64 * 1024 * 1024)
    except urllib.error.HTTPError as exc:
        raise SpecError(f"HTTP {exc.code} {exc.reason}", source=SOURCE, field=url) from None
    except TimeoutError:
        raise SpecError(f"no answer within {timeout_s:g} s", source=SOURCE, field=url) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SpecError(f"cannot connect: {reason}", source=SOURCE, field=url) from None
    return body.decode("utf-8", errors="replace")


def parse(text: str, url: str) -> Scrape:
    """vLLM's spec-decode counters and running gauge from a ``/metrics`` text.

    SpecError when the text is not Prometheus exposition, when it has no ``vllm:`` metrics (not
    a vLLM server), when the server runs without speculative decoding (vLLM then registers no
    ``vllm:spec_decode_*`` counters), or when one of the four counters is missing.
    """
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        raise SpecError(
            "reading /metrics needs prometheus_client (pip install prometheus_client)",
            source=SOURCE,
        ) from None
    totals: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    running = 0.0
    models: set[str] = set()
    seen: set[str] = set()
    from autotune.observe import llamacpp

    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        raise SpecError(f"not Prometheus text: {exc}", source=SOURCE, field=url) from None
    # llama.cpp's server exports the same counters as llamacpp:...: read under vLLM's names.
    dialect = "vllm:"
    if not any(f.name.startswith("vllm:") for f in families) and any(
        f.name.startswith(llamacpp.PREFIX) for f in families
    ):
        dialect = llamacpp.PREFIX
    try:
        for family in families:
            name = family.name
            if dialect == llamacpp.PREFIX:
                name = llamacpp.TO_VLLM.get(name, name)
            if not name.startswith("vllm:"):
                continue
            seen.add(name)
            for s in family.samples:
                if "model_name" in s.labels:
                    models.add(s.labels["model_name"])
                if name == NUM_REQUESTS_RUNNING and s.name == family.name:
                    running += s.value
                elif name == ACCEPTED_PER_POS and s.name.endswith("_total"):
                    pos = int(s.labels.get("position", "0"))
                    per_pos[pos] = per_pos.get(pos, 0.0) + s.value
                elif name in COUNTERS and s.name.endswith("_total"):
                    totals[name] = totals.get(name, 0.0) + s.value
    except (ValueError, TypeError, IndexError) as exc:
        raise SpecError(f"not Prometheus text: {exc}", source=SOURCE, field=url) from None
    if not seen:
        raise SpecError(
            "no vllm: metrics (nor llama.cpp's llamacpp: ones): not a vLLM or llama.cpp "
            "server's /metrics",
            source=SOURCE,
            field=url,
        )
    if dialect == "vllm:" and not any(n.startswith("vllm:spec_decode") for n in seen):
        raise SpecError(
            "the server runs without speculative decoding (no vllm:spec_decode_* counters)",
            source=SOURCE,
            field=url,
        )
    missing = [n for n in COUNTERS if n not in seen]
    if dialect == llamacpp.PREFIX and not totals.get(NUM_DRAFTS):
        missing = [n for n in missing if n not in llamacpp.OPTIONAL]
    if NUM_REQUESTS_RUNNING not in seen:
        missing.append(NUM_REQUESTS_RUNNING)
    if missing:
        if dialect == llamacpp.PREFIX:
            names = {v: k for k, v in llamacpp.TO_VLLM.items()}
            missing = [names.get(n, n) for n in missing]
        raise SpecError(f"missing counter {', '.join(missing)}", source=SOURCE, field=url)
    positions = max(per_pos) + 1 if per_pos else 0
    return Scrape(
        num_drafts=round(totals.get(NUM_DRAFTS, 0.0)),
        num_draft_tokens=round(totals.get(NUM_DRAFT_TOKENS, 0.0)),
        num_accepted_tokens=round(totals.get(NUM_ACCEPTED_TOKENS, 0.0)),
        accepted_per_pos=tuple(round(per_pos.get(i, 0.0)) for i in range(positions)),
        num_requests_running=running,
        model_names=tuple(sorted(models)),
    )


def scrape(url: str, timeout_s: float = 5.0) -> Scrape:
    return parse(fetch(url, timeout_s), url)
