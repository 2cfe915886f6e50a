"""The Engine interface every backend implements, and the records it takes and returns.

An engine config fixes (model, engine args, speculative config): vLLM cannot change the method or
N of a live engine, so each config is one engine start. A started engine then measures any number
of (workload, concurrency, repeat) cells warm.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.spec.labels import PLAIN, Labels
from autotune.spec.methods import BASELINE, speculative_config

if TYPE_CHECKING:
    from autotune.spec.study import MeasurementSpec


@dataclass(frozen=True)
class EngineConfig:
    """One engine: the target, its engine args and the speculative choice (or the baseline)."""

    model: str
    method: str = BASELINE
    num_speculative_tokens: int = 0
    draft: str | None = None
    method_params: Mapping[str, Any] = field(default_factory=dict)
    """Knobs besides N (autotune.spec.knobs), passed in ``--speculative-config``."""
    tensor_parallel_size: int = 1
    engine_args: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_baseline(self) -> bool:
        return self.method == BASELINE

    def speculative_config(self) -> dict[str, Any] | None:
        """Exactly the ``--speculative-config`` JSON for this engine (None for the baseline)."""
        return speculative_config(
            self.method, self.num_speculative_tokens, self.draft, self.method_params
        )

    def key(self) -> str:
        """A stable digest of everything that makes this engine different from another."""
        payload = {
            "model": self.model,
            "speculative_config": self.speculative_config(),
            "tensor_parallel_size": self.tensor_parallel_size,
            "engine_args": dict(sorted(self.engine_args.items())),
            "env": dict(sorted(self.env.items())),
        }
        blob = json.dumps(payload, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def label(self, labels: Labels | None = None) -> str:
        """The config's name in prose (autotune.spec.labels), e.g. ``eagle3 N=4``,
        ``ngram[min=3,max=5] N=3`` when ``labels`` tells knob variants apart, or ``off (no
        speculation)``."""
        return (labels or PLAIN)(self.speculative_config(), prose=True)


ChatMessage = tuple[str, str]
"""One chat message as (role, content), e.g. ``("user", "Why does my build fail?")``."""


def flatten_messages(messages: Sequence[ChatMessage]) -> str:
    """A chat history as one plain transcript (``User: ...`` blocks ending in ``Assistant:``):
    a request's text where no chat template applies, and what length filters and prompt checks
    read."""
    blocks = [f"{role.capitalize()}: {content}" for role, content in messages]
    return "\n\n".join([*blocks, "Assistant:"])


@dataclass(frozen=True)
class Prompt:
    """One request: the prompt text (or chat messages, when it came from a chat log) and its
    output length."""

    text: str
    max_tokens: int
    messages: tuple[ChatMessage, ...] = ()
    """The request's whole chat history up to the turn it asks for (system, user and assistant
    messages in order, ending with a user turn), rendered with the target's chat template as
    ``vllm serve`` renders a chat request; ``text`` is then :func:`flatten_messages` of them.
    Empty: ``text`` is one user turn."""

    @property
    def turn(self) -> int:
        """Which user turn of its conversation this request is (1 for a single prompt)."""
        return max(1, sum(1 for role, _ in self.messages if role == "user"))

    def chat(self) -> list[dict[str, str]]:
        """The messages as a chat-completions request lists them."""
        if not self.messages:
            return [{"role": "user", "content": self.text}]
        return [{"role": role, "content": content} for role, content in self.messages]


@dataclass(frozen=True)
class PreparedWorkload:
    """A workload's prompts, loaded and sampled, ready to send to an engine."""

    name: str
    digest: str
    """Content digest of prompts and sampling settings: results of different prompt sets never
    mix."""
    prompts: Sequence[Prompt]
    temperature: float = 0.0
    seed: int = 0
    chat_template: bool = True


@dataclass(frozen=True)
class MeasureSettings:
    """The measurement protocol knobs an engine needs for one cell."""

    requests_per_concurrency: int = 4
    timeout_s: float = 1800.0
    min_measure_s: float = 0.0
    """Keep issuing requests (cycling the prompts) until this many seconds have passed too
    (``measurement.min_measure_s``; 0: exactly ``num_requests``)."""

    @classmethod
    def of(cls, measurement: MeasurementSpec) -> MeasureSettings:
        """A study's own protocol (its ``measurement:`` block): what the tuner, ``check
        --measure`` and ``verify`` all measure with, so none runs another protocol."""
        return cls(
            requests_per_concurrency=measurement.requests_per_concurrency,
            timeout_s=measurement.timeout_s,
            min_measure_s=measurement.min_measure_s,
        )

    def num_requests(self, workload: PreparedWorkload, concurrency: int) -> int:
        return max(len(workload.prompts), self.requests_per_concurrency * concurrency)


@dataclass(frozen=True)
class EngineInfo:
    """What a started engine reports about itself: provenance stored with every measurement."""

    engine_start_s: float
    vllm_version: str
    device_name: str
    """e.g. "AMD Instinct MI300X", "NVIDIA H200", or the CPU model."""
    device_arch: str
    """gfx942, gfx950, sm_90, cpu."""
    platform: str
    """rocm, cuda or cpu."""
    ray_node_id: str = ""
    """The Ray node the engine ran on ("" outside Ray)."""
    device_ids: str = ""
    """The accelerator ids Ray assigned to the engine process, comma-separated ("0,1"; "" when
    it got none, as on the CPU)."""
    engine_started_at: float = 0.0
    """Unix time the engine start began in its process (0 when unknown): with the trial's end it
    bounds the window in which the engine held its devices."""


@dataclass(frozen=True)
class Measurement:
    """One (workload, concurrency, repeat) on a warm engine. Counters are deltas for this run."""

    workload: str
    workload_digest: str
    concurrency: int
    repeat: int
    seed: int
    num_requests: int
    num_prompt_tokens: int
    num_output_tokens: int
    measure_s: float
    output_throughput_tok_s: float
    request_throughput_req_s: float
    median_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    median_tpot_ms: float | None = None
    p99_tpot_ms: float | None = None
    median_itl_ms: float | None = None
    p99_itl_ms: float | None = None
    """Latencies; None where the backend has none (a replayed landscape records throughput)."""
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: tuple[int, ...] = ()
    max_inflight: int = 0
    request_latencies_ms: tuple[tuple[float | None, float | None], ...] = ()
    """Per request, (TTFT, TPOT) in ms as ``vllm bench serve`` defines them for goodput (TPOT 0
    for a one-token reply; both None for a request that produced nothing), so goodput can be
    recomputed later for any SLO. Empty where the backend has no per-request data (a replayed
    landscape, or a measurement stored before schema 4)."""
    loop_share: float | None = None
    """Share of requests whose output ends in a repeating loop (:mod:`autotune.engine.degeneracy`,
    the guard against outputs that fake acceptance); None where the backend saw no output token
    ids (a replayed landscape, or a measurement stored before schema 5)."""
    distinct_4gram_ratio: float | None = None
    """Distinct 4-grams / all 4-grams of each output, averaged over the requests."""
    loop_at_max_tokens_share: float | None = None
    """Share of requests that ended in a loop and stopped at their max_tokens."""

    @property
    def degenerate(self) -> bool:
        """Whether most replies were loops (``loop_share`` over
        :data:`autotune.engine.degeneracy.LOOP_SHARE_LIMIT`)."""
        from autotune.engine.degeneracy import LOOP_SHARE_LIMIT

        return self.loop_share is not None and self.loop_share > LOOP_SHARE_LIMIT

    @property
    def mean_acceptance_length(self) -> float | None:
        """vLLM's convention: 1 + accepted / drafts (the bonus token counts); None without
        drafts."""
        if self.num_drafts <= 0:
            return None
        return 1.0 + self.num_accepted_tokens / self.num_drafts

    @property
    def acceptance_per_pos(self) -> tuple[float, ...]:
        """a_i = accepted at position i / drafts."""
        if self.num_drafts <= 0:
            return ()
        return tuple(a / self.num_drafts for a in self.accepted_per_pos)


class Engine(ABC):
    """One engine at a time: start it for a config, measure cells warm, stop it.

    Backends raise :class:`autotune.errors.EngineError` with a one-line reason when the engine
    cannot start or a measurement fails; the tuner stores it as a failed trial.
    """

    @abstractmethod
    def start(self, config: EngineConfig) -> EngineInfo:
        """Start an engine for ``config`` (blocking until it serves)."""

    @abstractmethod
    def measure(
        self,
        workload: PreparedWorkload,
        concurrency: int,
        repeat: int,
        settings: MeasureSettings,
    ) -> Measurement:
        """Run one closed-loop measurement with exactly ``concurrency`` requests in flight."""

    def warmup(self, workload: PreparedWorkload, num_requests: int) -> None:  # noqa: B027
        """Send untimed requests so the first timed run does not pay one-off costs."""

    def resume_after(self, measured: Sequence[Measurement]) -> None:  # noqa: B027
        """The trial started resumes an interrupted run that already ``measured`` these cells
        (called right after :meth:`start`). A real engine needs nothing; a replay engine
        advances its seeded draws past them, so it answers what an uninterrupted run would."""

    @abstractmethod
    def stop(self) -> None:
        """Shut the engine down and free its devices (idempotent)."""
