"""Reading a user's file so that no file can take the machine down or hang a command.

Every file autotune reads on a user's behalf (study and workload YAML, landscape CSVs,
``check --config`` documents, workload source files) goes through here:

- regular files only: a FIFO (it would block forever), a device (``/dev/zero`` never ends), a
  directory or a socket is refused by its type (``os.stat``) before it is opened, and the file
  is opened non-blocking and checked again (``os.fstat``), so a path swapped in between is
  refused too;
- a size cap checked before reading (:data:`MAX_SPEC_BYTES`, :data:`MAX_CONFIG_BYTES`,
  :data:`MAX_LANDSCAPE_BYTES`, :data:`MAX_SOURCE_BYTES`), and no more than the cap is read;
- UTF-8 text without NUL bytes;
- JSON and YAML nested at most :data:`MAX_DEPTH` levels (Python's parsers recurse, and a
  60,000-deep document is a ``RecursionError``); YAML without aliases (``*name``: a few
  hundred bytes of nested aliases expand to gigabytes) and without duplicate keys;
- integers of at most :data:`MAX_INT_DIGITS` digits (Python's own limit, 4,300, is a
  ValueError deep inside the parser);
- error lines quote at most :data:`EXCERPT_CHARS` characters of what the user gave.

Each problem is one :class:`autotune.errors.SpecError` line (exit 2).
"""

from __future__ import annotations

import codecs
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from autotune.errors import SpecError

MIB = 1024 * 1024
MAX_SPEC_BYTES = 4 * MIB
"""Largest study or workload YAML (prompt sets that size belong in jsonl/csv files)."""
MAX_CONFIG_BYTES = 1 * MIB
"""Largest ``check --config`` document (a --speculative-config is a few hundred bytes)."""
MAX_LANDSCAPE_BYTES = 64 * MIB
"""Largest landscape CSV (the biggest recorded sweep is well under 1 MiB)."""
MAX_SOURCE_BYTES = 1024 * MIB
"""Largest workload source file (jsonl, csv), read line by line, never whole."""
MAX_DEPTH = 64
"""Deepest nesting of JSON arrays/objects and YAML collections (specs need fewer than 10)."""
EXCERPT_CHARS = 80
"""Most characters of user input an error line quotes."""
MAX_INT_DIGITS = 100
"""Longest integer literal in a JSON or YAML document (Python refuses to convert one of more
than 4,300 digits with a ValueError; no spec field needs more than 20)."""


def excerpt(text: object, limit: int = EXCERPT_CHARS) -> str:
    """``text`` cut to ``limit`` characters (``...`` marks the cut), control characters
    escaped, so an error line stays one short line whatever the user gave."""
    s = str(text)
    cut = len(s) > limit
    s = s[:limit]
    s = "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)
    return s + ("..." if cut else "")


def size_text(n: int) -> str:
    """``4 MiB``, ``1 GiB``, ``812 KiB``, ``57 bytes``."""
    for unit, scale in (("GiB", 1024 * MIB), ("MiB", MIB), ("KiB", 1024)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"


def _kind_refusal(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    if stat.S_ISFIFO(mode):
        return "is a FIFO (named pipe), not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a regular file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a regular file"
    return "not a regular file"


def regular_file(path: Path | str, source: str, what: str = "file") -> os.stat_result:
    """The ``os.stat`` of a regular file; a missing path, a FIFO, a device, a directory or a
    socket is a SpecError naming ``source``."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise SpecError(f"{what} not found", source=source) from None
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror or exc}", source=source) from None
    why = _kind_refusal(st.st_mode)
    if why:
        raise SpecError(why, source=source)
    return st


def _too_large(what: str, limit: int, size: int) -> str:
    return f"{what} larger than {size_text(limit)} ({size_text(size)}); refused before reading"


def check_size(path: Path | str, source: str, limit: int, what: str = "file") -> int:
    """A regular file of at most ``limit`` bytes (by its size on disk); returns its size."""
    st = regular_file(path, source, what)
    if st.st_size > limit:
        raise SpecError(_too_large(what, limit, st.st_size), source=source)
    return st.st_size


def read_bytes(path: Path | str, source: str, limit: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (never more are read)."""
    check_size(path, source, limit, what)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError):
        raise SpecError(f"{what} not found", source=source) from None
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror or exc}", source=source) from None
    try:
        # The path may have been replaced between stat and open: check what was opened.
        why = _kind_refusal(os.fstat(fd).st_mode)
        if why:
            raise SpecError(why, source=source)
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, min(limit + 1 - got, MIB))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror or exc}", source=source) from None
    finally:
        os.close(fd)
    if got > limit:
        raise SpecError(_too_large(what, limit, got), source=source)
    return b"".join(chunks)


def decode_text(raw: bytes, source: str, kind: str = "text") -> str:
    """UTF-8 text without NUL bytes (a byte-order mark is dropped)."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(f"not a UTF-8 {kind} file (byte {exc.start})", source=source) from None
    if "\x00" in text:
        raise SpecError(f"not a {kind} file (NUL byte)", source=source)
    return text


def read_text(
    path: Path | str, source: str, limit: int, what: str = "file", kind: str = "text"
) -> str:
    """A regular UTF-8 text file of at most ``limit`` bytes."""
    return decode_text(read_bytes(path, source, limit, what), source, kind)


def check_text_file(path: Path | str, source: str, limit: int, what: str = "file") -> int:
    """A regular file of at most ``limit`` bytes that decodes as UTF-8 and holds no NUL byte,
    read in 1 MiB chunks (never whole); returns its size."""
    size = check_size(path, source, limit, what)
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror or exc}", source=source) from None
    try:
        why = _kind_refusal(os.fstat(fd).st_mode)
        if why:
            raise SpecError(why, source=source)
        while offset <= limit:
            chunk = os.read(fd, MIB)
            if not chunk:
                break
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                raise SpecError(
                    f"not a UTF-8 text file (byte {offset + exc.start})", source=source
                ) from None
            nul = chunk.find(b"\x00")
            if nul >= 0:
                raise SpecError(f"not a text file (NUL byte at byte {offset + nul})", source=source)
            offset += len(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise SpecError(
                "not a UTF-8 text file (truncated character at the end)", source=source
            ) from None
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror or exc}", source=source) from None
    finally:
        os.close(fd)
    if offset > limit:
        raise SpecError(_too_large(what, limit, offset), source=source)
    return size


# --- JSON -------------------------------------------------------------------------------------

_JSON_TOKENS = re.compile(r'["\\\[\]{}]')


def json_depth_error(text: str, limit: int = MAX_DEPTH) -> int | None:
    """The character offset where ``text`` (JSON) nests deeper than ``limit``, or None.

    A linear scan over brackets outside strings: it costs nothing next to parsing and runs
    before the (recursive) parser does."""
    depth = 0
    in_string = False
    skip_to = -1
    for m in _JSON_TOKENS.finditer(text):
        pos = m.start()
        if pos < skip_to:
            continue
        c = m.group()
        if in_string:
            if c == "\\":
                skip_to = pos + 2  # the escaped character, whatever it is
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > limit:
                return pos
        elif c in "]}":
            depth -= 1
    return None


def _bounded_int(literal: str) -> int:
    digits = len(literal.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _LongInteger(f"an integer of {digits} digits (at most {MAX_INT_DIGITS})")
    return int(literal)


class _LongInteger(ValueError):
    pass


def json_loads(text: str | bytes) -> Any:
    """``json.loads`` with integers of at most :data:`MAX_INT_DIGITS` digits: a longer one is
    a ``json.JSONDecodeError`` (which every reader already turns into its one-line error)."""
    try:
        return json.loads(text, parse_int=_bounded_int)
    except _LongInteger as exc:
        raise json.JSONDecodeError(str(exc), "", 0) from None


def load_json(text: str, source: str) -> Any:
    """``json.loads`` with the depth cap; errors name the line and column."""
    where = json_depth_error(text)
    if where is not None:
        line = text.count("\n", 0, where) + 1
        raise SpecError(
            f"invalid JSON: nested deeper than {MAX_DEPTH} levels",
            source=source,
            field=f"line {line}",
        )
    try:
        return json_loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(
            f"invalid JSON: {exc.msg}",
            source=source,
            field=f"line {exc.lineno}, column {exc.colno}",
        ) from None
    except RecursionError:  # pragma: no cover - the depth scan comes first
        raise SpecError("invalid JSON: nested too deeply", source=source) from None


# --- YAML -------------------------------------------------------------------------------------


class SafeLoader(yaml.SafeLoader):
    """PyYAML's safe loader without aliases, without duplicate keys, and at most
    :data:`MAX_DEPTH` collections deep.

    An alias (``*name``) re-uses a node, so a few hundred bytes of nested aliases expand to
    gigabytes (a "billion laughs" file); a spec has no need for them. A duplicate key would
    silently keep the last value. PyYAML's composer recurses once per level.
    """

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not allowed", event.start_mark
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key; construct_mapping reports it
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {excerpt(repr(key))}", key_node.start_mark
                    )
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: Any) -> Any:
        digits = len(str(node.value).replace("_", "").lstrip("+-"))
        if digits > MAX_INT_DIGITS:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"an integer of {digits} digits (at most {MAX_INT_DIGITS})",
                node.start_mark,
            )
        return super().construct_yaml_int(node)


SafeLoader.add_constructor("tag:yaml.org,2002:int", SafeLoader.construct_yaml_int)


def load_yaml(text: str, source: str) -> Any:
    """Parse YAML with :class:`SafeLoader`; errors name the line and column."""
    try:
        return yaml.load(text, Loader=SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(f"invalid YAML: {excerpt(problem)}", source=source, field=where) from None
    except RecursionError:  # pragma: no cover - the depth cap comes first
        raise SpecError("invalid YAML: nested too deeply", source=source) from None
