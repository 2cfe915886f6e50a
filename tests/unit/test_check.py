"""The CI gate `autotune check`: deployed config vs the recommendation, on replayed studies."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from autotune import api
from autotune.cli import cli
from autotune.cli._common import Context, report_errors
from autotune.cli.check import check as check_command
from autotune.engine import EngineConfig, EngineInfo, Measurement
from autotune.errors import SpecError
from autotune.recommend import check as gate
from autotune.recommend.choose import choose
from autotune.store import Store
from autotune.testing.landscapes import write_gate
from autotune.testing.studies import GATE_STUDY, gate_study

STUDY = GATE_STUDY


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, Path]:
    tmp = tmp_path_factory.mktemp("check")
    land = write_gate(tmp / "landscape.csv")
    db = tmp / "autotune.db"
    store = Store(str(db))
    api.create_study(store, data=gate_study(land), source=str(land))
    api.run_study(store, STUDY)
    return store, db


def config_of(store: Store, method: str, n: int) -> dict | None:
    """The exact --speculative-config the study measured for (method, N)."""
    for t in store.trials(store.get_study(STUDY)):
        if (t.method, t.num_speculative_tokens) == (method, n):
            return t.speculative_config
    raise AssertionError(f"{method} N={n} was not measured")


def _group() -> click.Group:
    """The real CLI once `check` is registered; until then a group with the same --db."""
    if "check" in cli.commands:
        return cli

    @click.group()
    @click.option("--db", default=None)
    @click.pass_context
    def group(ctx: click.Context, db: str | None) -> None:
        ctx.obj = Context(db=db)

    group.add_command(check_command)
    return group


@pytest.fixture
def run_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Run `autotune check` with a deployed config; vLLM's installed version is pinned to the
    one the test gives (None: not installed)."""

    def run(db: Path, deployed: object, *args: str, installed: str | None = None):
        monkeypatch.setattr(gate, "installed_vllm_version", lambda: installed)
        path = tmp_path / "deployed.json"
        path.write_text(json.dumps(deployed))
        runner = CliRunner()
        argv = ["--db", str(db), "check", "--model", "tiny", "--workload", "code"]
        with runner.isolation() as streams:
            code = report_errors(_group(), [*argv, "--config", str(path), *args])
            return code, streams[0].getvalue().decode(), streams[1].getvalue().decode()

    return run


# --- the gate on a replayed study ------------------------------------------------------------


def test_recommended_config_passes(filled, run_check):
    store, db = filled
    code, out, err = run_check(db, config_of(store, "eagle3", 2), "--concurrency", "1")
    assert code == 0, err
    assert out.startswith("ok:") and "eagle3 N=2" in out


def test_config_within_tolerance_passes_and_fails_a_tighter_one(filled, run_check):
    store, db = filled
    n4 = config_of(store, "eagle3", 4)  # 197.8 vs the recommended 199.0: 0.60% below
    code, out, err = run_check(db, n4, "--concurrency", "1")
    assert code == 0, err
    assert "within 1%" in out and "0.6% below" in out
    code, _, err = run_check(db, n4, "--concurrency", "1", "--tolerance", "0.5")
    assert code == 1 and "0.6% below the recommended eagle3 N=2" in err
    # Scoring above the recommended config (it lost only on the tie rule) passes too.
    code, out, _ = run_check(db, config_of(store, "eagle3", 3), "--concurrency", "1")
    assert code == 0 and "above" in out


def test_worse_config_fails_with_one_line(filled, run_check):
    store, db = filled
    code, out, err = run_check(db, config_of(store, "ngram", 3), "--concurrency", "1")
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    # 180 vs 199 tok/s: 9.5% below; the line says what to deploy instead.
    assert "ngram N=3 is 9.5% below the recommended eagle3 N=2" in lines[0]
    assert json.dumps(config_of(store, "eagle3", 2)) in lines[0]


def test_unmeasured_config_fails(filled, run_check):
    _, db = filled
    code, _, err = run_check(db, {"method": "ngram", "num_speculative_tokens": 7})
    assert code == 1 and "never measured" in err and len(err.strip().splitlines()) == 1
    # Same method and N but other parameters is another config: not measured either.
    code, _, err = run_check(
        db, {"method": "ngram", "num_speculative_tokens": 2}, "--concurrency", "1"
    )
    assert code == 1 and "never measured" in err


def test_off_passes_where_off_wins(filled, run_check):
    store, db = filled
    for off in (None, {}):
        code, out, err = run_check(db, off, "--concurrency", "8")
        assert code == 0, err
        assert "off (no speculation)" in out
    code, _, err = run_check(db, config_of(store, "eagle3", 2), "--concurrency", "8")
    assert code == 1 and "recommended off (no speculation)" in err
    code, _, err = run_check(db, None, "--concurrency", "1")
    assert code == 1 and "off (no speculation) is 49.7% below" in err


def test_all_levels_by_default(filled, run_check):
    store, db = filled
    rec = api.recommend(store, "tiny", "code")
    code, out, err = run_check(db, rec.choice.best.speculative_config)
    assert code == 0, err
    assert "over concurrency 1, 8" in out


def test_replayed_study_is_never_stale(filled, run_check):
    store, db = filled
    code, _, err = run_check(
        db, config_of(store, "eagle3", 2), "--concurrency", "1", installed="9.9.9"
    )
    assert code == 0, err


def test_bad_input_exits_2(filled, run_check, tmp_path: Path):
    _, db = filled
    code, _, err = run_check(db, [1, 2])
    assert code == 2 and "speculative-config object" in err
    code, _, err = run_check(db, None, "--study", "nope")
    assert code == 2
    runner = CliRunner()
    with runner.isolation() as streams:
        code = report_errors(
            _group(),
            ["--db", str(db), "check", "--model", "tiny", "--workload", "code", "--config",
             str(tmp_path / "missing.json")],
        )  # fmt: skip
        assert code == 2 and "no such file" in streams[1].getvalue().decode()


# --- staleness against the installed vLLM ---------------------------------------------------


def _measured_on(store: Store, landscape: Path, version: str) -> None:
    """A study whose measurements an engine reporting vLLM ``version`` recorded."""
    api.create_study(store, data=gate_study(landscape, name="real"), source=str(landscape))
    record = store.get_study("real")
    info = EngineInfo(30.0, version, "test-gpu", "sm_90", "cuda")
    for method, n, draft, tput in (("none", 0, None, 100.0), ("ngram", 2, None, 140.0)):
        params = {"prompt_lookup_max": 4, "prompt_lookup_min": 2} if method == "ngram" else {}
        config = EngineConfig(
            model="tiny:llama", method=method, num_speculative_tokens=n, draft=draft,
            method_params=params,
        )  # fmt: skip
        trial = store.start_trial(record, config, None)
        store.record_engine(trial, info)
        for r in range(3):
            m = Measurement(
                workload="code", workload_digest="d", concurrency=1, repeat=r, seed=0,
                num_requests=8, num_prompt_tokens=800, num_output_tokens=1600, measure_s=10.0,
                output_throughput_tok_s=tput + r, request_throughput_req_s=0.8,
                num_drafts=100 if n else 0, num_draft_tokens=200 if n else 0,
                num_accepted_tokens=90 if n else 0, accepted_per_pos=(60, 30) if n else (),
                max_inflight=1,
            )  # fmt: skip
            store.add_measurement(trial, m, info, config)
        store.finish_trial(trial, state="complete", engine_seconds=60.0)
    store.set_study_status("real", "done")  # a finished study: check answers from it silently


def test_stale_study_fails(tmp_path: Path, run_check):
    db = tmp_path / "real.db"
    store = Store(str(db))
    _measured_on(store, write_gate(tmp_path / "l.csv"), "0.31.0")
    deployed = {"method": "ngram", "num_speculative_tokens": 2}
    deployed |= {"prompt_lookup_max": 4, "prompt_lookup_min": 2}
    code, out, err = run_check(db, deployed, installed="0.32.0")
    assert code == 1 and out == ""
    assert "measured on vLLM 0.31.0 but vLLM 0.32.0 is installed" in err
    assert len(err.strip().splitlines()) == 1
    # The same study passes where that vLLM is installed, or where none is (nothing to compare).
    assert run_check(db, deployed, installed="0.31.0")[0] == 0
    assert run_check(db, deployed, installed=None)[0] == 0


# --- the pure parts --------------------------------------------------------------------------


def test_parse_config_text():
    """The reader `check --config` parses its text with (autotune.recommend.normalize)."""
    from autotune.recommend.normalize import parse_config_text

    assert parse_config_text("null", "f") is None
    assert parse_config_text(" {} ", "f") is None
    assert parse_config_text('{"method": "mtp", "num_speculative_tokens": 1}', "f") == {
        "method": "mtp",
        "num_speculative_tokens": 1,
    }
    with pytest.raises(SpecError, match=r"f: line 1, column 2: neither JSON nor YAML"):
        parse_config_text("{x", "f")
    with pytest.raises(SpecError, match="speculative-config object"):
        parse_config_text("3", "f")


def test_stale_reason():
    assert gate.stale_reason(["replay:l.csv"], "0.32.0", "s") is None
    assert gate.stale_reason(["0.31.0"], None, "s") is None
    assert gate.stale_reason(["0.32.0", "0.32.0"], "0.32.0", "s") is None
    reason = gate.stale_reason(["0.32.0", "0.31.0", "replay:x"], "0.32.0", "s")
    assert reason is not None and "0.31.0" in reason and "replay" not in reason


def test_installed_version_reads_metadata():
    import importlib.metadata as md

    version = gate.installed_vllm_version()
    providers = md.packages_distributions().get("vllm")
    if providers:
        assert version == md.version(providers[0])
    else:
        assert version is None


def test_check_on_a_choice(filled):
    store, _ = filled
    choice = choose(store.measurements(study=STUDY), "code", 1)
    assert choice is not None
    result = gate.check(choice, config_of(store, "ngram", 1), study=STUDY, tolerance_pct=1.0)
    # 150 vs 199 tok/s.
    assert not result.ok and result.exit_code == 1
    assert result.gap_pct == pytest.approx(100 * (1 - 150 / 199))
    assert result.deployed is not None and result.deployed.median_tok_s == 150.0
    ok = gate.check(choice, config_of(store, "ngram", 1), study=STUDY, tolerance_pct=30.0)
    assert ok.ok and ok.exit_code == 0


@pytest.mark.vllm
def test_vllm_defaults_read_from_source_match_speculative_config():
    """check normalizes with SpeculativeConfig's defaults read from vLLM's source, not by
    importing vLLM; every default it reads is the one vLLM's own class declares."""
    import dataclasses

    from autotune.recommend.normalize import _vllm_defaults

    pytest.importorskip("vllm")
    from vllm.config import SpeculativeConfig

    declared = {}
    for f in dataclasses.fields(SpeculativeConfig):
        default = f.default
        default = getattr(default, "default", default)  # pydantic Field(default=...)
        if default is not dataclasses.MISSING:
            declared[f.name] = default
    read = _vllm_defaults()
    assert read, "no defaults read from vLLM's source"
    assert {"method", "num_speculative_tokens", "prompt_lookup_min"} <= set(read)
    assert {k: read[k] for k in read} == {k: declared[k] for k in read}
