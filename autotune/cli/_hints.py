"""The ``next:`` hints a command prints on stderr after it finishes: text rendered from the
values the facade returns (:class:`autotune.api.NextSteps`), so no answering layer writes CLI
text.

Each command names the study (``--study``), so it answers from this one and not from whichever
study is newest, and the store (``--db``) when one was given.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.api import NextSteps


def next_lines(steps: NextSteps, db: str | None = None, password_masked: bool = False) -> list[str]:
    """The commands to run after a study run: look at the report, take the recommendation.

    ``db`` is the store URL as printed (its password masked); ``password_masked`` adds the line
    saying how to pass the real one (``AUTOTUNE_DB``), since a masked URL is no URL to paste."""
    q = shlex.quote  # the lines are commands to paste: every user-given word quoted
    at = "autotune " if db is None else f"autotune --db {q(db)} "
    study = f"--study {q(steps.study)}"
    model = q(steps.model)
    lines = [f"next: {at}report {q(steps.study)} --html {q(steps.study + '.html')}"]
    for ask in steps.questions:
        flag = f" --context {ask.context}" if ask.context else ""
        lines.append(
            f"      {at}recommend --model {model} --workload {q(ask.workload)}{flag} {study} "
            "--explain"
        )
    lines += [
        f"      {at}recommend --model {model} --workload {q(w)} {study} --format dsd"
        for w in steps.per_bucket
    ]
    if password_masked and db is not None:
        lines.append(
            "      (the store URL's password is shown as ***: set AUTOTUNE_DB to the real URL "
            "and drop --db, e.g. export AUTOTUNE_DB='postgresql://USER:PASSWORD@HOST/DB')"
        )
    return lines
