"""The study driver's signal plumbing (autotune/cli/_driver.py): SIGTERM and SIGHUP unwind as
:class:`Terminated`, SIGINT as KeyboardInterrupt even when inherited ignored, each exits with the
code a process stopped that way returns, and the handlers before the run come back after it."""

from __future__ import annotations

import os
import signal

import pytest

from autotune.cli._driver import Terminated, interruption, stop_on_signals


@pytest.mark.parametrize(
    ("signum", "raised", "expected"),
    [
        (signal.SIGTERM, Terminated, ("SIGTERM", 143)),
        (signal.SIGHUP, Terminated, ("SIGHUP", 129)),
        (signal.SIGINT, KeyboardInterrupt, ("Ctrl-C", 130)),
    ],
)
def test_a_signal_stops_the_block_and_says_how(
    signum: signal.Signals, raised: type[BaseException], expected: tuple[str, int]
) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell without job control starts it
    try:
        with pytest.raises(raised) as caught, stop_on_signals() as received:
            os.kill(os.getpid(), signum)
        assert received == ([] if signum == signal.SIGINT else [signum])
        assert interruption(caught.value, received) == expected
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # restored
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_a_plain_interrupt_after_sigterm_is_still_sigterm() -> None:
    """Ray may re-raise the interrupt as a plain KeyboardInterrupt: the list says SIGTERM."""
    assert interruption(KeyboardInterrupt(), [signal.SIGTERM]) == ("SIGTERM", 143)
    assert interruption(KeyboardInterrupt(), []) == ("Ctrl-C", 130)
