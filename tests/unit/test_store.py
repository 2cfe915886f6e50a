"""The study store: WAL SQLite, the autotune_ prefix next to Optuna's tables, migrations."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from autotune.engine import EngineConfig, EngineInfo, Measurement
from autotune.errors import NotFoundError, SpecError, StoreError
from autotune.store import Store, migrations

INFO = EngineInfo(12.5, "0.32.0", "test-cpu", "cpu", "cpu")


def _measurement(**kw) -> Measurement:
    base = dict(
        workload="code",
        workload_digest="d1",
        concurrency=1,
        repeat=0,
        seed=0,
        num_requests=4,
        num_prompt_tokens=100,
        num_output_tokens=400,
        measure_s=2.0,
        output_throughput_tok_s=200.0,
        request_throughput_req_s=2.0,
        median_ttft_ms=10.0,
        num_drafts=100,
        num_draft_tokens=300,
        num_accepted_tokens=150,
        accepted_per_pos=(80, 50, 20),
        max_inflight=1,
    )
    base.update(kw)
    return Measurement(**base)


def _study(store: Store, name: str = "s"):
    return store.create_study(
        name=name,
        description="",
        model_alias="tiny",
        model="tiny:llama",
        source="x.yaml",
        resolved_json="{}",
    )


def test_read_only_use_creates_nothing(tmp_path: Path):
    path = tmp_path / "sub" / "a.db"
    store = Store(str(path))
    assert store.list_studies() == []
    assert store.measurements(model="tiny") == []
    with pytest.raises(NotFoundError):
        store.get_study("x")
    assert not path.exists()


def test_wal_and_prefix(tmp_path: Path):
    path = tmp_path / "a.db"
    store = Store(f"sqlite:///{path}")
    _study(store)
    engine = create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        tables = inspect(conn).get_table_names()
    assert tables and all(t.startswith("autotune_") for t in tables)


def test_roundtrip_and_cascade(tmp_path: Path):
    store = Store(str(tmp_path / "a.db"))
    study = _study(store)
    config = EngineConfig(
        model="tiny:llama",
        method="eagle3",
        num_speculative_tokens=3,
        draft="tiny:eagle3",
        engine_args={"max_model_len": 1024},
    )
    tid = store.start_trial(study, config, optuna_trial_number=0)
    store.record_engine(tid, INFO)
    store.add_measurement(tid, _measurement(), INFO, config)
    # A running trial's measurements are not results yet.
    assert store.measurements(study="s") == []
    store.finish_trial(tid, state="complete", engine_seconds=14.5)
    (m,) = store.measurements(study="s", workload="code", concurrency=1)
    assert m.method == "eagle3" and m.num_speculative_tokens == 3
    assert m.accepted_per_pos == (80, 50, 20)
    assert m.mean_acceptance_length == pytest.approx(2.5)
    assert m.speculative_config == {
        "method": "eagle3",
        "model": "tiny:eagle3",
        "num_speculative_tokens": 3,
    }
    assert m.vllm_version == "0.32.0" and m.engine_args == {"max_model_len": 1024}
    assert m.engine_start_s == 12.5
    with pytest.raises(AttributeError):
        m.method = "x"  # type: ignore[misc]  # records are frozen
    assert store.measurements(model="tiny:llama") and store.measurements(model="tiny")
    store.delete_study("s")
    assert store.measurements() == []


def test_interrupted_trials_keep_their_cells_and_reopen(tmp_path: Path):
    store = Store(str(tmp_path / "a.db"))
    study = _study(store)
    config = EngineConfig(model="tiny:llama")
    tid = store.start_trial(study, config, 0)
    store.add_measurement(tid, _measurement(), INFO, config)
    assert store.abandon_running_trials(study) == 1
    (t,) = store.trials(study)
    assert t.state == "interrupted"
    assert store.get_study("s").num_measurements == 1  # kept: a resume measures the rest
    store.reopen_trial(tid, 3)
    (t,) = store.trials(study)
    assert (t.state, t.optuna_trial_number, t.finished_at) == ("running", 3, None)
    assert [m.trial_id for m in store.trial_measurements(tid)] == [tid]
    with pytest.raises(NotFoundError):
        store.reopen_trial(tid, 3)  # running, not interrupted


def test_duplicate_name(tmp_path: Path):
    store = Store(str(tmp_path / "a.db"))
    _study(store)
    with pytest.raises(SpecError, match="already exists"):
        _study(store)


def test_migration_adds_column_and_keeps_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "a.db"
    store = Store(str(path))
    _study(store)
    store.dispose()
    # The next schema: the shipped revisions and one more, as a change to tables.py adds it.
    scripts = tmp_path / "schema"
    shutil.copytree(migrations.SCRIPT_LOCATION, scripts, ignore=shutil.ignore_patterns("__py*"))
    n = migrations.SCHEMA_VERSION + 1
    (scripts / "versions" / f"{n:04d}_owner.py").write_text(
        "from alembic import op\n"
        "from autotune.store.migrations import add_column\n"
        f"revision = '{n:04d}'\n"
        f"down_revision = '{n - 1:04d}'\n"
        "def upgrade():\n"
        "    add_column(op.get_bind(), 'autotune_studies', 'owner VARCHAR(64)')\n"
    )
    monkeypatch.setattr(migrations, "SCHEMA_VERSION", n)
    monkeypatch.setattr(
        "autotune.store.connection.upgrade",
        lambda conn: migrations.upgrade(conn, n, script_location=scripts),
    )
    store = Store(str(path))
    assert [s.name for s in store.list_studies()] == ["s"]
    engine = create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        cols = {c["name"] for c in inspect(conn).get_columns("autotune_studies")}
        version = migrations.current_version(conn)
        stamped = migrations.alembic_revision(conn)
    assert "owner" in cols
    assert version == migrations.SCHEMA_VERSION and stamped == f"{n:04d}"


def test_newer_schema_is_refused(tmp_path: Path):
    path = tmp_path / "a.db"
    _study(Store(str(path)))
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(text("UPDATE autotune_meta SET value='99' WHERE key='schema_version'"))
    with pytest.raises(StoreError, match="newer than this autotune"):
        Store(str(path)).list_studies()


def test_schema_4_keeps_per_request_latencies_and_upgrades_a_v3_store(tmp_path: Path):
    """Step 4 adds the per-request (TTFT, TPOT) column to a version-3 store, keeping its rows
    (their goodput stays unknown: empty, never guessed); new rows round-trip their pairs."""
    path = tmp_path / "a.db"
    store = Store(str(path))
    study = _study(store)
    config = EngineConfig(model="tiny:llama")
    old = store.start_trial(study, config, 0)
    store.add_measurement(old, _measurement(), INFO, config)
    store.finish_trial(old, state="complete", engine_seconds=1.0)
    store.dispose()
    # Make it the version-3 store an earlier autotune wrote: no column, version 3.
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE autotune_measurements DROP COLUMN request_latencies_ms"))
        conn.execute(text("UPDATE autotune_meta SET value='3' WHERE key='schema_version'"))
    engine.dispose()

    store = Store(str(path))
    (before,) = store.measurements(study="s")
    assert before.request_latencies_ms == ()
    pairs = ((12.5, 3.25), (40.0, 0.0), (None, None))
    new = store.start_trial(store.get_study("s"), config, 1)
    store.add_measurement(new, _measurement(repeat=1, request_latencies_ms=pairs), INFO, config)
    store.finish_trial(new, state="complete", engine_seconds=1.0)
    after = [m for m in store.measurements(study="s") if m.repeat == 1]
    assert after[0].request_latencies_ms == pairs
    with create_engine(f"sqlite:///{path}").connect() as conn:
        assert migrations.current_version(conn) == migrations.SCHEMA_VERSION


def test_a_driver_that_lost_its_lease_writes_nothing(tmp_path: Path):
    """Fenced writes (SQLite): once another driver took the lease over, every write of the
    old holder (measurement, trial, recommendations, status, Optuna's) raises LeaseLostError
    and leaves no row; the new holder's writes go through."""
    from datetime import datetime

    import optuna
    from sqlalchemy import update

    from autotune.errors import LeaseLostError
    from autotune.store.tables import LeaseRow

    url = str(tmp_path / "a.db")
    old, new = Store(url), Store(url)
    study = _study(old)
    config = EngineConfig(model="tiny:llama")
    with old.lease("s", ttl_s=30) as lease:
        tid = old.start_trial(study, config, None)
        old.add_measurement(tid, _measurement(), INFO, config)
        ostudy = optuna.create_study(study_name="autotune:s", storage=old.optuna_storage())
        with new.session() as s:  # its heartbeat stopped a TTL ago: the lease lapsed
            s.execute(update(LeaseRow).values(expires_at=datetime(2000, 1, 1)))
        taken = new.acquire_lease("s", ttl_s=30)
        assert taken.token != lease.token
        writes = [
            lambda: old.add_measurement(tid, _measurement(repeat=1), INFO, config),
            lambda: old.finish_trial(tid, state="complete", engine_seconds=1.0),
            lambda: old.start_trial(study, config, None),
            lambda: old.replace_recommendations(study, []),
            lambda: old.set_study_status("s", "done"),
            lambda: ostudy.add_trial(optuna.trial.create_trial(value=1.0)),
        ]
        for write in writes:
            with pytest.raises(LeaseLostError, match="lost the lease on study 's'"):
                write()
        assert old.lease_lost(lease)
        with pytest.raises(LeaseLostError):
            old.check_lease()
    (t,) = new.trials(study)
    assert t.state == "running" and len(new.trial_measurements(tid)) == 1
    assert new.get_study("s").status != "done"
    assert optuna.load_study(study_name="autotune:s", storage=new.url).trials == []
    assert new.lease_holder("s") is not None  # the old holder's exit released nothing of it
    new.release_lease(taken)


def test_recommendations_are_typed_and_replace_the_earlier_set(tmp_path: Path):
    from autotune.store import NewRecommendation

    store = Store(str(tmp_path / "a.db"))
    study = _study(store)
    tid = store.start_trial(study, EngineConfig(model="tiny:llama"), None)
    first = [NewRecommendation("code", "d1", 1, 100.0, speculative_config=None)]
    assert store.replace_recommendations(study, first) == 1
    config = {"method": "ngram", "num_speculative_tokens": 3}
    new = [
        NewRecommendation("code", "d1", 1, 180.0, tid, config, 100.0, 1.8),
        NewRecommendation("code", "d1", 4, 90.0),
    ]
    assert store.replace_recommendations(study, new) == 2
    on, off = store.recommendations(study)
    assert (on.concurrency, on.trial_id, on.speculative_config) == (1, tid, config)
    assert (on.output_throughput_tok_s, on.baseline_tok_s, on.speedup) == (180.0, 100.0, 1.8)
    assert (on.study, on.model, on.model_alias, on.source) == (
        "s",
        "tiny:llama",
        "tiny",
        "measured",
    )
    assert on.created_at is not None
    assert (off.concurrency, off.speculative_config, off.trial_id, off.speedup) == (
        4,
        None,
        None,
        None,
    )
    assert store.replace_recommendations(study, []) == 0 and store.recommendations(study) == []
    with pytest.raises(AttributeError):
        new[0].speedup = 2.0  # type: ignore[misc]  # frozen


def test_a_new_study_reads_as_stored_and_replace_drops_the_old_one(tmp_path: Path):
    store = Store(str(tmp_path / "a.db"))
    made = _study(store)
    got = store.get_study("s")
    assert (made.id, made.status, made.num_trials, made.optuna_study_name) == (
        got.id,
        "created",
        0,
        "autotune:s",
    )
    assert made.created_at is not None and made.updated_at is not None
    tid = store.start_trial(made, EngineConfig(model="tiny:llama"), None)
    store.save_verification(
        made,
        workload="code",
        mode="serve",
        passed=True,
        tolerance=0.1,
        result={"a": 1},
        vllm_version=None,
    )
    assert [r for _, r in store.verifications(made)] == [{"a": 1}]
    assert store.verifications(made, workload="other") == []
    again = store.create_study(
        name="s",
        description="",
        model_alias=None,
        model="m",
        source="y",
        resolved_json="{}",
        replace=True,
    )
    assert again.model == "m" and again.num_trials == 0  # (SQLite may reuse the id)
    assert store.trials(made) == [] and store.verifications(made) == []  # cascaded
    with pytest.raises(NotFoundError):
        store.reopen_trial(tid, 1)
    assert [s.name for s in store.list_studies()] == ["s"]


def test_every_write_is_a_core_statement(tmp_path: Path):
    """One write path: no store write goes through the ORM's unit of work (``Session.add``, a
    changed row, ``Session.delete``); each is a Core statement on the write's connection."""
    from sqlalchemy import event
    from sqlalchemy.orm import Session

    from autotune.store import NewRecommendation

    flushed: list[object] = []

    def before_flush(session: Session, *_: object) -> None:
        flushed.extend([*session.new, *session.dirty, *session.deleted])

    event.listen(Session, "before_flush", before_flush)
    try:
        store = Store(str(tmp_path / "a.db"))
        study = _study(store)
        study = store.create_study(
            name="s",
            description="",
            model_alias=None,
            model="m",
            source="y",
            resolved_json="{}",
            replace=True,
        )
        config = EngineConfig(model="tiny:llama")
        with store.lease("s", ttl_s=30) as lease:
            assert store.renew_lease(lease)
            tid = store.start_trial(study, config, None)
            store.record_engine(tid, INFO)
            store.add_measurement(tid, _measurement(), INFO, config)
            assert store.abandon_running_trials(study) == 1
            store.reopen_trial(tid, 2)
            store.finish_trial(tid, state="complete", engine_seconds=1.0)
            store.set_study_status("s", "done")
            store.replace_recommendations(study, [NewRecommendation("code", "d1", 1, 1.0)])
        store.save_verification(
            study,
            workload="code",
            mode="serve",
            passed=True,
            tolerance=0.1,
            result={},
            vllm_version="v",
        )
        assert len(store.measurements(study="s")) == 1 and store.recommendations(study)
        store.delete_study("s")
        assert store.list_studies() == []
    finally:
        event.remove(Session, "before_flush", before_flush)
    assert flushed == []
