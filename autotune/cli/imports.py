"""``autotune import``: a sweep vLLM's or SGLang's own benchmark already ran, into a study or a
landscape (:func:`autotune.api.import_sweep`)."""

from __future__ import annotations

from pathlib import Path

import click

from autotune.cli._common import NAME, Context, note, output_file, pass_ctx


@click.command("import")
@click.option(
    "--vllm-sweep",
    type=click.Path(path_type=Path),
    default=None,
    metavar="DIR",
    help="The output folder of `vllm bench sweep serve` (an experiment folder, or the "
    "--output-dir above several): every combination with a summary.json.",
)
@click.option(
    "--sglang-bench",
    type=click.Path(path_type=Path),
    default=None,
    metavar="FILE",
    help="The JSONL SGLang's scripts/playground/bench_speculative.py wrote (--output).",
)
@click.option(
    "--name", type=NAME, default=None, help="Study name [default: the folder or file name]."
)
@click.option(
    "--landscape",
    type=output_file(),
    default=None,
    metavar="OUT",
    help="Write a landscape CSV (docs/landscapes.md) instead of a study (vLLM sweeps only).",
)
@click.option("--force", is_flag=True, help="With --landscape: overwrite an existing OUT.")
@click.option("--replace", is_flag=True, help="Replace an existing study of that name.")
@click.option(
    "--workload",
    default=None,
    metavar="NAME",
    help="The workload's name [vLLM: the bench override dataset_name, which is required without "
    "it; SGLang: bench_speculative, the script's own prompts].",
)
@click.option(
    "--model",
    default=None,
    metavar="MODEL",
    help="The target (HF id, path or catalog alias) [vLLM: the runs' model_id; SGLang: "
    "required, the file does not record it].",
)
@click.option(
    "--method",
    default=None,
    metavar="METHOD",
    help="SGLang only, required: the vLLM method the runs' --speculative-algorithm is (eagle3 "
    "for EAGLE3, mtp for NEXTN, draft_model for STANDALONE, ...).",
)
@click.option(
    "--draft",
    default=None,
    metavar="MODEL",
    help="SGLang only: the draft checkpoint (--speculative-draft-model-path).",
)
@pass_ctx
def import_(
    ctx: Context,
    vllm_sweep: Path | None,
    sglang_bench: Path | None,
    name: str | None,
    landscape: Path | None,
    force: bool,
    replace: bool,
    workload: str | None,
    model: str | None,
    method: str | None,
    draft: str | None,
) -> None:
    """Read a sweep you already ran into a study, so recommend, report and --format dsd work on it.

    --vllm-sweep DIR: each run's serve override speculative_config (method, model,
    num_speculative_tokens, knobs) is its engine config, none is the baseline; max_concurrency
    is the concurrency level, run_number the repeat; output_throughput, median/p99 TTFT, TPOT,
    ITL and the spec-decode counters (acceptance length and per position) are the
    measurement. --sglang-bench FILE: batch_size is the concurrency, steps is N (steps 0 the
    baseline; topk > 1 is refused), acc_length the acceptance length, speed × batch_size the
    output throughput. The study records the tool and the path; report and recommend name
    them. Bad input (not a sweep, a line that does not parse, a missing key) is one line
    naming the file and field, exit 2, nothing written.

    \b
    Example:
      # from the root of the autotune checkout, which ships this vLLM sweep:
      autotune import --vllm-sweep tests/data/vllm-sweep/tiny-ngram --workload code --name my-sweep
      autotune recommend --model tiny --workload code --study my-sweep --explain
      autotune import --vllm-sweep tests/data/vllm-sweep/tiny-ngram --workload code --landscape exp1.csv
      # your own SGLang bench_speculative.py output:
      autotune import --sglang-bench output.jsonl --model meta-llama/Llama-3.1-8B-Instruct \\
          --method eagle3 --draft yuhuili/EAGLE3-LLaMA3.1-Instruct-8B
    """
    from autotune import api

    done = api.import_sweep(
        None if landscape is not None else ctx.store(),
        vllm_sweep=vllm_sweep,
        sglang_bench=sglang_bench,
        name=name,
        landscape=landscape,
        force=force,
        replace=replace,
        workload=workload,
        model=model,
        method=method,
        draft=draft,
    )
    configs = len({r.config.key() for r in done.sweep.runs})
    what = f"{len(done.sweep.runs)} runs of {configs} engine configs from {done.sweep.tool} output {done.sweep.path}"
    if done.study is None:
        note(f"wrote {done.rows} landscape rows ({what}) to {done.landscape}")
        note(f"next: autotune study create --landscape {done.landscape} --name NAME")
        return
    note(f"imported {what} as study {done.study.name!r} (status {done.study.status})")
    note(f"next: autotune report {done.study.name}")
    model = done.study.model_alias or done.study.model
    workload = done.sweep.runs[0].measurement.workload
    note(
        f"      autotune recommend --model {model} --workload {workload} --study {done.study.name}"
    )
