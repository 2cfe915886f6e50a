"""An engine config's environment (``model.env``) applied to this process while a vLLM engine
runs, and this process's own values put back afterwards: vLLM and the child processes it starts
read the environment when the engine starts, so the variables are set in ``os.environ`` itself.
Used by the in-process engine (:mod:`autotune.engine.vllm.engine`, for the engine's lifetime)
and response generation (:mod:`autotune.engine.vllm.generate`, around one ``LLM``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping


class AppliedEnv:
    """Variables set in ``os.environ`` by :meth:`apply`, each put back by :meth:`restore` to the
    value it had before (or removed, if it had none)."""

    def __init__(self) -> None:
        self._saved: dict[str, str | None] = {}

    def apply(self, env: Mapping[str, str]) -> None:
        """Set ``env`` in this process's environment (restoring an earlier :meth:`apply` first)."""
        self.restore()
        self._saved = {key: os.environ.get(key) for key in env}
        os.environ.update(env)

    def restore(self) -> None:
        """Put back what the last :meth:`apply` changed; a no-op when nothing is applied."""
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved = {}


@contextlib.contextmanager
def applied_env(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` set in this process's environment inside the ``with`` block, restored after."""
    applied = AppliedEnv()
    applied.apply(env)
    try:
        yield
    finally:
        applied.restore()
