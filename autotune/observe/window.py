"""A window over a live server: the counters' deltas between the first and the last scrape, and
the running-requests gauge sampled every interval in between."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import NoResultError, SpecError
from autotune.observe.metrics import Scrape, scrape

Sleep = Callable[[float], None]


@dataclass(frozen=True)
class Window:
    """What the server's counters say about the traffic of one window."""

    url: str
    duration_s: float
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: tuple[int, ...]
    running_samples: tuple[float, ...]
    """``vllm:num_requests_running`` at every scrape, first and last included."""
    model_names: tuple[str, ...] = field(default_factory=tuple)

    @property
    def num_speculative_tokens(self) -> int:
        return len(self.accepted_per_pos)

    @property
    def acceptance_per_pos(self) -> tuple[float, ...]:
        """a_i = accepted at position i / drafts (vLLM's per-position acceptance rate)."""
        if self.num_drafts <= 0:
            return ()
        return tuple(min(a / self.num_drafts, 1.0) for a in self.accepted_per_pos)

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted / drafts (vLLM's convention, the bonus token included)."""
        if self.num_drafts <= 0:
            return None
        return 1.0 + self.num_accepted_tokens / self.num_drafts

    def concurrency(self) -> dict[int, float]:
        """Share of the samples with each number of running requests (idle samples included)."""
        counts = Counter(round(s) for s in self.running_samples)
        total = sum(counts.values())
        return {c: n / total for c, n in sorted(counts.items())} if total else {}

    def busy_concurrency(self) -> dict[int, float]:
        """The same over the samples where at least one request ran."""
        busy = {c: w for c, w in self.concurrency().items() if c > 0}
        total = sum(busy.values())
        return {c: w / total for c, w in busy.items()} if total else {}

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "duration_s": self.duration_s,
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "accepted_per_pos": list(self.accepted_per_pos),
            "acceptance_per_pos": list(self.acceptance_per_pos),
            "mean_acceptance_length": self.mean_acceptance_length,
            "running_samples": list(self.running_samples),
            "concurrency_share": {str(c): w for c, w in self.concurrency().items()},
            "model_names": list(self.model_names),
        }


def delta(first: Scrape, last: Scrape, url: str, duration_s: float, samples: list[float]) -> Window:
    """The window between two scrapes; SpecError when a counter went down (the server restarted
    or another server answered) or the number of draft positions changed."""
    if not first.accepted_per_pos and not first.num_drafts:
        # llama.cpp writes its per-position counter only once it counted a draft
        first = dataclasses.replace(first, accepted_per_pos=(0,) * len(last.accepted_per_pos))
    if len(first.accepted_per_pos) != len(last.accepted_per_pos):
        raise SpecError(
            "the number of draft positions changed during the window (server restarted?)",
            source="--metrics-url",
            field=url,
        )
    per_pos = tuple(
        b - a for a, b in zip(first.accepted_per_pos, last.accepted_per_pos, strict=True)
    )
    counts = (
        last.num_drafts - first.num_drafts,
        last.num_draft_tokens - first.num_draft_tokens,
        last.num_accepted_tokens - first.num_accepted_tokens,
    )
    if min((*counts, *per_pos), default=0) < 0:
        raise SpecError(
            "a counter went down during the window (server restarted?)",
            source="--metrics-url",
            field=url,
        )
    return Window(
        url=url,
        duration_s=duration_s,
        num_drafts=counts[0],
        num_draft_tokens=counts[1],
        num_accepted_tokens=counts[2],
        accepted_per_pos=per_pos,
        running_samples=tuple(samples),
        model_names=last.model_names,
    )


def observe_window(
    url: str,
    duration_s: float,
    interval_s: float,
    *,
    timeout_s: float = 5.0,
    sleep: Sleep = time.sleep,
    on_sample: Callable[[float, Scrape], None] | None = None,
) -> Window:
    """Scrape ``url`` now, every ``interval_s`` until ``duration_s`` has passed, and once more at
    the end. NoResultError (exit 1) when the window saw no speculative step (no traffic)."""
    t0 = time.monotonic()
    first = scrape(url, timeout_s)
    samples = [first.num_requests_running]
    last = first
    while (elapsed := time.monotonic() - t0) < duration_s:
        sleep(min(interval_s, duration_s - elapsed))
        last = scrape(url, timeout_s)
        samples.append(last.num_requests_running)
        if on_sample is not None:
            on_sample(time.monotonic() - t0, last)
    window = delta(first, last, url, time.monotonic() - t0, samples)
    if window.num_drafts == 0:
        raise NoResultError(
            f"{url}: no speculative decoding step in the {window.duration_s:.0f} s window "
            f"(no traffic?); observe a server while it serves"
        )
    return window
