"""The engine starts behind a level's answer (``recommend --explain``): for the winner and its
rival, each start's median at the level, its runs, and why it ran (the drift check's second
baseline, a confirmation start: :mod:`autotune.search.confirm`)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from autotune.spec.methods import config_id

if TYPE_CHECKING:
    from autotune.evidence.scores import ConfigScore
    from autotune.recommend.choose import Choice
    from autotune.store.records import MeasurementRecord as MeasuredRow

PURPOSE_WORDS = {"drift": "drift check", "confirm": "confirmation"}


@dataclass(frozen=True)
class Start:
    """One engine start of a config at one level."""

    trial_id: int
    purpose: str | None
    median_tok_s: float
    runs: int

    def text(self) -> str:
        why = PURPOSE_WORDS.get(self.purpose or "", "")
        return f"{self.median_tok_s:,.1f} ({self.runs} runs{', ' + why if why else ''})"


def starts(rows: Sequence[MeasuredRow], choice: Choice, s: ConfigScore) -> tuple[Start, ...]:
    """``s``'s engine starts at ``choice``'s level, oldest first."""
    mine = config_id(s.speculative_config)
    by_trial: dict[int, list[MeasuredRow]] = defaultdict(list)
    for r in rows:
        if (
            r.workload == choice.workload
            and r.concurrency == choice.concurrency
            and r.workload_digest == choice.workload_digest
            and config_id(r.speculative_config) == mine
        ):
            by_trial[r.trial_id].append(r)
    return tuple(
        Start(
            trial_id=t,
            purpose=getattr(group[0], "purpose", None),
            median_tok_s=statistics.median(r.output_throughput_tok_s for r in group),
            runs=len(group),
        )
        for t, group in sorted(by_trial.items())
    )


def _rival(choice: Choice) -> ConfigScore | None:
    return choice.runner_up or choice.baseline


def starts_json(rows: Sequence[MeasuredRow], choice: Choice) -> dict[str, Any]:
    """``recommend --json``'s ``starts`` entry of one level."""
    rival = _rival(choice)
    return {
        "concurrency": choice.concurrency,
        "answer": [asdict(x) for x in starts(rows, choice, choice.best)],
        "runner_up": [asdict(x) for x in starts(rows, choice, rival)] if rival else [],
    }


def starts_line(rows: Sequence[MeasuredRow], choice: Choice) -> str:
    """One line per level: the answer's starts, then the runner-up's (the baseline's when the
    runner-up is the answer's only rival)."""
    parts = []
    rival = _rival(choice)
    for role, s in (("", choice.best), ("runner-up ", rival)):
        if s is None:
            continue
        texts = "; ".join(x.text() for x in starts(rows, choice, s))
        parts.append(f"{role}{s.label(prose=False)}: {texts}")
    return f"c={choice.concurrency:<4} " + " | ".join(parts)
