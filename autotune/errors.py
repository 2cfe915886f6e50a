"""The error types every layer raises, so the CLI can map each to one line and an exit code."""

from __future__ import annotations


class AutotuneError(Exception):
    """Base class: an error the CLI reports in one line without a traceback."""

    exit_code = 1


MAX_ERROR_CHARS = 400
"""Longest SpecError line: whatever a message quotes from a file, the error stays one short line
(and quotes no more of the file than that)."""


def _short_line(text: str) -> str:
    flat = "".join(c if c.isprintable() else " " if c in "\n\r\t" else "?" for c in text)
    return flat if len(flat) <= MAX_ERROR_CHARS else flat[: MAX_ERROR_CHARS - 3] + "..."


class SpecError(AutotuneError):
    """Bad user input (a YAML file, a flag, a name): exit code 2, nothing written.

    ``source`` names the file (or flag) and ``field`` the dotted path inside it, so the message
    reads ``studies/x.yaml: methods[1].num_speculative_tokens: must be <= 15``.
    """

    exit_code = 2

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        self.reason = message
        parts = [p for p in (source, field) if p]
        super().__init__(_short_line(": ".join([*parts, message])))


class NotFoundError(AutotuneError):
    """A study, workload or model the user named does not exist (exit code 2)."""

    exit_code = 2


class NoResultError(AutotuneError):
    """The store holds nothing to answer the question (e.g. recommend before any measurement)."""

    exit_code = 1


class StoreError(AutotuneError):
    """A database operation failed; the transaction was rolled back."""

    exit_code = 1


class CorruptStoreError(StoreError):
    """The store file is damaged or is not a database at all (exit code 2, nothing written)."""

    exit_code = 2


class StudyBusyError(AutotuneError):
    """Another live driver holds the study's lease (exit code 2); ``--wait`` waits for it."""

    exit_code = 2


class EngineError(AutotuneError):
    """An engine failed to start or to measure; the tuner records it as a failed trial."""

    exit_code = 1


class LeaseLostError(StoreError):
    """This driver's lease on its study was taken over by another driver (it missed its
    heartbeats for a whole TTL: suspended, or cut off from the database). Every write of a
    driver checks its lease in the write's own transaction, so a driver that lost it wrote
    nothing after the takeover; it stops its engines and exits with this one line."""

    exit_code = 1
