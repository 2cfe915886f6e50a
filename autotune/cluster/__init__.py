"""Where engines run: Ray actors pinned to GPU groups (``RayPool``), or in-process (``LocalPool``).

Ray is imported when a RayPool is created, not when this package is.
"""

from autotune.cluster.jobs import Cell, Failed, Finished, Measured, Started, TrialEvent, TrialJob
from autotune.cluster.local import LocalPool, run_job
from autotune.cluster.ray_pool import RayPool

__all__ = [
    "Cell",
    "Failed",
    "Finished",
    "LocalPool",
    "Measured",
    "RayPool",
    "Started",
    "TrialEvent",
    "TrialJob",
    "run_job",
]
