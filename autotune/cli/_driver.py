"""The study driver's process plumbing (``study run``/``resume``): how SIGTERM, SIGHUP and
SIGINT stop a run, how an interrupted run exits, and which library logs reach the terminal.

The commands in :mod:`autotune.cli.study` call these around :func:`autotune.api.run_study`;
nothing here knows about studies.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM during `study run`: unwinds like Ctrl-C, so the same cleanup runs."""


@contextlib.contextmanager
def stop_on_signals() -> Iterator[list[int]]:
    """Make SIGTERM, SIGHUP and SIGINT stop the run while the block runs, whatever the process
    inherited: SIGTERM (what timeout, Slurm and Kubernetes send) and SIGHUP (a closed terminal,
    a killed tmux) raise :class:`Terminated`
    and is noted in the list it yields; SIGINT (Ctrl-C) raises KeyboardInterrupt. Both unwind
    through the tuner's cleanup. The Ray pool keeps the SIGTERM handler over Ray's own
    (autotune.cluster.ray_pool), which would print a C++ stack dump.

    SIGINT is set explicitly because Python keeps an inherited ``SIG_IGN``: a shell without job
    control (a CI script, ``cmd &`` in ``sh -c``) starts background commands with SIGINT
    ignored, and a driver started that way ignored Ctrl-C to its process group and ran its
    study to the end (exit 0). ``study run`` is stopped on request however it was started,
    as it already was for SIGTERM."""
    import threading

    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def raise_terminated(signum: int, frame: Any) -> None:
        # Once is enough: a second SIGTERM (or SIGHUP) during the cleanup must not cut it short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        received.append(signum)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    # SIGHUP (the terminal closed, tmux killed) stops the run as SIGTERM does: its default
    # killed the driver at once, leaving the study "running" until the lease lapsed.
    previous_hup = signal.signal(signal.SIGHUP, raise_terminated)
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGHUP, previous_hup)


def interruption(exc: KeyboardInterrupt, received: list[int]) -> tuple[str, int]:
    """What stopped a run that unwound with ``exc`` (``received``: the signals
    :func:`stop_on_signals` noted) and the exit code a process stopped that way returns:
    ("SIGHUP", 129), ("SIGTERM", 143) or ("Ctrl-C", 130)."""
    # Ray may re-raise the interrupt as a plain KeyboardInterrupt: the handler's list says.
    sigterm = isinstance(exc, Terminated) or bool(received)
    if signal.SIGHUP in received:  # a closed terminal, a killed tmux
        return "SIGHUP", 129
    return ("SIGTERM", 143) if sigterm else ("Ctrl-C", 130)


def quiet_libraries() -> None:
    """Keep library chatter (Ray's start-up and token notices, transformers/Triton warnings)
    out of the output; --verbose lets it through."""
    import logging
    import os
    import warnings

    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for name in ("transformers", "vllm", "torch", "triton", "optuna", "urllib3"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # ray.init() resets the "ray" logger's level and handlers, so a level set here would not
    # hold; a filter on the loggers that print its start-up and token-authentication notices
    # does (a logger's own filters run before any handler).
    for name in (
        "ray",
        "ray._private.worker",
        "ray._private.services",
        "ray._private.authentication.authentication_token_setup",
    ):
        logger = logging.getLogger(name)
        if _errors_only not in logger.filters:
            logger.addFilter(_errors_only)


def _errors_only(record: Any) -> bool:
    """A logging filter: let errors through, drop notices."""
    import logging

    return bool(record.levelno >= logging.ERROR)
