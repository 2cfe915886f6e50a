"""An imported sweep's provenance (``autotune.engine.readers.imported``): the label stored in
place of a vLLM version is the reading reader's own, never guessed from the tool's name (any
tool but vLLM's sweep was labelled ``sglang``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from autotune.engine.readers.sglang_bench import read_sglang_bench
from autotune.engine.readers.vllm_sweep import read_vllm_sweep

DATA = Path(__file__).resolve().parents[1] / "data"

# vLLM's sweep reader parses the sweep with vLLM's own benchmark code
pytestmark = pytest.mark.vllm


def test_each_reader_labels_the_sweep_it_read() -> None:
    sweep = read_vllm_sweep(DATA / "vllm-sweep" / "tiny-ngram", workload="code")
    info = sweep.engine_info()
    assert info.vllm_version == "imported sweep:tiny-ngram"
    assert info.device_name == f"vllm bench sweep serve output {sweep.path}"
    bench = read_sglang_bench(
        DATA / "sglang-bench" / "tiny-eagle3.jsonl", model="tiny:llama", method="eagle3"
    )
    assert bench.engine_info().vllm_version == "imported sglang:tiny-eagle3.jsonl"
    assert bench.engine_info().platform == "imported"


def test_a_third_tool_keeps_its_own_label() -> None:
    sweep = read_vllm_sweep(DATA / "vllm-sweep" / "tiny-ngram", workload="code")
    other = dataclasses.replace(sweep, tool="trtllm bench", label="trtllm")
    assert other.engine_info().vllm_version == "imported trtllm:tiny-ngram"
    assert other.engine_info().device_name.startswith("trtllm bench output ")
