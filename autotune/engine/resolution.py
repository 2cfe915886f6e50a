"""The engine's side of resolving a study: the facts spec's resolution is given
(:func:`engine_facts`: this host's platform and device, the installed vLLM's names) and the check
that needs the engine's own reader (:func:`check_study`: a replayed landscape's rows).

``study create`` passes the first to ``autotune.spec.loader.resolve_study`` and runs the second
on its result (``autotune.search.space.validate_study``), before anything is stored.
"""

from __future__ import annotations

from types import MappingProxyType

from autotune.errors import SpecError
from autotune.spec.engine_facts import EngineFacts
from autotune.spec.loader import ResolvedStudy, landscape_path
from autotune.spec.reading import excerpt


def engine_facts(platform: str | None = None) -> EngineFacts:
    """What autotune's vLLM engine and this host tell a study's resolution. ``platform``
    stands in for the host's (``AUTOTUNE_PLATFORM`` does the same from the environment)."""
    from autotune.engine.platform import detected_device_key, gpu_runtime
    from autotune.engine.vllm.args import RESERVED_ENGINE_ARGS
    from autotune.engine.vllm.checks import vllm_engine_arg_names, vllm_env_names

    return EngineFacts(
        platform=platform or gpu_runtime(),
        device_key=detected_device_key,
        reserved_engine_args=MappingProxyType(dict(RESERVED_ENGINE_ARGS)),
        engine_arg_names=vllm_engine_arg_names,
        env_names=vllm_env_names,
    )


def check_study(resolved: ResolvedStudy, source: str) -> None:
    """Refuse a replay study whose landscape is not one (every row is read: a bad file would
    leave a trial stuck running) or lacks one of the study's workloads (SpecError naming the
    file and the field). Other engines' studies have nothing to check here."""
    engine = resolved.spec.engine
    if engine.kind != "replay":
        return
    from autotune.engine.readers.landscape import read_landscape

    # The path as the study file gives it: the reader's errors name the file so.
    recorded = {p.workload for p in read_landscape(landscape_path(engine.landscape, source))}
    for i, name in enumerate(resolved.spec.workloads):
        if name not in recorded:
            raise SpecError(
                f"{excerpt(name)!r} is not a workload of the landscape "
                f"(it has: {excerpt(', '.join(sorted(recorded)), 200)})",
                source=source,
                field=f"workloads.{i}",
            )
