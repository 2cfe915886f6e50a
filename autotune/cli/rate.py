"""``recommend --request-rate R``: the answer at an arrival rate (autotune.recommend.rate),
printed as ``recommend`` prints a config: the --speculative-config JSON, a note on stderr."""

from __future__ import annotations

import json
from collections.abc import Sequence

import click

from autotune.cli._common import Context, echo_json, note
from autotune.errors import SpecError


def print_rate_answer(
    ctx: Context,
    model: str,
    workload: str,
    request_rate: str,
    study: str | None,
    as_json: bool,
    clash: Sequence[str],
) -> None:
    """Answer ``recommend --request-rate``; ``clash`` names the options it cannot combine with."""
    from autotune import api

    if clash:
        raise SpecError(
            f"answers by latency at an arrival rate, as --format json; drop {', '.join(clash)}",
            source="--request-rate",
        )
    rate, normalised = parse_rates(request_rate)
    if normalised:
        note(f"note: {normalised}")
    selected, answer = api.recommend_at_rate(ctx.store(), model, workload, rate, study)
    for line in selected.notes:
        note(f"note: {line}")
    note(f"note: {answer.line()}")
    if as_json:
        echo_json({"study": selected.study.name, **answer.to_json()})
    else:
        click.echo(json.dumps(answer.best.speculative_config))


def parse_rates(text: str) -> tuple[float | dict[float, float], str | None]:
    """``--request-rate``: one rate (``4``) or a mix of rates with shares of time
    (``0.5:0.2,2:0.5,8:0.3``, as ``--traffic`` gives concurrencies), shares normalised as
    there. Raises SpecError (exit 2, one line) on anything else."""
    import math

    from autotune.cli._common import parse_shares

    bad = (
        "is not a rate R > 0 in requests/s or a mix RATE:SHARE,... with shares > 0 "
        "(e.g. 4, or 0.5:0.2,2:0.5,8:0.3)"
    )

    def rate(value: str) -> float:
        r = float(value)
        if not (math.isfinite(r) and r > 0):
            raise ValueError(value)
        return r

    if ":" in text:
        return parse_shares(text, rate, source="--request-rate", name="rate", bad=bad)
    try:
        return rate(text), None
    except ValueError:
        raise SpecError(f"{text.strip()!r} {bad}", source="--request-rate") from None
