"""Request logs as workloads: OpenAI batch files, chat-completions bodies, conversation histories.

Three ``source.kind``s read a deployment's own traffic:

- ``openai_batch``: the OpenAI Batch API input JSONL that ``vllm run-batch`` reads, one
  ``{"custom_id", "method": "POST", "url": "/v1/chat/completions", "body": {...}}`` per line
  (optionally with the batch output file, whose ``usage.completion_tokens`` give each request's
  logged output length);
- ``chat_jsonl``: one chat-completions request body per line, optionally with its logged
  ``response`` (a chat completion) or ``usage``;
- ``conversations``: ShareGPT-style ``conversations`` or OpenAI ``messages`` histories (a JSON
  array or JSON lines), replayed turn by turn: every assistant turn becomes one request whose
  messages are the whole history before it, so later turns carry their real context.

The fields checked are those of vLLM's own request models (``BatchRequestInput`` in
``vllm/entrypoints/launchers/run_batch.py``, ``ChatCompletionRequest``), read here with the
standard library: importing vLLM's models costs about ten seconds and ``workload show`` must
stay quick. Every problem is one line naming the log file, its line and the field.

Output lengths: a logged reply (``usage.completion_tokens``, else the reply's text, tokenized
by the target's tokenizer or at 4 characters per token) sets a request's max_tokens with
``use_logged_length``; else its ``max_completion_tokens`` / ``max_tokens``; else the workload's.
Each is capped at the workload's max_tokens. Sampling: the harness sends every request at the
workload's temperature, so a log whose requests ask for other sampling settings (different
temperatures, a top_p, ...) is refused unless ``ignore_logged_sampling`` says to measure it at
the workload's settings anyway: a study never compares measurements taken at different
sampling settings.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.datasets._base import (
    MAX_TOKENS_LIMIT,
    Candidate,
    LoadContext,
    check_source_file,
    one_line,
)
from autotune.datasets.sharegpt import ASSISTANT_ROLES, HUMAN_ROLES, reply_length
from autotune.engine._base import ChatMessage, flatten_messages
from autotune.errors import SpecError
from autotune.spec.reading import MAX_DEPTH, json_depth_error, json_loads
from autotune.spec.workload import (
    ChatJsonlSource,
    ConversationsSource,
    OpenAIBatchSource,
    _ChatLogSource,
)

MAX_CONVERSATION_TURNS = 1000
"""Most turns in one conversation record (every assistant turn replays the whole history
before it, so a record's prompts grow with the square of its turns)."""
MAX_HISTORY_TOKENS = 32_768
"""Most tokens in the history a replayed turn sends, estimated at 4 characters per token (the
longest contexts served are 128k tokens; a 32k-token prompt per turn already makes a record of
500 answered turns a 64 MB workload)."""

CHAT_URL = "/v1/chat/completions"
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
"""Chat roles replayed as they are (vLLM's chat endpoint takes these)."""
SYSTEM_ROLES = frozenset({"system"})
SAMPLING_DEFAULTS: dict[str, tuple[float, ...]] = {
    "top_p": (1.0,),
    "top_k": (-1.0, 0.0),
    "min_p": (0.0,),
    "presence_penalty": (0.0,),
    "frequency_penalty": (0.0,),
    "repetition_penalty": (1.0,),
}
"""Sampling fields the harness does not send, with the values that mean "off"."""


@dataclass
class _Where:
    """Names a place in a log file for error lines."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file} line {self.line}"


@dataclass
class _Request:
    """One request read from a log, before the workload's rules apply."""

    where: _Where
    messages: tuple[ChatMessage, ...]
    max_tokens: int | None = None
    logged_tokens: int | None = None
    logged_reply: str | None = None
    sampling: dict[str, float] = field(default_factory=dict)
    prefix: str = "body."
    """How the request's fields are named in errors (``body.`` in a batch line)."""


# --- reading files ----------------------------------------------------------------------------


def _checked_path(path_str: str, ctx: LoadContext, field_name: str = "source.path") -> Path:
    path = ctx.resolve(path_str)
    if not path.exists():
        raise ctx.error(f"file not found: {path}", field_name)
    if not path.is_file():
        raise ctx.error(f"not a file: {path}", field_name)
    check_source_file(path, ctx)  # by type and size before it is opened
    return path


def _read_text(path: Path, ctx: LoadContext, field_name: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ctx.error(f"cannot read {path}: {one_line(e)}", field_name) from None


def iter_records(
    path: Path, ctx: LoadContext, field_name: str = "source.path"
) -> Iterator[tuple[_Where, Any]]:
    """(where, value) of each record of a JSON-lines file or of a top-level JSON array, with
    the line each record starts on."""
    text = _read_text(path, ctx, field_name)
    deep = json_depth_error(text)
    if deep is not None:
        bad_line = 1 + text.count("\n", 0, deep)
        raise ctx.error(
            f"{path.name} line {bad_line}: JSON nested deeper than {MAX_DEPTH} levels", field_name
        )
    stripped = text.lstrip()
    if stripped.startswith("["):
        yield from _iter_array(text, path, ctx, field_name)
        return
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = _Where(path.name, lineno)
        try:
            yield where, json_loads(line)
        except json.JSONDecodeError as e:
            raise ctx.error(f"{where}: not valid JSON ({e.msg})", field_name) from None


def _iter_array(
    text: str, path: Path, ctx: LoadContext, field_name: str
) -> Iterator[tuple[_Where, Any]]:
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    line = 1 + text.count("\n", 0, pos)
    last = pos
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text):
            raise ctx.error(f"{path.name}: the JSON array is not closed", field_name)
        if text[pos] == "]":
            return
        line += text.count("\n", last, pos)
        last = pos
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            bad_line = 1 + text.count("\n", 0, e.pos)
            raise ctx.error(
                f"{path.name} line {bad_line}: not valid JSON ({e.msg})", field_name
            ) from None
        yield _Where(path.name, line), value
        pos = end


# --- fields -----------------------------------------------------------------------------------


def _content(value: object, where: _Where, name: str, ctx: LoadContext) -> str:
    """A message's content: a string, or a list of text parts (joined, as vLLM's chat parser
    joins them); images, audio and null content (tool calls) cannot be replayed."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for j, part in enumerate(value):
            if not (isinstance(part, dict) and part.get("type") == "text"):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ctx.error(
                    f"{where}: {name}[{j}]: a {kind!r} part cannot be replayed (text parts only)",
                    "source.path",
                )
            text = part.get("text")
            if not isinstance(text, str):
                raise ctx.error(f"{where}: {name}[{j}].text: not a string", "source.path")
            texts.append(text)
        return "\n".join(texts)
    what = "null (a tool call cannot be replayed)" if value is None else type(value).__name__
    raise ctx.error(f"{where}: {name}: content is {what}, not text", "source.path")


def _messages(value: object, where: _Where, name: str, ctx: LoadContext) -> list[ChatMessage]:
    if not isinstance(value, list) or not value:
        raise ctx.error(f"{where}: {name}: expected a non-empty list of messages", "source.path")
    out: list[ChatMessage] = []
    for j, m in enumerate(value):
        if not isinstance(m, dict):
            raise ctx.error(f"{where}: {name}[{j}]: expected an object", "source.path")
        role = m.get("role")
        if role not in ROLES:
            raise ctx.error(
                f"{where}: {name}[{j}].role: {role!r} is not one of {', '.join(sorted(ROLES))}",
                "source.path",
            )
        out.append((str(role), _content(m.get("content"), where, f"{name}[{j}].content", ctx)))
    return out


def _positive_int(value: object, where: _Where, name: str, ctx: LoadContext) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ctx.error(f"{where}: {name}: {value!r} is not an integer", "source.path")
    if isinstance(value, float) and not value.is_integer():
        raise ctx.error(f"{where}: {name}: {value!r} is not an integer", "source.path")
    number = int(value)
    if not 1 <= number <= MAX_TOKENS_LIMIT:
        raise ctx.error(
            f"{where}: {name}: {number} is not in [1, {MAX_TOKENS_LIMIT}]", "source.path"
        )
    return number


def _number(value: object, where: _Where, name: str, ctx: LoadContext) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ctx.error(f"{where}: {name}: {value!r} is not a number", "source.path")
    return float(value)


def _body_request(body: object, where: _Where, prefix: str, ctx: LoadContext) -> _Request:
    """A chat-completions request body (``prefix`` names it in errors: ``body.`` or ``""``)."""
    if not isinstance(body, dict):
        raise ctx.error(
            f"{where}: {prefix.rstrip('.') or 'line'}: expected an object", "source.path"
        )
    if "messages" not in body:
        keys = ", ".join(repr(k) for k in list(body)[:8])
        raise ctx.error(f"{where}: {prefix}messages: missing (has {keys})", "source.path")
    messages = _messages(body["messages"], where, f"{prefix}messages", ctx)
    if messages[-1][0] == "assistant":
        raise ctx.error(
            f"{where}: {prefix}messages[{len(messages) - 1}].role: the last message is the "
            "assistant's; a request to replay ends with a user turn",
            "source.path",
        )
    request = _Request(where, tuple(messages), prefix=prefix)
    for key in ("max_completion_tokens", "max_tokens"):  # vLLM prefers max_completion_tokens
        if body.get(key) is not None:
            request.max_tokens = _positive_int(body[key], where, f"{prefix}{key}", ctx)
            break
    if body.get("tools"):
        raise ctx.error(
            f"{where}: {prefix}tools: requests with tools cannot be replayed (their template "
            "renders tool schemas autotune does not send)",
            "source.path",
        )
    if body.get("n") not in (None, 1):
        raise ctx.error(
            f"{where}: {prefix}n: {body['n']!r} completions per request cannot be replayed "
            "(autotune sends one)",
            "source.path",
        )
    for key in ("temperature", *SAMPLING_DEFAULTS):
        if body.get(key) is not None:
            request.sampling[key] = _number(body[key], where, f"{prefix}{key}", ctx)
    _logged(request, body.get("response"), body.get("usage"), where, prefix, ctx)
    return request


def _logged(
    request: _Request,
    response: object,
    usage: object,
    where: _Where,
    prefix: str,
    ctx: LoadContext,
    response_prefix: str | None = None,
) -> None:
    """A logged reply's length: ``usage.completion_tokens`` (top level or in the response),
    else the response's first choice's text. ``prefix`` names the usage's place in errors,
    ``response_prefix`` the response's (default ``{prefix}response.``)."""
    name = f"{prefix}usage"
    if isinstance(response, dict):
        if usage is None:
            usage = response.get("usage")
            name = f"{response_prefix or prefix + 'response.'}usage"
        choices = response.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            message = choices[0].get("message")
            if isinstance(message, dict) and isinstance(message.get("content"), str):
                request.logged_reply = message["content"]
    elif isinstance(response, str):
        request.logged_reply = response
    if usage is None:
        return
    if not isinstance(usage, dict):
        raise ctx.error(f"{where}: {name}: expected an object", "source.path")
    if usage.get("completion_tokens") is not None:
        request.logged_tokens = _positive_int(
            usage["completion_tokens"], where, f"{name}.completion_tokens", ctx
        )


# --- the three kinds ----------------------------------------------------------------------------


def _batch_requests(source: OpenAIBatchSource, ctx: LoadContext) -> list[_Request]:
    path = _checked_path(source.path, ctx)
    requests: list[_Request] = []
    ids: dict[str, _Request] = {}
    for where, row in iter_records(path, ctx):
        if not isinstance(row, dict):
            raise ctx.error(f"{where}: expected a JSON object", "source.path")
        for key in ("custom_id", "method", "url", "body"):
            if key not in row:
                raise ctx.error(f"{where}: {key}: missing", "source.path")
        custom_id = row["custom_id"]
        if not isinstance(custom_id, str):
            raise ctx.error(f"{where}: custom_id: not a string", "source.path")
        if custom_id in ids:
            raise ctx.error(
                f"{where}: custom_id: {custom_id!r} repeats {ids[custom_id].where}'s "
                "(each request of a batch has its own)",
                "source.path",
            )
        if row["method"] != "POST":
            raise ctx.error(f"{where}: method: {row['method']!r}, expected 'POST'", "source.path")
        if row["url"] != CHAT_URL:
            raise ctx.error(
                f"{where}: url: {row['url']!r}; only {CHAT_URL} requests are replayed",
                "source.path",
            )
        request = _body_request(row["body"], where, "body.", ctx)
        ids[custom_id] = request
        requests.append(request)
    if source.output_path is not None:
        _read_batch_output(source.output_path, ids, ctx)
    return requests


def _read_batch_output(path_str: str, ids: dict[str, _Request], ctx: LoadContext) -> None:
    """Each request's logged completion length from the batch output file."""
    field_name = "source.output_path"
    path = _checked_path(path_str, ctx, field_name)
    for where, row in iter_records(path, ctx, field_name):
        if not isinstance(row, dict) or not isinstance(row.get("custom_id"), str):
            raise ctx.error(f"{where}: custom_id: missing or not a string", field_name)
        request = ids.get(row["custom_id"])
        if request is None:
            raise ctx.error(
                f"{where}: custom_id: {row['custom_id']!r} is not in the batch input", field_name
            )
        response = row.get("response")
        if response is None:  # a failed request: its error is logged instead
            continue
        body = response.get("body") if isinstance(response, dict) else None
        if not isinstance(body, dict):
            raise ctx.error(f"{where}: response.body: expected an object", field_name)
        try:
            _logged(request, body, None, where, "", ctx, "response.body.")
        except SpecError as e:  # the same checks, named for the output file's field
            raise ctx.error(e.reason, field_name) from None


def _chat_requests(source: ChatJsonlSource, ctx: LoadContext) -> list[_Request]:
    path = _checked_path(source.path, ctx)
    return [_body_request(row, where, "", ctx) for where, row in iter_records(path, ctx)]


def _history(record: object, where: _Where, ctx: LoadContext) -> list[ChatMessage]:
    """A conversation record's turns as (role, content), ShareGPT roles mapped to chat ones."""
    if not isinstance(record, dict):
        raise ctx.error(f"{where}: expected a JSON object", "source.path")
    name = "messages" if "messages" in record else "conversations"
    turns = record.get(name)
    if isinstance(turns, list) and len(turns) > MAX_CONVERSATION_TURNS:
        raise ctx.error(
            f"{where}: {name}: {len(turns):,} turns, more than {MAX_CONVERSATION_TURNS:,} in one "
            "conversation (split it into several records)",
            "source.path",
        )
    if name == "messages":
        return _messages(turns, where, "messages", ctx)
    if not isinstance(turns, list) or not turns:
        raise ctx.error(
            f"{where}: conversations: expected a non-empty list of turns (or a messages list)",
            "source.path",
        )
    out: list[ChatMessage] = []
    for j, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise ctx.error(f"{where}: conversations[{j}]: expected an object", "source.path")
        speaker = turn.get("from")
        if speaker in HUMAN_ROLES:
            role = "user"
        elif speaker in ASSISTANT_ROLES:
            role = "assistant"
        elif speaker in SYSTEM_ROLES:
            role = "system"
        else:
            known = ", ".join(sorted(HUMAN_ROLES | ASSISTANT_ROLES | SYSTEM_ROLES))
            raise ctx.error(
                f"{where}: conversations[{j}].from: {speaker!r} is not one of {known}",
                "source.path",
            )
        value = turn.get("value")
        if not isinstance(value, str):
            raise ctx.error(f"{where}: conversations[{j}].value: not a string", "source.path")
        out.append((role, value))
    return out


def _conversation_requests(source: ConversationsSource, ctx: LoadContext) -> list[_Request]:
    path = _checked_path(source.path, ctx)
    requests: list[_Request] = []
    for where, record in iter_records(path, ctx):
        history = _history(record, where, ctx)
        replayed = 0
        chars = 0  # of history[:j], kept as it grows: one pass over the record
        for j, (role, reply) in enumerate(history):
            if j:
                chars += len(history[j - 1][1])
            if role != "assistant" or j == 0 or history[j - 1][0] == "assistant":
                continue  # an opening or repeated assistant turn answers no user turn
            if source.max_turns is not None and replayed >= source.max_turns:
                break
            if chars > 4 * MAX_HISTORY_TOKENS:
                raise ctx.error(
                    f"{where}: turn {j}: the history before it holds about {chars // 4:,} "
                    f"tokens, more than {MAX_HISTORY_TOKENS:,} (4 characters a token); cap the "
                    "conversations replayed with source.max_turns or shorten them",
                    "source.path",
                )
            request = _Request(where, tuple(history[:j]), logged_reply=reply)
            requests.append(request)
            replayed += 1
    if not requests:
        raise ctx.error(
            f"{path.name}: no assistant turn answers a user turn: nothing to replay", "source.path"
        )
    return requests


# --- the workload's rules -----------------------------------------------------------------------


def _check_sampling(requests: list[_Request], source: _ChatLogSource, ctx: LoadContext) -> None:
    """Refuse a log whose requests ask for sampling the study would not measure (see the
    module docstring)."""
    if source.ignore_logged_sampling:
        return
    hint = "or set source.ignore_logged_sampling: true to measure at the workload's settings"
    first: _Request | None = None
    workload_t = ctx.spec.temperature
    for r in requests:
        t = r.sampling.get("temperature")
        if t is not None:
            if first is not None and first.sampling["temperature"] != t:
                raise ctx.error(
                    f"{r.where}: {r.prefix}temperature: {t:g} differs from {first.where}'s "
                    f"{first.sampling['temperature']:g}; a study never compares measurements "
                    f"at different sampling settings (split the log by temperature, {hint})",
                    "source.path",
                )
            first = first or r
            if t != workload_t:
                raise ctx.error(
                    f"{r.where}: {r.prefix}temperature: {t:g}, but the workload measures at "
                    f"temperature {workload_t:g} (set the workload's temperature: {t:g}, {hint})",
                    "source.path",
                )
        for key, defaults in SAMPLING_DEFAULTS.items():
            value = r.sampling.get(key)
            if value is not None and value not in defaults:
                raise ctx.error(
                    f"{r.where}: {r.prefix}{key}: {value:g}; autotune measures with {key} "
                    f"{defaults[0]:g} (only the temperature is replayed; {hint})",
                    "source.path",
                )


def _candidates(
    requests: list[_Request], source: _ChatLogSource, ctx: LoadContext
) -> list[Candidate]:
    _check_sampling(requests, source, ctx)
    cap = ctx.spec.max_tokens
    out = []
    for r in requests:
        max_tokens = r.max_tokens
        if source.use_logged_length:
            if r.logged_tokens is not None:
                max_tokens = r.logged_tokens
            elif r.logged_reply is not None:
                max_tokens = reply_length(r.logged_reply, ctx.tokenizer, cap)
        out.append(
            Candidate(
                flatten_messages(r.messages),
                None if max_tokens is None else min(max_tokens, cap),
                r.messages,
            )
        )
    return out


def load_openai_batch(source: OpenAIBatchSource, ctx: LoadContext) -> list[Candidate]:
    """The chat requests of an OpenAI batch input file (see the module docstring)."""
    return _candidates(_batch_requests(source, ctx), source, ctx)


def load_chat_jsonl(source: ChatJsonlSource, ctx: LoadContext) -> list[Candidate]:
    """One request per line of chat-completions request bodies."""
    return _candidates(_chat_requests(source, ctx), source, ctx)


def load_conversations(source: ConversationsSource, ctx: LoadContext) -> list[Candidate]:
    """Every answered user turn of every conversation, with the history before it."""
    return _candidates(_conversation_requests(source, ctx), source, ctx)
