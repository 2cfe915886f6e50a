"""Hand-off of a study's data to the tools that train drafts (``autotune export
--speculators-data``).

One concept: what a study measured, written in another tool's training-data format, so a draft
can be trained for a model that has none (or only a poor one) and then measured by a new study.
It lives apart from :mod:`autotune.report` because it may start the study's target on an engine
(to generate the target's own responses), which no report does.
"""

from autotune.export.speculators import (
    SPECULATORS_COMMIT,
    SpeculatorsExport,
    check_prompt_rows,
    check_speculator_rows,
)

__all__ = [
    "SPECULATORS_COMMIT",
    "SpeculatorsExport",
    "check_prompt_rows",
    "check_speculator_rows",
]
