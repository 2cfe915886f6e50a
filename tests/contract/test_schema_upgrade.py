"""Schema steps 4 and 5 on SQLite and on a real PostgreSQL server: a version-3 store gains the
per-request latency column, a version-4 store the output-degeneracy columns; each keeps its
rows (their new fields NULL) and stores and returns the new fields."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from autotune.engine import EngineConfig, EngineInfo, Measurement
from autotune.store import Store, migrations

pytestmark = [pytest.mark.contract, pytest.mark.timeout(300)]

INFO = EngineInfo(1.0, "0.32.0", "test-cpu", "cpu", "cpu")


def _measurement(repeat: int, pairs: tuple = (), **guard: float) -> Measurement:
    return Measurement(
        workload="code",
        workload_digest="d",
        concurrency=1,
        repeat=repeat,
        seed=0,
        num_requests=len(pairs) or 2,
        num_prompt_tokens=10,
        num_output_tokens=20,
        measure_s=1.0,
        output_throughput_tok_s=20.0,
        request_throughput_req_s=2.0,
        request_latencies_ms=pairs,
        **guard,
    )


def test_step_4_upgrades_a_version_3_store(store_url: str) -> None:
    store = Store(store_url)
    study = store.create_study(
        name="s", description="", model_alias=None, model="m", source="", resolved_json="{}"
    )
    config = EngineConfig(model="m")
    old = store.start_trial(study, config, 0)
    store.add_measurement(old, _measurement(0), INFO, config)
    store.finish_trial(old, state="complete", engine_seconds=1.0)
    store.dispose()
    engine = create_engine(store_url)
    with engine.begin() as conn:  # what an autotune of schema 3 left behind
        conn.execute(text("ALTER TABLE autotune_measurements DROP COLUMN request_latencies_ms"))
        conn.execute(text("UPDATE autotune_meta SET value='3' WHERE key='schema_version'"))
    engine.dispose()

    store = Store(store_url)
    assert [m.request_latencies_ms for m in store.measurements(study="s")] == [()]
    pairs = ((12.5, 3.25), (40.0, 0.0), (None, None))
    new = store.start_trial(store.get_study("s"), config, 1)
    store.add_measurement(new, _measurement(1, pairs), INFO, config)
    store.finish_trial(new, state="complete", engine_seconds=1.0)
    by_repeat = {m.repeat: m.request_latencies_ms for m in store.measurements(study="s")}
    assert by_repeat == {0: (), 1: pairs}
    store.dispose()
    with create_engine(store_url).connect() as conn:
        assert migrations.current_version(conn) == migrations.SCHEMA_VERSION


def test_step_5_upgrades_a_version_4_store(store_url: str) -> None:
    store = Store(store_url)
    study = store.create_study(
        name="s", description="", model_alias=None, model="m", source="", resolved_json="{}"
    )
    config = EngineConfig(model="m")
    old = store.start_trial(study, config, 0)
    store.add_measurement(old, _measurement(0), INFO, config)
    store.finish_trial(old, state="complete", engine_seconds=1.0)
    store.dispose()
    engine = create_engine(store_url)
    with engine.begin() as conn:  # what an autotune of schema 4 left behind
        for column in ("loop_share", "distinct_4gram_ratio", "loop_at_max_tokens_share"):
            conn.execute(text(f"ALTER TABLE autotune_measurements DROP COLUMN {column}"))
        conn.execute(text("UPDATE autotune_meta SET value='4' WHERE key='schema_version'"))
    engine.dispose()

    store = Store(store_url)
    (before,) = store.measurements(study="s")
    assert (before.loop_share, before.distinct_4gram_ratio) == (None, None)
    assert not before.degenerate
    guard = {"loop_share": 0.75, "distinct_4gram_ratio": 0.125, "loop_at_max_tokens_share": 0.5}
    new = store.start_trial(store.get_study("s"), config, 1)
    store.add_measurement(new, _measurement(1, **guard), INFO, config)
    store.finish_trial(new, state="complete", engine_seconds=1.0)
    by_repeat = {m.repeat: m for m in store.measurements(study="s")}
    got = by_repeat[1]
    assert (got.loop_share, got.distinct_4gram_ratio, got.loop_at_max_tokens_share) == (
        0.75,
        0.125,
        0.5,
    )
    assert got.degenerate and not by_repeat[0].degenerate
    store.dispose()
    with create_engine(store_url).connect() as conn:
        assert migrations.current_version(conn) == migrations.SCHEMA_VERSION
