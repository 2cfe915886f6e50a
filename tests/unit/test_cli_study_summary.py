"""``autotune study run``'s summary line (autotune.cli.study): a search that finished says
``done:``, as the study's status reads, and one a budget or ``--max-configs`` cut short says
``stopped:``, as its ``stopped: ...`` status does. Replay studies (recorded numbers)."""

from __future__ import annotations

from pathlib import Path

from autotune import api
from autotune.store import Store
from autotune.testing.landscapes import write_rows
from autotune.testing.studies import replay_study


def _create(db_path: Path, tmp_path: Path) -> None:
    land = write_rows(tmp_path / "l.csv")
    data = replay_study(land, name="summary")
    api.create_study(Store(str(db_path)), data=data, source=str(land))


def test_a_finished_search_says_done_and_a_cut_one_stopped(autotune, db_path, tmp_path) -> None:
    _create(db_path, tmp_path)
    cut = autotune("study", "run", "summary", "--max-configs", "1", "-q")
    assert cut.exit_code == 0, cut.stderr
    assert "; stopped: --max-configs 1" in cut.stdout
    assert Store(str(db_path)).get_study("summary").status == "stopped: --max-configs"
    rest = autotune("study", "resume", "summary", "-q")
    assert rest.exit_code == 0, rest.stderr
    assert Store(str(db_path)).get_study("summary").status == "done"
    assert "; done: " in rest.stdout and "stopped" not in rest.stdout
