"""A resume reproduces the answer (issue #33 item 1): ``study run --max-configs K`` then
``study resume`` ends with exactly the measurements and the answers of one uninterrupted run, for
every K, through the real tuner loop, the replay engine and a SQLite store. Every decision the
strategies take depends on stored evidence only: the model strategy's close-call allowance is
counted from the stored repeats, and an Optuna sampler is seeded from the stored trials."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.search.landscape_study import study_from_landscape
from autotune.testing.landscapes import write_rows
from autotune.testing.resume import CLOSE_EVERYWHERE as CLOSE
from autotune.testing.resume import run_in_steps

REPO = Path(__file__).resolve().parents[2]
LLAMA = REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv"


def _steps(tmp_path: Path, data: dict[str, Any], land: Path, steps: list[int], tag: str):
    url = f"sqlite:///{tmp_path / f'{tag}.db'}"
    return run_in_steps(url, data, str(land), steps)


def test_close_calls_are_spent_once_across_resumes(tmp_path: Path) -> None:
    land = write_rows(tmp_path / "close.csv", CLOSE)
    data = study_from_landscape(land, "close", "model", 0, repeats=2)
    reference = _steps(tmp_path, data, land, [], "ref")
    # The check means something: the study takes close-call repeats (beyond 2 x 4 cells a config).
    assert reference.count > 2 * 2 * len({(m, n) for m, n, *_ in CLOSE})
    for k in range(1, 5):
        assert _steps(tmp_path, data, land, [k], f"k{k}") == reference, f"--max-configs {k}"
    assert _steps(tmp_path, data, land, [1, 2, 3], "steps") == reference


@pytest.mark.parametrize("sampler", ["grid", "tpe"])
def test_an_optuna_sampler_resumed_under_a_budget_proposes_the_same_configs(
    tmp_path: Path, sampler: str
) -> None:
    """Under ``max_engine_configs`` the configs a sampler proposes are the answer; a sampler
    kept in the driver restarted its random stream on resume (grid and TPE answered chat and
    code at c=1 differently after K = 2..5)."""
    data = study_from_landscape(LLAMA, "budget", sampler, 0)
    data["budget"] = {"max_engine_configs": 6}
    reference = _steps(tmp_path, data, LLAMA, [], "ref")
    for k in (2, 5):
        assert _steps(tmp_path, data, LLAMA, [k], f"k{k}") == reference, f"--max-configs {k}"
