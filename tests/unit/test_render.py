"""Rendering: exactly the JSON vLLM accepts, shell-quoted serve lines, gap-free DSD ranges."""

from __future__ import annotations

import importlib.util
import itertools
import json
import shlex

import pytest

from autotune.engine.vllm.checks import check_speculative_config
from autotune.recommend import render
from autotune.spec.methods import speculative_config

CONFIGS = [
    speculative_config("eagle3", 4, "lightseekorg/kimi-k2.5-eagle3", {}),
    speculative_config("ngram", 3, None, {"prompt_lookup_min": 2, "prompt_lookup_max": 4}),
    speculative_config("mtp", 2, None, {}),
    speculative_config("dflash", 7, "z-lab/Kimi-K2.5-DFlash", {}),
]


def test_json_is_the_config_itself():
    config = CONFIGS[1]
    assert json.loads(render.speculative_json(config)) == config
    assert render.speculative_json(None) == "null"


def test_serve_args_round_trip_through_the_shell():
    line = render.serve_args(
        "moonshotai/Kimi-K2.5",
        CONFIGS[0],
        tensor_parallel_size=8,
        engine_args={"trust_remote_code": True, "max_model_len": 32768},
    )
    argv = shlex.split(line)
    assert argv[:3] == ["vllm", "serve", "moonshotai/Kimi-K2.5"]
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"
    assert "--trust-remote-code" in argv and argv[argv.index("--max-model-len") + 1] == "32768"
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == CONFIGS[0]


@pytest.mark.parametrize(
    ("levels", "table"),
    [
        ([(1, 4), (8, 3), (32, 1), (64, 0)], [[1, 1, 4], [2, 8, 3], [9, 32, 1], [33, 64, 0]]),
        ([(1, 3), (4, 3), (16, 0)], [[1, 4, 3], [5, 16, 0]]),
        ([(8, 2)], [[1, 8, 2]]),
    ],
)
def test_dsd_ranges_cover_without_gaps(levels, table):
    got = render.ranges(levels)
    assert got == table
    assert got[0][0] == 1 and got[-1][1] == max(c for c, _ in levels)
    for a, b in itertools.pairwise(got):
        assert b[0] == a[1] + 1


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c["method"])
def test_vllm_accepts_rendered_configs(config):
    assert check_speculative_config(config) == []
    dsd = {**config, "num_speculative_tokens_per_batch_size": render.ranges([(1, 3), (8, 0)])}
    assert check_speculative_config(dsd) == []


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_vllm_refuses_bad_configs():
    assert check_speculative_config({"method": "lookahead"})
    assert check_speculative_config({"method": "ngram", "gamma": 3})
    assert check_speculative_config({"num_speculative_tokens_per_batch_size": [[1, "x"]]})
