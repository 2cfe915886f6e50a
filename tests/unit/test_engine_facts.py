"""spec.engine_facts: a study is resolved against the engine facts it is given (autotune's own
from ``autotune.engine.resolution.engine_facts``), asked only when the study needs them."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.engine.resolution import engine_facts
from autotune.engine.vllm.args import RESERVED_ENGINE_ARGS
from autotune.errors import SpecError
from autotune.spec.engine_facts import EngineFacts
from autotune.spec.loader import ResolvedStudy, resolve_study, validate
from autotune.spec.study import StudySpec

FACTS = EngineFacts(
    reserved_engine_args={"speculative_config": "comes from the methods"},
    engine_arg_names=lambda: frozenset({"max_model_len", "speculative_config"}),
    env_names=lambda: frozenset({"VLLM_SOMETHING"}),
)


def _resolve(engine: EngineFacts | None, **model: Any) -> ResolvedStudy:
    data = {"name": "s", "model": {"name": "tiny", **model}, "workloads": ["code"]}
    return resolve_study(validate(StudySpec, data, "s.yaml"), "s.yaml", engine=engine)


def test_engine_args_are_checked_against_the_facts() -> None:
    assert _resolve(FACTS, engine_args={"max_model_len": 512}).engine_args["max_model_len"] == 512
    with pytest.raises(SpecError, match="not a field of vLLM's EngineArgs") as exc:
        _resolve(FACTS, engine_args={"max_modl_len": 512})
    assert exc.value.field == "model.engine_args.max_modl_len"
    with pytest.raises(SpecError, match=r"set by autotune itself \(comes from the methods\)"):
        _resolve(FACTS, engine_args={"speculative_config": {}})


def test_the_engines_env_names_pass_without_consent() -> None:
    assert _resolve(FACTS, env={"VLLM_SOMETHING": "1"}).env == {"VLLM_SOMETHING": "1"}
    with pytest.raises(SpecError, match="set trust_remote_code: true") as exc:
        _resolve(None, env={"VLLM_SOMETHING": "1"})  # from the YAML alone: not known safe
    assert exc.value.field == "model.env.VLLM_SOMETHING"


def test_the_lookups_are_asked_only_when_needed() -> None:
    """A study without engine args, and with only variables known to be safe, never asks for
    vLLM's names (importing vLLM takes seconds)."""

    def boom() -> Any:
        raise AssertionError("asked")

    lazy = EngineFacts(engine_arg_names=boom, env_names=boom)
    assert _resolve(lazy, env={"OMP_NUM_THREADS": "2"}).model_alias == "tiny"


def test_autotunes_facts_are_its_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_PLATFORM", "rocm")
    facts = engine_facts()
    assert facts.platform == "rocm" and engine_facts("cuda").platform == "cuda"
    assert dict(facts.reserved_engine_args) == RESERVED_ENGINE_ARGS
