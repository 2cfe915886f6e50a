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
    rate, normalised = api.parse_request_rate(request_rate)
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
