"""``autotune export --speculators``: a study's measured prompt set (and, optionally, the target's
greedy responses) written as vLLM Speculators training data, with the commands that train a
draft on it and the study that measures the draft (:mod:`autotune.export.speculators` builds
each part)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.export import speculators as sx
from autotune.spec.loader import ResolvedStudy

if TYPE_CHECKING:
    from autotune.store import Store


def export_training_data(
    store: Store,
    study: str,
    workload: str,
    output: Path,
    *,
    with_responses: bool = False,
) -> sx.SpeculatorsExport:
    """Write the prompt set ``study`` measured for ``workload`` as vLLM Speculators training
    data in ``output`` (an :class:`autotune.export.SpeculatorsExport` says what was written).

    ``prompts.jsonl`` holds the prompts (``conversations`` rows); with ``with_responses`` the
    study's target runs on the vLLM engine and ``responses.jsonl`` holds its greedy responses
    as speculator-format rows (``input_ids``, ``loss_mask``). ``README.md`` gives the commands
    that train an EAGLE-3 and a DFlash draft with Speculators, and ``measure-draft.yaml`` the
    study that measures them. Every input is checked before anything is written or started.
    """
    from autotune.evidence.cells import Evidence

    record = store.get_study(study)
    resolved = ResolvedStudy.from_json(record.resolved_json)
    sx.check_output(output)
    digest = Evidence.of(store.measurements(study=study, workload=workload)).digest(workload)
    prepared = sx.measured_prompts(resolved, study, workload, [digest] if digest else [])
    prompts = sx.prompt_rows(study, prepared)
    sx.check_prompt_rows(prompts, sx.PROMPTS_FILE)
    responses: list[dict[str, Any]] = []
    if with_responses:
        generations = sx.generate_responses(resolved, prepared)
        responses = sx.response_rows(study, resolved.model, prepared, generations)
        sx.check_speculator_rows(responses, sx.RESPONSES_FILE)
    readme = sx.commands_readme(resolved, study, prepared, output, with_responses=with_responses)
    snippet = sx.study_snippet(resolved, workload, output)
    output.mkdir(parents=True, exist_ok=True)
    files = [output / sx.PROMPTS_FILE]
    sx.write_jsonl(files[0], prompts)
    if responses:
        files.append(output / sx.RESPONSES_FILE)
        sx.write_jsonl(files[-1], responses)
    files += [output / sx.STUDY_FILE, output / sx.README_FILE]
    sx.write_text(files[-2], snippet)
    sx.write_text(files[-1], readme)
    return sx.SpeculatorsExport(
        study=study,
        workload=workload,
        workload_digest=prepared.digest,
        output=output,
        files=tuple(files),
        prompts=len(prompts),
        responses=len(responses),
        response_tokens=sum(sum(r["loss_mask"]) for r in responses),
    )
