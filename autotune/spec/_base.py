"""The strict pydantic base every spec model derives from."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Unknown keys are errors, values are validated on assignment, and specs are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)
