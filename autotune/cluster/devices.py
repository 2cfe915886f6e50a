"""The devices this machine offers engines, counted without Ray or torch: GPUs and CPU cores.

Read from the device nodes the drivers create (``/dev/nvidia<N>``; ROCm's KFD topology) and
narrowed by the visible-devices variables, so a dry run answers in milliseconds and never
initialises a GPU runtime. The Ray pool counts a cluster's GPUs itself once it is connected.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from autotune.engine.platform import gpu_runtime

DEV = Path("/dev")
KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")


@dataclass(frozen=True)
class Devices:
    """What one machine can give engines."""

    runtime: str
    """rocm, cuda or cpu (autotune.engine.platform.gpu_runtime)."""
    gpus: int
    """GPUs this process may use (0 on the CPU)."""
    cores: int
    """CPU cores this process may use (its affinity mask)."""

    def engines_at_once(self, tensor_parallel_size: int) -> int:
        """Engines of ``tensor_parallel_size`` devices that fit side by side (0: none fits);
        on the CPU one, as the local Ray pool runs them, if the cores cover its ranks."""
        if self.gpus:
            return self.gpus // tensor_parallel_size
        return 1 if self.cores >= tensor_parallel_size else 0

    def line(self) -> str:
        if self.gpus:
            return f"{self.gpus} {self.runtime.upper()} GPU{'s' if self.gpus != 1 else ''}"
        return f"no GPU; {self.cores} CPU core{'s' if self.cores != 1 else ''}"


def local_devices() -> Devices:
    """This machine's GPUs and cores, as this process may use them."""
    runtime = gpu_runtime()
    cores = len(os.sched_getaffinity(0))
    if runtime == "cpu":
        return Devices("cpu", 0, cores)
    found = _rocm_gpus() if runtime == "rocm" else _cuda_gpus()
    visible = _visible(runtime)
    gpus = found if visible is None else min(found, visible)
    return Devices(runtime if gpus else "cpu", gpus, cores)


def _cuda_gpus() -> int:
    return sum(1 for p in DEV.glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name))


def _rocm_gpus() -> int:
    """KFD topology nodes with compute units: the GPUs (CPU nodes report ``simd_count 0``)."""
    count = 0
    for props in KFD_NODES.glob("*/properties"):
        try:
            text = props.read_text(errors="replace")
        except OSError:
            continue
        m = re.search(r"^simd_count\s+(\d+)", text, re.MULTILINE)
        count += bool(m and int(m.group(1)) > 0)
    return count


def _visible(runtime: str) -> int | None:
    """How many devices the visible-devices variable leaves (None: it is not set)."""
    names = ["CUDA_VISIBLE_DEVICES"]
    if runtime == "rocm":
        names = ["HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"]
    for name in names:
        value = os.environ.get(name)
        if value is not None:
            return len([v for v in value.split(",") if v.strip() and v.strip() != "-1"])
    return None
