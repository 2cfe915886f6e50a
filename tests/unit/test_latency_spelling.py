"""One spelling per latency quantity: vLLM's (``p99_tpot_ms``, ``median_ttft_ms``, ...).

The SLO keys (``autotune.spec.slo``), the landscape columns
(``autotune.engine.readers.landscape``), the store's columns (``autotune.store.migrations``, schema
6) and the report's CSV columns
(``autotune.report.frames``) use the keys vLLM's ``benchmarks/serve.py`` writes; the earlier
spellings are read as aliases only.
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from autotune.engine import EngineConfig, EngineInfo, Measurement
from autotune.engine.readers.landscape import LATENCY_COLUMNS, read_landscape
from autotune.errors import SpecError
from autotune.report.frames import _TRAILING as REPORT_COLUMNS
from autotune.spec.loader import load_study_file
from autotune.spec.slo import SLO, SLOSpec
from autotune.store import Store, migrations

DATA = Path(__file__).resolve().parents[1] / "data"
STUDY = """
name: s
model: {name: tiny}
workloads: [code]
methods:
  - method: ngram
    num_speculative_tokens: {min: 1, max: 2}
"""
LATENCY = ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms")
LATENCY += ("median_itl_ms", "p99_itl_ms")


@pytest.mark.vllm  # reads vLLM's installed source, which the unit selection hides
def test_the_spellings_are_the_keys_vllm_bench_serve_writes() -> None:
    # Read as text (no vLLM import): the keys its result JSON lists.
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    serve = Path(next(iter(spec.submodule_search_locations))) / "benchmarks" / "serve.py"
    source = serve.read_text(encoding="utf-8")
    for key in LATENCY:
        assert f'"{key}"' in source, key
    assert set(LATENCY_COLUMNS) <= set(LATENCY)
    assert set(LATENCY) <= set(REPORT_COLUMNS)
    assert set(SLO(1.0, 2.0, 3.0).limits()) == {"p99_tpot_ms", "p99_ttft_ms", "p99_itl_ms"}


@pytest.mark.parametrize("key", ["p99_tpot_ms", "tpot_p99_ms"])
def test_a_study_file_with_either_slo_spelling_loads(tmp_path: Path, key: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        textwrap.dedent(STUDY) + f"slo: {{{key}: 40, workloads: {{code: {{ttft_p99_ms: 90}}}}}}\n"
    )
    spec = load_study_file(path)
    assert spec.slo is not None
    assert spec.slo.for_workload("code") == SLO(p99_tpot_ms=40, p99_ttft_ms=90)
    # What is written back (the stored resolved study, docs) is vLLM's spelling only.
    dumped = spec.slo.model_dump_json()
    assert "p99_tpot_ms" in dumped and "tpot_p99_ms" not in dumped
    assert SLOSpec.model_validate_json(dumped) == spec.slo


def test_both_spellings_of_one_slo_key_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(STUDY) + "slo: {p99_tpot_ms: 40, tpot_p99_ms: 40}\n")
    with pytest.raises(SpecError, match="unknown key"):
        load_study_file(path)


def _old_landscape(tmp_path: Path) -> Path:
    text_ = (DATA / "tiny-cpu-slo-landscape.csv").read_text(encoding="utf-8")
    for new in ("p99_tpot_ms", "p99_ttft_ms", "p99_itl_ms"):
        metric = new.split("_")[1]
        text_ = text_.replace(f",{new}", f",{metric}_ms_p99")
    path = tmp_path / "old.csv"
    path.write_text(text_, encoding="utf-8")
    return path


def test_a_landscape_with_the_earlier_column_names_replays_the_same(tmp_path: Path) -> None:
    old = _old_landscape(tmp_path)
    header = next(line for line in old.read_text().splitlines() if not line.startswith("#"))
    assert "tpot_ms_p99" in header and "p99_tpot_ms" not in header
    new_points = read_landscape(DATA / "tiny-cpu-slo-landscape.csv")
    assert read_landscape(old) == new_points
    assert all(p.p99_tpot_ms is not None for p in new_points)


def test_a_landscape_with_both_spellings_of_a_column_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "both.csv"
    lines = (DATA / "tiny-cpu-slo-landscape.csv").read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    lines[header] += ",tpot_ms_p99"
    lines[header + 1 :] = [line + ",1.0" for line in lines[header + 1 :]]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError, match="both tpot_ms_p99 and p99_tpot_ms"):
        read_landscape(path)


def test_schema_6_renames_a_stored_studys_latency_columns(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = Store(str(path))
    study = store.create_study(
        name="s",
        description="",
        model_alias="tiny",
        model="tiny:llama",
        source="x.yaml",
        resolved_json="{}",
    )
    config = EngineConfig(model="tiny:llama")
    trial = store.start_trial(study, config, 0)
    m = Measurement(
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
        p99_tpot_ms=7.5,
    )
    store.add_measurement(trial, m, EngineInfo(12.5, "0.32.0", "test-cpu", "cpu", "cpu"), config)
    store.finish_trial(trial, state="complete", engine_seconds=1.0)
    store.dispose()
    # Make it the version-5 store an earlier autotune wrote: the old column names.
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        for old, new in migrations.RENAMED_LATENCY_COLUMNS.items():
            conn.execute(text(f"ALTER TABLE autotune_measurements RENAME COLUMN {new} TO {old}"))
        conn.execute(text("UPDATE autotune_meta SET value='5' WHERE key='schema_version'"))
    engine.dispose()

    (row,) = Store(str(path)).measurements(study="s")
    assert (row.median_ttft_ms, row.p99_tpot_ms) == (10.0, 7.5)
    with create_engine(f"sqlite:///{path}").connect() as conn:
        assert migrations.current_version(conn) == migrations.SCHEMA_VERSION
        names = {r[1] for r in conn.execute(text("PRAGMA table_info(autotune_measurements)"))}
    assert set(LATENCY) <= names and not names & set(migrations.RENAMED_LATENCY_COLUMNS)
