"""Schema step 4 on SQLite and on a real PostgreSQL server: a version-3 store gains the
per-request latency column, keeps its rows, and stores and returns per-request (TTFT, TPOT)."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from autotune.engine import EngineConfig, EngineInfo, Measurement
from autotune.store import Store, migrations

pytestmark = [pytest.mark.contract, pytest.mark.timeout(300)]

INFO = EngineInfo(1.0, "0.32.0", "test-cpu", "cpu", "cpu")


def _measurement(repeat: int, pairs: tuple = ()) -> Measurement:
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
        assert migrations.current_version(conn) == 4
