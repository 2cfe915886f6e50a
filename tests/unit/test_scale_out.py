"""Scale-out pieces that need neither Ray nor vLLM: the pinning variables per platform, the CPU
core split for TP ranks, the catalog's per-device TP keys, the executor vLLM gets for TP > 1, and
the provenance columns of the store, the CSV and ``study show``."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import api
from autotune.cluster.ray_pool import cpu_bind_groups
from autotune.engine._base import EngineConfig, EngineInfo
from autotune.engine.platform import device_key, visible_devices_env
from autotune.engine.vllm.args import build_engine_kwargs
from autotune.errors import AutotuneError, EngineError
from autotune.spec.catalog import tensor_parallel_for
from autotune.store import Store


def test_cuda_pins_with_cuda_visible_devices():
    put, drop = visible_devices_env(["2", "3"], "cuda", {})
    assert put == {"CUDA_VISIBLE_DEVICES": "2,3"} and drop == []


def test_rocm_pins_with_hip_and_drops_a_conflicting_rocr():
    put, drop = visible_devices_env(["5"], "rocm", {"ROCR_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"})
    assert put == {"HIP_VISIBLE_DEVICES": "5", "CUDA_VISIBLE_DEVICES": "5"}
    assert drop == ["ROCR_VISIBLE_DEVICES"]
    assert visible_devices_env(["5"], "rocm", {})[1] == []


def test_no_devices_sets_nothing():
    assert visible_devices_env([], "cuda", {"CUDA_VISIBLE_DEVICES": "0"}) == ({}, [])


def test_cpu_bind_groups_one_share_per_rank():
    assert cpu_bind_groups([0, 1], 2) == "0|1"
    assert cpu_bind_groups([0, 1, 2, 3, 5], 2) == "0,1|2,3"
    with pytest.raises(AutotuneError, match="needs 4 cores"):
        cpu_bind_groups([0, 1], 4)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("AMD Instinct MI300X", "mi300x"),
        ("AMD Instinct MI355X", "mi355x"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("Intel(R) Xeon(R) Processor", None),
    ],
)
def test_device_key(name: str, key: str | None):
    assert device_key(name) == key


def test_tensor_parallel_for_prefers_the_device_then_the_platform():
    tp = {"default": 8, "rocm": 4, "mi355x": 2, "h200": 1}
    assert tensor_parallel_for(tp, "rocm", "mi355x") == 2
    assert tensor_parallel_for(tp, "rocm", "mi300x") == 4
    assert tensor_parallel_for(tp, "cuda", "h200") == 1
    assert tensor_parallel_for(tp, "cuda", None) == 8


def test_study_resolution_reads_the_detected_device(monkeypatch: pytest.MonkeyPatch):
    """The loader asks the catalog with the detected device's key (AUTOTUNE_DEVICE stands in for
    a GPU here): an entry with a per-device value gets it."""
    from autotune.engine import platform
    from autotune.engine.resolution import engine_facts
    from autotune.spec.loader import _catalog_tp

    monkeypatch.setenv("AUTOTUNE_PLATFORM", "rocm")
    monkeypatch.setenv("AUTOTUNE_DEVICE", "AMD Instinct MI355X")
    platform.detected_device_key.cache_clear()
    try:
        host = engine_facts()
        assert _catalog_tp({"default": 8, "rocm": 4, "mi355x": 2}, "rocm", host) == 2
        # Resolving for another platform than this machine's never uses its device.
        assert _catalog_tp({"default": 8, "mi355x": 2}, "cuda", host) == 8
    finally:
        platform.detected_device_key.cache_clear()


def test_tp_engines_get_the_mp_executor_and_the_user_cannot_override_it():
    config = EngineConfig(model="/m", tensor_parallel_size=2)
    kwargs = build_engine_kwargs(config, platform="cuda", resolve=str)
    assert kwargs["distributed_executor_backend"] == "mp"
    assert kwargs["tensor_parallel_size"] == 2
    assert "distributed_executor_backend" not in build_engine_kwargs(
        EngineConfig(model="/m"), platform="cuda", resolve=str
    )
    bad = EngineConfig(model="/m", engine_args={"distributed_executor_backend": "ray"})
    with pytest.raises(EngineError, match="distributed_executor_backend"):
        build_engine_kwargs(bad, platform="cuda", resolve=str)


def test_placement_is_stored_and_exported(tmp_path: Path, autotune):
    """Ray node and device ids travel from EngineInfo to the trial, every measurement row, the
    CSV columns ``ray_node_id``/``device_ids`` and ``study show``."""
    from autotune.testing.landscapes import write_rows
    from autotune.testing.studies import replay_study

    db = tmp_path / "autotune.db"
    store = Store(str(db))
    land = write_rows(tmp_path / "l.csv")
    api.create_study(store, data=replay_study(land), source=str(land))
    record = store.get_study("replayed")
    config = EngineConfig(model="org/tiny")
    trial_id = store.start_trial(record, config, 0)
    info = EngineInfo(1.0, "0.32.0", "NVIDIA H200", "sm_90", "cuda", "node-abc", "3,4", 1e9)
    store.record_engine(trial_id, info)
    from autotune.engine._base import MeasureSettings, PreparedWorkload
    from autotune.engine.replay import ReplayEngine

    engine = ReplayEngine(land)
    engine.start(config)
    m = engine.measure(PreparedWorkload("code", "d", ()), 1, 0, MeasureSettings())
    store.add_measurement(trial_id, m, info, config)
    store.finish_trial(trial_id, state="complete", engine_seconds=3.0)
    (t,) = store.trials(store.get_study("replayed"))
    assert (t.ray_node_id, t.device_ids, t.engine_started_at) == ("node-abc", "3,4", 1e9)
    (row,) = store.measurements(study="replayed")
    assert (row.ray_node_id, row.device_ids) == ("node-abc", "3,4")

    out = tmp_path / "m.csv"
    assert (
        autotune("--db", str(db), "report", "replayed", "--csv", str(out), db=False).exit_code == 0
    )
    import pandas as pd

    df = pd.read_csv(out, dtype={"device_ids": str})
    assert df.loc[0, "ray_node_id"] == "node-abc" and df.loc[0, "device_ids"] == "3,4"
    shown = autotune("--db", str(db), "study", "show", "replayed", "--json", db=False)
    assert shown.exit_code == 0 and '"device_ids": "3,4"' in shown.stdout
