"""The stderr of vLLM's child processes while an engine starts: :class:`StderrTail` routes file
descriptor 2 through a pipe and keeps the last lines, which
:func:`~autotune.engine.vllm.failures.one_line_reason` reads a failed start's reason from.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections import deque

logger = logging.getLogger(__name__)


class StderrTail:
    """Routes file descriptor 2 through a pipe while an engine starts, keeping the last lines.

    vLLM's EngineCore and worker processes inherit this process's stderr and print there why
    they died; the exception this process gets only says "Engine core initialization failed".
    The children keep the pipe for their whole life, so a daemon thread forwards it to the real
    stderr until they exit; this process's own fd 2 is restored as soon as the start is over.
    """

    def __init__(self, max_lines: int = 400) -> None:
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._lock = threading.Lock()
        self._saved: int | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            sys.stderr.flush()
            saved = os.dup(2)
            forward = os.dup(2)
            read_end, write_end = os.pipe()
            os.dup2(write_end, 2)
            os.close(write_end)
        except OSError:
            logger.debug("cannot capture stderr; start failures will be less specific")
            return
        self._saved = saved
        self._thread = threading.Thread(
            target=self._pump, args=(read_end, forward), name="autotune-vllm-stderr", daemon=True
        )
        self._thread.start()

    def release(self, wait_s: float = 0.0) -> None:
        """Give this process its stderr back; wait up to ``wait_s`` for the children's output."""
        if self._saved is None:
            return
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._saved = None
        if wait_s > 0 and self._thread is not None:
            self._thread.join(wait_s)

    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)

    def _pump(self, read_end: int, forward: int) -> None:
        pending = b""
        forwarding = True
        try:
            while chunk := os.read(read_end, 65536):
                if forwarding:
                    try:
                        os.write(forward, chunk)
                    except OSError:
                        forwarding = False  # keep draining, or the children would block
                pending += chunk
                *complete, pending = pending.split(b"\n")
                if complete:
                    with self._lock:
                        self._lines.extend(x.decode(errors="replace") for x in complete)
                if len(pending) > 65536:
                    pending = pending[-65536:]
        finally:
            if pending:
                with self._lock:
                    self._lines.append(pending.decode(errors="replace"))
            os.close(read_end)
            os.close(forward)
