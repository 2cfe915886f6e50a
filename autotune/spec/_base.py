"""The strict pydantic base every spec model derives from, and the strict scalar types specs use.

YAML turns ``true`` into a bool and ``.inf``/``.nan`` into floats; pydantic's lax mode would
accept them as ``1`` or as a timeout that never fires. Spec fields use ``Int`` and ``Float``.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, AllowInfNan, BaseModel, BeforeValidator, ConfigDict, Strict


def _no_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("Input should be a number, not a boolean")
    return value


Int = Annotated[int, Strict()]
"""An integer; ``true``, ``3.0`` and ``"3"`` are refused."""

Bool = Annotated[bool, Strict()]
"""``true`` or ``false``; ``1``, ``"yes"`` and ``"on"`` are refused."""

Float = Annotated[float, BeforeValidator(_no_bool), AllowInfNan(False)]
"""A finite number; booleans, ``.inf`` and ``.nan`` are refused."""


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError(f"holds a NUL byte (at character {value.index(chr(0))})")
    return value


Text = Annotated[str, AfterValidator(_no_nul)]
"""A string without NUL bytes (YAML's ``"\\0"`` escape makes one; engines and files choke)."""


class StrictModel(BaseModel):
    """Unknown keys are errors, values are validated on assignment, and specs are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)
