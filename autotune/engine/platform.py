"""Which accelerator this process sees: platform (rocm, cuda, cpu), device name and architecture.

Stored with every measurement as provenance. torch is imported lazily; without torch the answer
is the CPU.
"""

from __future__ import annotations

import functools
import os
import platform as _pyplatform
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CPUINFO = Path("/proc/cpuinfo")
DRM = Path("/sys/class/drm")


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


# --- pinning and device keys (no torch: the driver and the Ray actor call these) ------------


def gpu_runtime() -> str:
    """rocm, cuda or cpu for this host, from its device nodes (``AUTOTUNE_PLATFORM`` overrides).

    Reading ``/dev`` rather than importing torch keeps it cheap and free of GPU runtime
    initialisation, which must not happen in an actor before its visible devices are set.
    """
    forced = os.environ.get("AUTOTUNE_PLATFORM")
    if forced:
        return forced
    if Path("/dev/kfd").exists():
        return "rocm"
    if Path("/dev/nvidiactl").exists() or Path("/dev/nvidia0").exists():
        return "cuda"
    return "cpu"


def visible_devices_env(
    device_ids: Sequence[str], runtime: str, environ: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """The variables that pin an engine process to ``device_ids``: ``(set, unset)``.

    CUDA reads ``CUDA_VISIBLE_DEVICES``. On ROCm the HIP runtime reads ``HIP_VISIBLE_DEVICES``
    as indices *into* what ``ROCR_VISIBLE_DEVICES`` leaves visible, so a ROCR value next to it
    would renumber the devices: it is removed. vLLM's ROCm platform also raises when
    ``CUDA_VISIBLE_DEVICES`` disagrees with ``HIP_VISIBLE_DEVICES`` (``_sync_hip_cuda_env_vars``),
    so it is set to the same ids. Without devices (the CPU) nothing is set.
    """
    if not device_ids:
        return {}, []
    ids = ",".join(device_ids)
    if runtime == "rocm":
        unset = ["ROCR_VISIBLE_DEVICES"] if "ROCR_VISIBLE_DEVICES" in environ else []
        return {"HIP_VISIBLE_DEVICES": ids, "CUDA_VISIBLE_DEVICES": ids}, unset
    return {"CUDA_VISIBLE_DEVICES": ids}, []


_DEVICE_KEY = re.compile(r"\b(mi\d{3}[a-z]?|[abhl]\d{2,3}[a-z]?|gb\d{3})\b")


def device_key(device_name: str) -> str | None:
    """The catalog's short key for a device name: "AMD Instinct MI300X" -> "mi300x",
    "NVIDIA H200" -> "h200"; None when the name has no model number (CPUs)."""
    found = _DEVICE_KEY.search(device_name.lower())
    return found.group(1) if found else None


@functools.cache
def detected_device_key() -> str | None:
    """The catalog key of this host's first GPU (None on a CPU), detected once per process."""
    name = detect_device_name()
    return device_key(name) if name else None


def detect_device_name(runtime: str | None = None) -> str | None:
    """The first GPU's product name without importing torch, or None (CPU, or not found).

    ``AUTOTUNE_DEVICE`` overrides (e.g. "AMD Instinct MI355X" on a login node). NVIDIA asks
    ``nvidia-smi``; ROCm reads amdgpu's ``product_name`` in sysfs, then ``amd-smi``.
    """
    forced = os.environ.get("AUTOTUNE_DEVICE")
    if forced:
        return forced
    runtime = runtime or gpu_runtime()
    if runtime == "cuda":
        out = _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
        return out.splitlines()[0].strip() if out.strip() else None
    if runtime == "rocm":
        for f in sorted(DRM.glob("card*/device/product_name")):
            try:
                name = f.read_text(errors="replace").strip()
            except OSError:
                continue
            if name:
                return name
        out = _run(["amd-smi", "static", "--asic"])
        m = re.search(r"MARKET_NAME:\s*(.+)", out)
        return m.group(1).strip() if m else None
    return None


def _run(cmd: list[str]) -> str:
    if shutil.which(cmd[0]) is None:
        return ""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
