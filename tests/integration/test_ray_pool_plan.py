"""The Ray pool follows a strategy's cell plan exactly as the in-process pool does: the same
study (the model-guided search on a repository landscape, replay engines) run once through
EngineActors and once in the driver measures the same configs at the same cells."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import api
from autotune.search.landscape_study import study_from_landscape
from autotune.search.tuner import Tuner
from autotune.store import Store

pytestmark = pytest.mark.integration

LANDSCAPE = Path(__file__).resolve().parents[2] / "bench/landscapes/synthetic-maverick-eagle3.csv"


def _cells_per_trial(store: Store, study: str) -> list[tuple[str, list[tuple[str, int, int]]]]:
    rows = store.measurements(study=study)
    return [
        (
            t.config_key,
            sorted((r.workload, r.concurrency, r.repeat) for r in rows if r.trial_id == t.id),
        )
        for t in store.trials(store.get_study(study))
    ]


def test_ray_pool_runs_the_model_strategys_cell_plan(tmp_path: Path):
    from autotune.cluster.ray_pool import RayPool

    store = Store(str(tmp_path / "s.db"))
    for name in ("local", "ray"):
        data = study_from_landscape(LANDSCAPE, name, sampler="model", seed=3)
        api.create_study(store, data=data, source=str(LANDSCAPE))
    api.run_study(store, "local")

    def ray_pool(_study: object) -> RayPool:
        return RayPool(
            engine_kind="replay", engine_options={"landscape": str(LANDSCAPE), "seed": 3}
        )

    summary = Tuner(store, store.get_study("ray"), ray_pool).run()
    assert summary.stop_reason == "no unmeasured config can beat the measured best"

    local, ray = _cells_per_trial(store, "local"), _cells_per_trial(store, "ray")
    assert ray == local
    # The plan skipped cells: fewer measurements than configs x levels x repeats.
    levels = 12 * 3
    assert sum(len(cells) for _, cells in ray) < levels * len(ray)
