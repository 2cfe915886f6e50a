"""Strict pydantic specs of studies/*.yaml and workloads/*.yaml, the method rules and the catalog."""

from autotune.spec.loader import (
    ResolvedMethod,
    ResolvedStudy,
    ResolvedWorkload,
    find_workload,
    list_workload_names,
    load_study_file,
    load_workload,
    resolve_study,
)
from autotune.spec.methods import BASELINE, METHODS, MethodRule
from autotune.spec.study import MethodSpec, ModelSpec, NRange, StudySpec
from autotune.spec.workload import WorkloadSpec

__all__ = [
    "BASELINE",
    "METHODS",
    "MethodRule",
    "MethodSpec",
    "ModelSpec",
    "NRange",
    "ResolvedMethod",
    "ResolvedStudy",
    "ResolvedWorkload",
    "StudySpec",
    "WorkloadSpec",
    "find_workload",
    "list_workload_names",
    "load_study_file",
    "load_workload",
    "resolve_study",
]
