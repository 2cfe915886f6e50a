"""The engine contract: what every :class:`autotune.engine.Engine` backend (``replay``, ``vllm``,
``vllm-serve``) promises the pools and the tuner, as checks a test runs against a real engine.

- **start**: ``start`` returns an :class:`EngineInfo` naming the engine's version and device,
  with a non-negative start time; a config the backend cannot start is an ``EngineError`` whose
  message is one line (no traceback).
- **measure**: a measurement echoes its cell (workload, concurrency, repeat), ran for a positive
  time at no more than the level's concurrency, and its throughput is its output tokens over
  its time.
- **counters consistent**: the baseline drafts nothing; a drafting config accepts at most what
  it drafted, at most N tokens per draft, the per-position counts add up to the accepted
  tokens and never grow with the position.
- **failure reported**: a measurement the engine cannot take ends the trial job as a
  :class:`autotune.cluster.jobs.Failed` event with its one-line reason (what the tuner stores
  as a failed trial), and the engine still measures afterwards.
- **teardown**: after ``stop`` (idempotent) the engine measures nothing: ``EngineError``.

The started engines are the caller's (a test session shares one per backend, since starting a
real engine is the expensive part), so :class:`Borrowed` lends a started engine to a trial job
without the job's own start and stop.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autotune.cluster.jobs import Cell, Failed, Started, TrialJob
from autotune.cluster.local import run_job
from autotune.engine._base import (
    Engine,
    EngineConfig,
    EngineInfo,
    Measurement,
    MeasureSettings,
    PreparedWorkload,
)
from autotune.errors import EngineError


class ContractError(AssertionError):
    """An engine broke its contract (the message says which promise and how)."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ContractError(message)


def one_line(reason: str) -> None:
    """A failure's reason as the CLI prints it: one non-empty line, no traceback."""
    _require(bool(reason.strip()), "a failure without a reason")
    _require("\n" not in reason.strip(), f"a reason of more than one line: {reason!r}")
    _require("Traceback" not in reason, f"a traceback as the reason: {reason!r}")


def check_started(info: EngineInfo) -> None:
    """What ``start`` returned names the engine and its device, with its start time."""
    _require(
        math.isfinite(info.engine_start_s) and info.engine_start_s >= 0,
        f"engine_start_s {info.engine_start_s!r} is not a non-negative time",
    )
    for field in ("vllm_version", "device_arch", "platform"):
        _require(bool(getattr(info, field)), f"EngineInfo.{field} is empty")


def check_measurement(
    m: Measurement,
    config: EngineConfig,
    workload: PreparedWorkload,
    concurrency: int,
    repeat: int,
) -> None:
    """One measurement of ``config``: its cell, its time and throughput, its counters."""
    _require(
        (m.workload, m.concurrency, m.repeat) == (workload.name, concurrency, repeat),
        f"measured {(m.workload, m.concurrency, m.repeat)} for cell "
        f"{(workload.name, concurrency, repeat)}",
    )
    _require(m.measure_s > 0 and m.output_throughput_tok_s > 0, f"nothing measured: {m}")
    _require(
        1 <= m.max_inflight <= concurrency,
        f"max_inflight {m.max_inflight} outside 1..{concurrency}",
    )
    rate = m.num_output_tokens / m.measure_s
    _require(
        math.isclose(m.output_throughput_tok_s, rate, rel_tol=0.01, abs_tol=0.5),
        f"throughput {m.output_throughput_tok_s} tok/s is not {m.num_output_tokens} tokens / "
        f"{m.measure_s} s",
    )
    check_counters(m, 0 if config.is_baseline else config.num_speculative_tokens)


def check_counters(m: Measurement, n: int) -> None:
    """The spec-decode counters of one measurement of a config drafting ``n`` tokens (0: the
    baseline)."""
    if n == 0:
        _require(
            (m.num_drafts, m.num_draft_tokens, m.num_accepted_tokens, m.accepted_per_pos)
            == (0, 0, 0, ()),
            f"the baseline drafted: {m.num_drafts} drafts, {m.num_draft_tokens} draft tokens, "
            f"{m.num_accepted_tokens} accepted, per position {m.accepted_per_pos}",
        )
        return
    _require(m.num_drafts > 0, "a drafting config made no drafts")
    _require(
        0 <= m.num_accepted_tokens <= m.num_draft_tokens <= n * m.num_drafts,
        f"accepted {m.num_accepted_tokens} <= drafted {m.num_draft_tokens} <= N x drafts "
        f"{n} x {m.num_drafts} does not hold",
    )
    _require(
        len(m.accepted_per_pos) <= n and sum(m.accepted_per_pos) == m.num_accepted_tokens,
        f"per-position counts {m.accepted_per_pos} do not add up to {m.num_accepted_tokens} "
        f"accepted tokens over at most {n} positions",
    )
    pairs = zip(m.accepted_per_pos, m.accepted_per_pos[1:], strict=False)
    _require(
        all(a >= b for a, b in pairs),
        f"accepted per position grows with the position: {m.accepted_per_pos}",
    )


class Borrowed(Engine):
    """A started engine lent to a trial job: ``start`` hands back its :class:`EngineInfo` (for
    the config it runs only), ``stop`` leaves it running for its owner."""

    def __init__(self, engine: Engine, config: EngineConfig, info: EngineInfo):
        self._engine, self._config, self._info = engine, config, info

    def start(self, config: EngineConfig) -> EngineInfo:
        if config.key() != self._config.key():
            raise EngineError(f"this engine runs {self._config.label()}, not {config.label()}")
        return self._info

    def measure(
        self,
        workload: PreparedWorkload,
        concurrency: int,
        repeat: int,
        settings: MeasureSettings,
    ) -> Measurement:
        return self._engine.measure(workload, concurrency, repeat, settings)

    def stop(self) -> None:
        pass


@dataclass(frozen=True)
class Backend:
    """One backend under contract: a started engine and how to make it fail."""

    name: str
    engine: Engine
    config: EngineConfig
    """What ``engine`` was started with."""
    info: EngineInfo
    """What its ``start`` returned."""
    workload: PreparedWorkload
    settings: MeasureSettings
    failing: tuple[PreparedWorkload, MeasureSettings]
    """A measurement this engine cannot take (a workload it has nothing for, or a time limit
    it cannot meet)."""
    unstartable: EngineConfig
    """A config the backend cannot start."""
    fresh: Callable[[], Engine]
    """A new, unstarted engine of the backend."""
    levels: Sequence[int] = (1, 2)


def check_backend(backend: Backend) -> list[Measurement]:
    """Every promise but teardown (the owner's, :func:`check_stopped`) against ``backend``;
    returns the measurements taken."""
    check_started(backend.info)
    measured = []
    for repeat, concurrency in enumerate(backend.levels):
        m = backend.engine.measure(backend.workload, concurrency, repeat, backend.settings)
        check_measurement(m, backend.config, backend.workload, concurrency, repeat)
        measured.append(m)
    check_failure_reported(backend)
    again = backend.engine.measure(backend.workload, 1, 0, backend.settings)
    check_measurement(again, backend.config, backend.workload, 1, 0)
    check_start_failure(backend.fresh(), backend.unstartable)
    return measured


def check_failure_reported(backend: Backend) -> str:
    """A trial job whose cell cannot be measured ends in ``Failed`` with a one-line reason,
    after its ``Started``. Returns the reason."""
    workload, settings = backend.failing
    job = TrialJob(
        trial_id=1,
        config=backend.config,
        workloads=[workload],
        cells=[Cell(workload.name, 1, 0)],
        settings=settings,
        warmup_requests=0,
    )
    events = run_job(Borrowed(backend.engine, backend.config, backend.info), job)
    kinds = [type(e).__name__ for e in events]
    _require(kinds == ["Started", "Failed"], f"events of a failing job: {kinds}")
    started, failed = events
    assert isinstance(started, Started) and isinstance(failed, Failed)
    _require(started.info == backend.info, "the job's Started does not carry the engine's info")
    one_line(failed.reason)
    return failed.reason


def check_start_failure(engine: Engine, config: EngineConfig) -> str:
    """``start`` of a config the backend cannot run: a one-line ``EngineError``; the engine is
    left stopped (``stop`` is safe, ``measure`` refuses). Returns the message."""
    try:
        engine.start(config)
    except EngineError as exc:
        message = str(exc)
    else:
        engine.stop()
        raise ContractError(f"{config.label()} started, though it cannot")
    one_line(message)
    engine.stop()
    return message


def check_stopped(engine: Engine, workload: PreparedWorkload) -> None:
    """After ``stop`` (called twice: idempotent) the engine measures nothing."""
    engine.stop()
    engine.stop()
    try:
        engine.measure(workload, 1, 0, MeasureSettings(1))
    except EngineError as exc:
        one_line(str(exc))
        return
    raise ContractError("a stopped engine still measured")
