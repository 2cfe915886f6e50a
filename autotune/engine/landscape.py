"""Landscape files: a recorded sweep, one CSV row per measured point (format: docs/landscapes.md).

``model,workload,method,draft,num_speculative_tokens,concurrency,repeat,
output_throughput_tok_s,mean_acceptance_length,acceptance_per_pos,engine_start_s,measure_s``

``method = none`` with ``num_speculative_tokens = 0`` is the baseline; ``acceptance_per_pos`` is
a ``;``-separated list of a_i (empty for the baseline).
"""

from __future__ import annotations

import csv
import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import SpecError

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

    @property
    def config(self) -> tuple[str, str | None, int]:
        return (self.method, self.draft, self.num_speculative_tokens)


def read_landscape(path: Path) -> list[LandscapePoint]:
    """Parse and check a landscape CSV; errors name the file, the row and the column."""
    source = str(path)
    try:
        handle = path.open(newline="")
    except OSError:
        raise SpecError("landscape file not found", source=source) from None
    points: list[LandscapePoint] = []
    with handle:
        reader = csv.DictReader(line for line in handle if not line.startswith("#"))
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise SpecError(f"missing column(s) {', '.join(missing)}", source=source)
        for i, row in enumerate(reader, start=2):
            try:
                points.append(_parse(row))
            except (ValueError, KeyError) as exc:
                raise SpecError(str(exc), source=source, field=f"row {i}") from None
    if not points:
        raise SpecError("no rows", source=source)
    if len({p.model for p in points}) != 1:
        raise SpecError("a landscape holds one model", source=source, field="model")
    return points


def _parse(row: dict[str, str]) -> LandscapePoint:
    method = row["method"].strip()
    n = int(row["num_speculative_tokens"])
    if (method == "none") != (n == 0):
        raise ValueError("the baseline is method=none with num_speculative_tokens=0")
    per_pos = tuple(float(x) for x in row["acceptance_per_pos"].split(";") if x.strip())
    if any(not 0.0 <= a <= 1.0 for a in per_pos):
        raise ValueError("acceptance_per_pos values must lie in [0, 1]")
    tput = float(row["output_throughput_tok_s"])
    if not tput > 0 or math.isinf(tput):
        raise ValueError("output_throughput_tok_s must be positive")
    al = row["mean_acceptance_length"].strip()
    return LandscapePoint(
        model=row["model"].strip(),
        workload=row["workload"].strip(),
        method=method,
        draft=row["draft"].strip() or None,
        num_speculative_tokens=n,
        concurrency=int(row["concurrency"]),
        repeat=int(row["repeat"]),
        output_throughput_tok_s=tput,
        mean_acceptance_length=float(al) if al else None,
        acceptance_per_pos=per_pos,
        engine_start_s=float(row["engine_start_s"]),
        measure_s=float(row["measure_s"]),
    )


def write_landscape(path: Path, points: Iterable[LandscapePoint]) -> int:
    """Write points as a landscape CSV; returns the number of rows."""
    n = 0
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for p in points:
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
                ]
            )
            n += 1
    return n


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def configs(points: Sequence[LandscapePoint]) -> list[tuple[str, str | None, int]]:
    """The distinct engine configs of a landscape, baseline first."""
    return sorted({p.config for p in points}, key=lambda c: (c[0] != "none", c[0], c[2]))
