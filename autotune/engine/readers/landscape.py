"""Landscape files: a recorded sweep, one CSV row per measured point (format: docs/landscapes.md).

``model,workload,method,draft,num_speculative_tokens,concurrency,repeat,
output_throughput_tok_s,mean_acceptance_length,acceptance_per_pos,engine_start_s,measure_s``

``method = none`` with ``num_speculative_tokens = 0`` is the baseline; ``acceptance_per_pos`` is
a ``;``-separated list of a_i (empty for the baseline). An optional column, ``params``, holds
the config's knobs besides N (autotune.spec.knobs) as a JSON object; empty means none, and a file
without the column names every config by (method, draft, N) alone. Optional columns
``p99_tpot_ms``, ``p99_ttft_ms`` and ``p99_itl_ms`` (vLLM's benchmark spelling) carry the run's
p99 latencies, so a replayed study can be searched and chosen under a latency SLO; the earlier
spelling ``tpot_ms_p99`` ... is read as an alias, so older landscapes still replay.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import SpecError
from autotune.spec.knobs import check_value, params_key
from autotune.spec.reading import (
    MAX_LANDSCAPE_BYTES,
    excerpt,
    json_depth_error,
    read_text,
)

COLUMNS = (
    "model",
    "workload",
    "method",
    "draft",
    "num_speculative_tokens",
    "concurrency",
    "repeat",
    "output_throughput_tok_s",
    "mean_acceptance_length",
    "acceptance_per_pos",
    "engine_start_s",
    "measure_s",
)
"""The columns every landscape has, in the order the writer writes them."""

PARAMS = "params"
"""The optional column of knobs (a JSON object); the writer adds it when a config has knobs."""

Config = tuple[str, str | None, int, str]
"""(method, draft, num_speculative_tokens, knobs as canonical JSON or ""): one engine config."""


LATENCY_COLUMNS = ("p99_tpot_ms", "p99_ttft_ms", "p99_itl_ms")
"""Optional: a recorded run's p99 latencies in ms, spelled as vLLM's benchmark JSON spells them."""

OLD_COLUMNS = {
    "tpot_ms_p99": "p99_tpot_ms",
    "ttft_ms_p99": "p99_ttft_ms",
    "itl_ms_p99": "p99_itl_ms",
}
"""Earlier spellings of the latency columns, read as aliases (a file with both is refused)."""


@dataclass(frozen=True)
class LandscapePoint:
    model: str
    workload: str
    method: str
    draft: str | None
    num_speculative_tokens: int
    concurrency: int
    repeat: int
    output_throughput_tok_s: float
    mean_acceptance_length: float | None
    acceptance_per_pos: tuple[float, ...]
    engine_start_s: float
    measure_s: float
    params: tuple[tuple[str, Any], ...] = ()
    """The config's knobs besides N, sorted by name (empty: none)."""
    p99_tpot_ms: float | None = None
    p99_ttft_ms: float | None = None
    p99_itl_ms: float | None = None
    """Optional latency columns (None where the landscape has none)."""

    @property
    def config(self) -> Config:
        return (self.method, self.draft, self.num_speculative_tokens, params_key(dict(self.params)))


def read_landscape(path: Path) -> list[LandscapePoint]:
    """Parse and check a landscape CSV (bounded: ``autotune.spec.reading``); errors name the
    file, the row and the column. A row that repeats another's (config, workload,
    concurrency, repeat) is refused with both row numbers."""
    source = str(path)
    text = read_text(path, source, MAX_LANDSCAPE_BYTES, what="landscape file", kind="CSV")
    points: list[LandscapePoint] = []
    lines = [line for line in text.splitlines(keepends=True) if not line.startswith("#")]
    reader = csv.DictReader(lines)
    try:
        reader.fieldnames = _new_spelling(list(reader.fieldnames or ()), source)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise SpecError(f"missing column(s) {', '.join(missing)}", source=source)
        seen: dict[tuple[Any, ...], int] = {}
        for i, row in enumerate(reader, start=2):
            try:
                point = _parse(row)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise SpecError(
                    excerpt(str(exc) or "bad value", 200), source=source, field=f"row {i}"
                ) from None
            cell = (point.config, point.workload, point.concurrency, point.repeat)
            if cell in seen:
                raise SpecError(
                    f"repeats row {seen[cell]} (same config, workload, concurrency and repeat)",
                    source=source,
                    field=f"row {i}",
                )
            seen[cell] = i
            points.append(point)
    except csv.Error as exc:
        raise SpecError(f"not a valid CSV: {exc}", source=source) from None
    if not points:
        raise SpecError("no rows", source=source)
    if len({p.model for p in points}) != 1:
        raise SpecError("a landscape holds one model", source=source, field="model")
    return points


def _new_spelling(header: list[str], source: str) -> list[str]:
    """The header with the latency columns' earlier spelling read as vLLM's."""
    renamed = [OLD_COLUMNS.get(c, c) for c in header]
    for old, new in OLD_COLUMNS.items():
        if old in header and new in header:
            raise SpecError(f"has both {old} and {new} (the same column)", source=source)
    return renamed


MAX_VALUE = 1e9
"""Largest number a landscape cell holds (seconds, tok/s, ms): a replayed sleep of a recorded
time x --replay-time-scale stays within what ``time.sleep`` takes."""


def _finite(row: dict[str, str], column: str, *, positive: bool = False) -> float:
    value = float(row[column])
    if not math.isfinite(value) or value < 0 or (positive and value == 0) or value > MAX_VALUE:
        raise ValueError(
            f"{column} must be a finite {'positive' if positive else 'non-negative'} number "
            f"of at most {MAX_VALUE:g}"
        )
    return value


def _parse(row: dict[str, str]) -> LandscapePoint:
    method = row["method"].strip()
    n = int(row["num_speculative_tokens"])
    if (method == "none") != (n == 0):
        raise ValueError("the baseline is method=none with num_speculative_tokens=0")
    if not 0 <= n <= 64:
        raise ValueError("num_speculative_tokens must lie in 0..64")
    concurrency, repeat = int(row["concurrency"]), int(row["repeat"])
    if not 1 <= concurrency <= 65_536 or not 0 <= repeat <= 1000:
        raise ValueError("concurrency must lie in 1..65536 and repeat in 0..1000")
    per_pos = tuple(float(x) for x in row["acceptance_per_pos"].split(";") if x.strip())
    if any(not 0.0 <= a <= 1.0 for a in per_pos):
        raise ValueError("acceptance_per_pos values must lie in [0, 1]")
    params = _params(row.get(PARAMS) or "", method)
    tput = _finite(row, "output_throughput_tok_s", positive=True)
    al = row["mean_acceptance_length"].strip()
    mean_al = float(al) if al else None
    if mean_al is not None and not (math.isfinite(mean_al) and 0 < mean_al <= 65):
        raise ValueError("mean_acceptance_length must be a finite number in (0, 65]")
    return LandscapePoint(
        model=row["model"].strip(),
        workload=row["workload"].strip(),
        method=method,
        draft=row["draft"].strip() or None,
        num_speculative_tokens=n,
        concurrency=concurrency,
        repeat=repeat,
        output_throughput_tok_s=tput,
        mean_acceptance_length=mean_al,
        acceptance_per_pos=per_pos,
        engine_start_s=_finite(row, "engine_start_s"),
        measure_s=_finite(row, "measure_s", positive=True),
        params=params,
        **{c: _finite(row, c) for c in LATENCY_COLUMNS if (row.get(c) or "").strip()},
    )


def _params(text: str, method: str) -> tuple[tuple[str, Any], ...]:
    """The ``params`` cell: empty, or a JSON object of knobs valid for the method."""
    if not text.strip():
        return ()
    if json_depth_error(text, 8) is not None:
        raise ValueError("params must be a JSON object of knob values (nested too deeply)")
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError("params must be a JSON object (or empty)") from None
    if not isinstance(value, dict):
        raise ValueError("params must be a JSON object (or empty)")
    if method == "none" and value:
        raise ValueError("the baseline has no params")
    for name, v in value.items():
        why = check_value(name, v, method)
        if why:
            raise ValueError(f"params: {why}")
    return tuple(sorted(value.items()))


def write_landscape(path: Path, points: Iterable[LandscapePoint]) -> int:
    """Write points as a landscape CSV; returns the number of rows. The ``params`` column is
    written only when some config has knobs, and the latency columns only when some point has
    one (empty where a point has none), so files without any stay as they were."""
    points = list(points)
    with_params = any(p.params for p in points)
    latency = [c for c in LATENCY_COLUMNS if any(getattr(p, c) is not None for p in points)]
    n = 0
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS + ((PARAMS,) if with_params else ()) + tuple(latency))
        for p in points:
            extra = [params_key(dict(p.params))] if with_params else []
            extra += ["" if (v := getattr(p, c)) is None else f"{v:.3f}" for c in latency]
            writer.writerow(
                [
                    p.model,
                    p.workload,
                    p.method,
                    p.draft or "",
                    p.num_speculative_tokens,
                    p.concurrency,
                    p.repeat,
                    f"{p.output_throughput_tok_s:.3f}",
                    "" if p.mean_acceptance_length is None else f"{p.mean_acceptance_length:.4f}",
                    ";".join(f"{a:.4f}" for a in p.acceptance_per_pos),
                    f"{p.engine_start_s:.2f}",
                    f"{p.measure_s:.3f}",
                    *extra,
                ]
            )
            n += 1
    return n


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def configs(points: Sequence[LandscapePoint]) -> list[Config]:
    """The distinct engine configs of a landscape, baseline first."""
    return sorted({p.config for p in points}, key=lambda c: (c[0] != "none", c[0], c[3], c[2]))


def has_params(path: Path) -> bool:
    """Whether a landscape file has the ``params`` column (read from its header line)."""
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if not line.startswith("#"):
                return PARAMS in next(csv.reader([line]), [])
    return False
