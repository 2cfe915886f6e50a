"""Consent in the study file (autotune.spec.consent, issue #33 item 5): engine args that name
code to import need ``trust_remote_code: true``; the list is vLLM's own, derived from the
installed ``EngineArgs`` and pinned here; no secret (an env name that says so, ``hf_token``)
reaches the store; ``HF_ENDPOINT``/``HF_HUB_CACHE``/``HF_HOME`` need consent."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.errors import SpecError
from autotune.spec.consent import (
    CODE_ENGINE_ARGS,
    check_engine_args,
    check_env,
    secret_name,
)


@pytest.mark.parametrize("key", sorted(CODE_ENGINE_ARGS))
def test_an_engine_arg_that_names_code_needs_consent(key: str) -> None:
    with pytest.raises(SpecError) as refused:
        check_engine_args({key: "evil.module.Class"}, "s.yaml")
    line = str(refused.value)
    assert line.startswith(f"s.yaml: model.engine_args.{key}: names code for the engine")
    assert "trust_remote_code: true" in line
    check_engine_args({key: "evil.module.Class"}, "s.yaml", trusted=True)


def test_engine_args_that_name_no_code_pass() -> None:
    check_engine_args({"max_model_len": 2048, "enforce_eager": True, "hf_token": True}, "s")


def test_a_credential_in_engine_args_is_refused_even_with_consent() -> None:
    with pytest.raises(SpecError, match=r"model.engine_args.hf_token: a credential"):
        check_engine_args({"hf_token": "hf_abc"}, "s.yaml", trusted=True)


@pytest.mark.parametrize(
    "name",
    [
        "S3_SECRET_ACCESS_KEY",
        "HF_TOKEN",
        "OPENAI_API_KEY",
        "PGPASSWORD",
        "AWS_SESSION_TOKEN",
        "MY_CREDENTIALS_FILE",
        "API_KEY_ID",
    ],
)
def test_a_secret_looking_env_name_is_refused_even_with_consent(name: str) -> None:
    assert secret_name(name)
    with pytest.raises(SpecError) as refused:
        check_env({name: "s3cr3t"}, "s.yaml", trusted=True)
    line = str(refused.value)
    assert f"model.env.{name}: {name} looks like a secret" in line and "s3cr3t" not in line


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "OMP_NUM_THREADS", "KMP_AFFINITY"])
def test_ordinary_names_are_not_secrets(name: str) -> None:
    assert not secret_name(name)


@pytest.mark.parametrize("name", ["HF_ENDPOINT", "HF_HUB_CACHE", "HF_HOME"])
def test_where_checkpoints_come_from_needs_consent(name: str) -> None:
    with pytest.raises(SpecError, match=f"model.env.{name}: {name} makes the engine load code"):
        check_env({name: "https://example.invalid"}, "s.yaml", trusted=False)
    check_env({name: "/models"}, "s.yaml", trusted=True)


def _derived_from_vllm() -> set[str]:
    """The rules of CODE_ENGINE_ARGS applied to the installed vLLM's EngineArgs."""
    from vllm.engine.arg_utils import EngineArgs

    found = set()
    for f in dataclasses.fields(EngineArgs):
        annotation = str(f.type)
        if "type[" in annotation or f.name.endswith(("_cls", "_plugin")):
            found.add(f.name)
    # mappings whose values name code (read in vllm/config/model.py and kv_transfer.py)
    found |= {"model_class_overrides", "kv_transfer_config"}
    return found


@pytest.mark.vllm
def test_the_code_naming_engine_args_are_the_installed_vllms() -> None:
    pytest.importorskip("vllm")
    from vllm.config.kv_transfer import KVTransferConfig
    from vllm.engine.arg_utils import EngineArgs

    names = {f.name for f in dataclasses.fields(EngineArgs)}
    assert names >= CODE_ENGINE_ARGS  # every one is an EngineArgs field
    assert _derived_from_vllm() == set(CODE_ENGINE_ARGS)
    assert "kv_connector_module_path" in {f.name for f in dataclasses.fields(KVTransferConfig)}
