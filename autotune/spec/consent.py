"""Consent for what a study file may make the engine run or store: engine args that name code
to load (read from vLLM's ``EngineArgs`` fields that take a class or a module path), secret-looking
engine args and environment names (refused, never stored), and the environment allowlist.

:func:`autotune.spec.loader.resolve_study` calls :func:`check_engine_args` and :func:`check_env`;
each refusal is one :class:`~autotune.errors.SpecError` line naming the file and the field.
"""

from __future__ import annotations

import json
import re
from typing import Any

from autotune.errors import SpecError
from autotune.spec.engine_facts import EngineFacts
from autotune.spec.reading import excerpt

MAX_ENGINE_ARGS_JSON = 64 * 1024
"""Largest ``model.engine_args`` (as JSON) a study may hold: it is stored with every row."""

CODE_ENGINE_ARGS = frozenset(
    {
        # typed ``type[...]`` in vLLM's EngineArgs: a class, given as its import path
        "distributed_executor_backend",
        "scheduler_cls",
        "logits_processors",
        # ``*_cls``: a class by its qualified name, imported in every worker
        "worker_cls",
        "worker_extension_cls",
        # ``*_plugin``: a module or file imported to register a parser or processor
        "reasoning_parser_plugin",
        "io_processor_plugin",
        # mappings whose values name code: architecture -> model class; the KV connector's
        # ``kv_connector_module_path``
        "model_class_overrides",
        "kv_transfer_config",
    }
)
"""``model.engine_args`` of vLLM 0.32's ``EngineArgs`` (``vllm/engine/arg_utils.py``) that make
the engine import code named by the study: a field typed ``type[...]``, one named ``*_cls`` or
``*_plugin``, and the mappings that name classes or modules. They need the study's consent
(``trust_remote_code: true``); ``tests/unit/test_spec_consent.py`` derives the list from the
installed vLLM by those rules and pins it."""

SECRET_ENGINE_ARGS = frozenset({"hf_token"})
"""Engine args whose string value is a credential: never stored (``true`` uses the login's)."""

_SECRET_NAME = re.compile(r"SECRET|PASSWORD|PASSWD|CREDENTIAL|(^|_)(TOKEN|KEY)$|_TOKEN_|_KEY_")
"""Names of environment variables that hold secrets (``HF_TOKEN``, ``S3_SECRET_ACCESS_KEY``,
``OPENAI_API_KEY``, ``PGPASSWORD``)."""


def secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret."""
    return bool(_SECRET_NAME.search(name.upper()))


CODE_LOADING_ENV = frozenset(
    {
        # where checkpoints (and the code that comes with them) are fetched from or found
        "HF_ENDPOINT",
        "HF_HUB_CACHE",
        "HF_HOME",
        "LD_PRELOAD",
        "LD_AUDIT",
        "LD_LIBRARY_PATH",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONUSERBASE",
        "PYTHONEXECUTABLE",
        "PYTHONINSPECT",
        "PYTHONPLATLIBDIR",
        "BASH_ENV",
        "ENV",
        "GCONV_PATH",
        "OMP_TOOL_LIBRARIES",
        "CUDA_INJECTION64_PATH",
        "NCCL_NET_PLUGIN",
        "CUDA_HOME",
        "VLLM_PLUGINS",
    }
)
"""Environment variables known to make the engine process load code from elsewhere (named in
the consent message; anything off :data:`SAFE_ENV` needs the same consent)."""

VLLM_CODE_LOADING_ENV = frozenset(
    {
        "VLLM_PLUGINS",  # imports the named entry points
        "VLLM_NCCL_SO_PATH",  # dlopen()s the library
        "VLLM_CUDART_SO_PATH",
        "VLLM_CUDA_COMPATIBILITY_PATH",  # prepended to the library search path
        "VLLM_NCCL_INCLUDE_PATH",  # headers compiled into kernels
        "VLLM_LOGGING_CONFIG_PATH",  # logging.config.dictConfig instantiates any class named
        "VLLM_RUST_FRONTEND_PATH",  # an executable
        "VLLM_CACHE_ROOT",  # compiled graphs and kernels are loaded back from it
        "VLLM_CONFIG_ROOT",
        "VLLM_XLA_CACHE_PATH",
        "VLLM_ALLOW_INSECURE_SERIALIZATION",  # pickle between processes
        "VLLM_USE_BYTECODE_HOOK",
        "VLLM_MODEL_REDIRECT_PATH",  # swaps the checkpoint loaded for a name
    }
)
"""Variables of vLLM's ``vllm/envs.py`` that load code or code-bearing files."""

SAFE_ENV = frozenset(
    {
        # threads and memory
        "OMP_NUM_THREADS",
        "OMP_WAIT_POLICY",
        "OMP_PROC_BIND",
        "OMP_PLACES",
        "OMP_DYNAMIC",
        "OMP_SCHEDULE",
        "OMP_STACKSIZE",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "KMP_AFFINITY",
        "KMP_BLOCKTIME",
        "KMP_SETTINGS",
        "MALLOC_ARENA_MAX",
        "TOKENIZERS_PARALLELISM",
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_HIP_ALLOC_CONF",
        "PYTORCH_ALLOC_CONF",
        # devices
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "CUDA_LAUNCH_BLOCKING",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "HSA_NO_SCRATCH_RECLAIM",
        "HSA_FORCE_FINE_GRAIN_PCIE",
        "NCCL_DEBUG",
        "NCCL_SOCKET_IFNAME",
        "NCCL_IB_DISABLE",
        "NCCL_P2P_DISABLE",
        "NCCL_P2P_LEVEL",
        "NCCL_CUMEM_ENABLE",
        "NCCL_MIN_NCHANNELS",
        "RCCL_MSCCL_ENABLE",
        "GLOO_SOCKET_IFNAME",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        # Hugging Face: where checkpoints are and whether to download
        "HF_HUB_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "HF_HUB_DISABLE_PROGRESS_BARS",
        "HF_HUB_DISABLE_TELEMETRY",
        "HF_HUB_ENABLE_HF_TRANSFER",
        "HF_HUB_DOWNLOAD_TIMEOUT",
        "HF_HUB_ETAG_TIMEOUT",
        "TRANSFORMERS_OFFLINE",
        "TRANSFORMERS_VERBOSITY",
        # logging, locale, time
        "TZ",
        "LANG",
        "LC_ALL",
        "NO_COLOR",
        "FORCE_COLOR",
        "RAY_DEDUP_LOGS",
        "TORCH_LOGS",
        "TORCHDYNAMO_VERBOSE",
    }
)
"""Variables (besides vLLM's own) that change no code the engine runs, only how it runs."""


def safe_env(name: str, engine: EngineFacts | None = None) -> bool:
    """Whether ``name`` may be set in ``model.env`` without consent: one of :data:`SAFE_ENV`,
    or a variable the installed vLLM reads (``engine.env_names``) that loads no code."""
    if name in CODE_LOADING_ENV or name in VLLM_CODE_LOADING_ENV:
        return False
    known = (engine if engine is not None else EngineFacts()).env_names
    return name in SAFE_ENV or name in known()


def check_engine_args(
    args: dict[str, Any],
    source: str,
    engine: EngineFacts | None = None,
    *,
    trusted: bool = False,
) -> None:
    """Refuse engine args autotune sets itself, ``trust_remote_code`` (a top-level consent),
    args that name code to import (:data:`CODE_ENGINE_ARGS`) unless ``trusted`` (the study's
    ``trust_remote_code: true``), a credential (:data:`SECRET_ENGINE_ARGS`: it would be
    stored with every row), values that are not plain JSON, and names that are not fields of
    vLLM's ``EngineArgs`` (as ``engine`` knows them)."""
    engine = engine if engine is not None else EngineFacts()
    reserved = engine.reserved_engine_args
    for key, value in args.items():
        field = f"model.engine_args.{excerpt(key)}"
        if key in CODE_ENGINE_ARGS and not trusted:
            raise SpecError(
                "names code for the engine to import; set trust_remote_code: true at the top "
                "level of the study to allow it",
                source=source,
                field=field,
            )
        if key in SECRET_ENGINE_ARGS and isinstance(value, str):
            raise SpecError(
                "a credential: autotune stores engine args with every measurement; log in "
                "(huggingface-cli login) or export HF_TOKEN where the engine runs instead",
                source=source,
                field=field,
            )
        if key in reserved:
            raise SpecError(f"set by autotune itself ({reserved[key]})", source=source, field=field)
        if key == "trust_remote_code":
            raise SpecError(
                "set trust_remote_code: true at the top level of the study, not in engine_args",
                source=source,
                field=field,
            )
        if not _plain_json(value):
            raise SpecError(
                "must be a string, number, boolean, null, or a list/mapping of those",
                source=source,
                field=field,
            )
    if len(json.dumps(args, default=str)) > MAX_ENGINE_ARGS_JSON:
        raise SpecError(
            f"larger than {MAX_ENGINE_ARGS_JSON // 1024} KiB",
            source=source,
            field="model.engine_args",
        )
    known = engine.engine_arg_names() if args else None  # importing vLLM takes seconds
    if known is not None:
        for key in args:
            if key not in known:
                raise SpecError(
                    "not a field of vLLM's EngineArgs",
                    source=source,
                    field=f"model.engine_args.{key}",
                )


def _plain_json(value: Any, depth: int = 0) -> bool:
    if depth > 8:
        return False
    if value is None or isinstance(value, str | bool | int):
        return True
    if isinstance(value, float):
        return value == value and value not in (float("inf"), float("-inf"))
    if isinstance(value, list):
        return all(_plain_json(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain_json(v, depth + 1) for k, v in value.items())
    return False


def check_env(
    env: dict[str, str], source: str, *, trusted: bool, engine: EngineFacts | None = None
) -> None:
    """Only variables known to be safe (:func:`safe_env`) pass without consent; any other needs
    the study's own ``trust_remote_code: true`` (a catalog entry's consent covers the model's
    code, not the engine's environment)."""
    for key, value in env.items():
        if not key or "=" in key or "\x00" in key or not key.isprintable():
            raise SpecError(
                "not a valid environment variable name", source=source, field="model.env"
            )
        if "\x00" in value:
            raise SpecError("NUL byte in the value", source=source, field=f"model.env.{key}")
        if secret_name(key):  # consent or not: the study's env is stored with every row
            raise SpecError(
                f"{excerpt(key)} looks like a secret, and a study's env is stored with every "
                "measurement; export it in the environment the engine runs in instead",
                source=source,
                field=f"model.env.{excerpt(key)}",
            )
        if trusted or safe_env(key, engine):
            continue
        why = (
            "makes the engine load code from elsewhere"
            if key in CODE_LOADING_ENV or key in VLLM_CODE_LOADING_ENV
            else "is not one autotune knows to be safe (it may make the engine load code)"
        )
        raise SpecError(
            f"{key} {why}; set trust_remote_code: true at the top level of the study to allow it",
            source=source,
            field=f"model.env.{excerpt(key)}",
        )
