"""Which accelerator this process sees: platform (rocm, cuda, cpu), device name and architecture.

Stored with every measurement as provenance. torch is imported lazily; without torch the answer
is the CPU.
"""

from __future__ import annotations

import platform as _pyplatform
from pathlib import Path
from typing import Any

CPUINFO = Path("/proc/cpuinfo")


def detect_platform() -> tuple[str, str, str]:
    """Return ``(platform, device_name, device_arch)`` for device 0 of this process.

    ``platform`` is "rocm", "cuda" or "cpu"; ``device_arch`` is e.g. "gfx942" (ROCm), "sm_90"
    (CUDA) or "cpu". Querying a GPU initialises the CUDA/HIP runtime in this process, so an
    engine should call this after its worker processes have started.
    """
    try:
        import torch
    except ImportError:
        return "cpu", cpu_model_name(), "cpu"
    return _detect_with_torch(torch)


def _detect_with_torch(torch: Any) -> tuple[str, str, str]:
    if not torch.cuda.is_available():
        return "cpu", cpu_model_name(), "cpu"
    props = torch.cuda.get_device_properties(0)
    if getattr(torch.version, "hip", None):
        # gcnArchName carries feature flags after the target: "gfx942:sramecc+:xnack-".
        arch = str(getattr(props, "gcnArchName", "") or "").split(":")[0] or "unknown"
        return "rocm", str(props.name), arch
    return "cuda", str(props.name), f"sm_{props.major}{props.minor}"


def cpu_model_name() -> str:
    """The CPU model as the kernel names it, else what Python's ``platform`` module knows."""
    try:
        for line in CPUINFO.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model name", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return _pyplatform.processor() or _pyplatform.machine() or "unknown cpu"
