"""Why a vLLM engine failed, in one line: the reason read from the exception and from what its
EngineCore and worker processes printed on stderr (captured by
:class:`~autotune.engine.vllm.stderr.StderrTail` while an engine starts). Used by the in-process engine (:mod:`autotune.engine.vllm`), ``vllm serve``
(:mod:`autotune.engine.server`) and response generation (:mod:`autotune.engine.vllm.generate`); a
failed trial stores this line as its reason.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_NOISE = re.compile(
    r"^(For further information visit|\[type=|Traceback \(most recent call last\)|\^+$|~+$)"
)
_EXCEPTION_LINE = re.compile(r"\b([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$")
_GENERIC = re.compile(
    r"Engine core initialization failed|See root cause above|EngineCore encountered an issue",
    re.IGNORECASE,
)
_WORKER_WRAP = re.compile(r"Worker failed with error '(.+)', please check the stack trace")
_MAX_REASON = 500


def one_line_reason(exc: BaseException, captured: Sequence[str] = ()) -> str:
    """One line saying why ``exc`` happened, for a failed trial's stored reason.

    vLLM raises pydantic ``ValidationError`` for bad configs (the first error's message is the
    reason) and a generic "Engine core initialization failed" when a child process died; then
    the child's last exception line in ``captured`` (its stderr) is the reason.
    """
    reason = _reason_from_exception(exc)
    if not reason or _GENERIC.search(reason):
        child = reason_from_lines(captured)
        if child:
            reason = child
    reason = " ".join((reason or type(exc).__name__).split())
    return reason if len(reason) <= _MAX_REASON else reason[: _MAX_REASON - 1] + "…"


def _reason_from_exception(exc: BaseException) -> str:
    # Wrappers such as vLLM's EngineGenerateError carry no message of their own: prefer the
    # innermost cause that says something specific.
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    reasons = [_reason_of(e) for e in reversed(chain)]
    specific = [r for r in reasons if r and not _GENERIC.search(r)]
    return specific[0] if specific else (reasons[-1] or type(exc).__name__)


def _reason_of(exc: BaseException) -> str | None:
    errors = getattr(exc, "errors", None)
    title = getattr(exc, "title", None)
    if callable(errors) and isinstance(title, str):  # pydantic.ValidationError
        try:
            first = errors()[0]
        except Exception:
            first = None
        if isinstance(first, dict) and first.get("msg"):
            msg = str(first["msg"]).strip().splitlines()[0]
            msg = re.sub(r"^(Value error|Assertion failed), ", "", msg)
            return f"{title}: {msg}"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    lines = [line for line in lines if not _NOISE.match(line)]
    if not lines:
        return None
    return lines[-1] if _EXCEPTION_LINE.match(lines[-1]) else f"{type(exc).__name__}: {lines[-1]}"


def reason_from_lines(lines: Sequence[str]) -> str | None:
    for line in reversed(lines):
        match = _EXCEPTION_LINE.search(line)
        if not match or _GENERIC.search(match.group(2)):
            continue
        name, msg = match.group(1), match.group(2).strip()
        wrapped = _WORKER_WRAP.search(msg)
        if wrapped:
            return f"worker: {wrapped.group(1)}"
        return f"{name}: {msg}"
    return None
