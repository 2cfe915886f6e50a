"""A resume reproduces the answer on both store backends (issue #33 item 1): ``study run
--max-configs K`` then ``study resume`` ends with exactly the measurements and the stored
answers of one uninterrupted run, for every K, on SQLite and on a real PostgreSQL server, with
the model strategy (its close-call allowance counted from the store, its per-config decisions
stored in the Optuna study) on a close-call study and on the recorded CPU sweep, and the grid
sampler under a budget (its random state seeded from the stored trials)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.search.landscape_study import study_from_landscape
from autotune.store import Store
from autotune.testing.landscapes import write_rows
from autotune.testing.resume import CLOSE_EVERYWHERE, run_in_steps

REPO = Path(__file__).resolve().parents[2]
LLAMA = REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv"

pytestmark = [pytest.mark.contract, pytest.mark.timeout(600)]


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], str]:
    """A new, empty store on the backend at each call."""
    count = iter(range(1_000))
    if request.param == "sqlite":
        return lambda: f"sqlite:///{tmp_path / f'store-{next(count)}.db'}"
    server = request.getfixturevalue("postgres_server")
    return lambda: server.url(server.create_database())


def test_run_and_resume_at_every_k_ends_as_one_run(
    fresh_url: Callable[[], str], tmp_path: Path
) -> None:
    land = write_rows(tmp_path / "close.csv", CLOSE_EVERYWHERE)
    data = study_from_landscape(land, "close", "model", 0, repeats=2)
    reference = run_in_steps(fresh_url(), data, str(land), [])
    configs = len({(m, n) for m, n, *_ in CLOSE_EVERYWHERE})
    assert reference.count > configs * 2 * 2  # close-call repeats were taken
    for k in range(1, configs + 1):
        got = run_in_steps(fresh_url(), data, str(land), [k])
        assert got == reference, f"--max-configs {k}"
    print(f"\n{configs} K values: {reference.count} measurements, {len(reference.answers)} answers")


def test_the_recorded_sweep_resumed_at_every_k_ends_as_one_run(
    fresh_url: Callable[[], str],
) -> None:
    """The model strategy on the recorded CPU sweep: every K from 1 to the configs the
    uninterrupted run starts, and a run resumed after every single config."""
    data = study_from_landscape(LLAMA, "llama", "model", 0)
    url = fresh_url()
    reference = run_in_steps(url, data, str(LLAMA), [])
    store = Store(url)
    started = len(store.trials(store.get_study("llama")))
    store.dispose()
    for k in range(1, started + 1):
        got = run_in_steps(fresh_url(), data, str(LLAMA), [k])
        assert got == reference, f"--max-configs {k}"
    assert run_in_steps(fresh_url(), data, str(LLAMA), [1] * started) == reference
    print(f"\n{started} K values: {reference.count} measurements, {reference.answers}")


def test_a_budgeted_grid_resumed_proposes_the_same_configs(fresh_url: Callable[[], str]) -> None:
    data = study_from_landscape(LLAMA, "budget", "grid", 0)
    data["budget"] = {"max_engine_configs": 6}
    reference = run_in_steps(fresh_url(), data, str(LLAMA), [])
    for k in (1, 3, 5):
        assert run_in_steps(fresh_url(), data, str(LLAMA), [k]) == reference, f"--max-configs {k}"
