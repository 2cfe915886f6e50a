"""The preflight (autotune.search.preflight): `study run --dry-run` prints the plan and starts
nothing; a real run refuses up front what cannot work here; a baseline that cannot start ends
the run. No engine starts: studies are stored from their resolved files (no vLLM import), and
the run-time tests replay landscapes. The hub is never asked (HF_HUB_OFFLINE=1, an empty
cache, no --check-hub)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune import api
from autotune.cluster.devices import Devices, local_devices
from autotune.engine.models import locate_weights
from autotune.engine.resolution import engine_facts
from autotune.search.landscape_study import study_from_landscape
from autotune.spec.loader import load_study_file, resolve_study
from autotune.store import Store
from autotune.testing.landscapes import write_rows
from autotune.testing.studies import store_digest

REPO = Path(__file__).resolve().parents[2]

STUDIES = REPO / "studies"


@pytest.fixture(autouse=True)
def offline_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This machine as a first-time user's CPU box: no GPU, an empty hub cache, offline."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("AUTOTUNE_PLATFORM", "cpu")
    for name in ("CUDA_VISIBLE_DEVICES", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    return cache


def store_study(db: Path, file: Path) -> None:
    """Store a shipped study as `study create` resolves it (the vLLM check left out: the
    preflight reads only the resolved study)."""
    store = Store(str(db))
    resolved = resolve_study(load_study_file(file), str(file), engine=engine_facts())
    store.ensure_optuna_schema()
    store.create_study(
        name=resolved.spec.name,
        description=resolved.spec.description,
        model_alias=resolved.model_alias,
        model=resolved.model,
        source=str(file),
        resolved_json=resolved.to_json(),
    )
    store.dispose()


def test_dry_run_of_the_cpu_demo_shows_a_plan_that_can_go(autotune, db_path: Path) -> None:
    store_study(db_path, STUDIES / "tiny-cpu.yaml")
    before = store_digest(db_path)
    r = autotune("study", "run", "tiny-cpu", "--dry-run")
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert "first batch: ngram N=3, off (no speculation), draft_model N=3" in out
    assert "13 engine configs (0 done, 13 to go), 9 levels x 2 repeats" in out
    assert "tensor_parallel_size=1 per engine; this machine: no GPU" in out
    for ref in ("tiny:llama", "tiny:draft", "tiny:eagle3", "tiny:dflash"):
        assert f": {ref}: local-build" in out
    assert "hub        offline (HF_HUB_OFFLINE is set)" in out
    assert "engine-hours unknown (no engine of tiny:llama has finished" in out
    assert out.rstrip().endswith("ready: nothing above stops this run")
    assert store_digest(db_path) == before  # nothing written


@pytest.mark.vllm  # reads vLLM's own code
@pytest.mark.parametrize(
    ("study", "tp", "targets"),
    [
        ("kimi-k2.5", 8, ["moonshotai/Kimi-K2.5", "lightseekorg/kimi-k2.5-eagle3"]),
        ("gemma4", 1, ["google/gemma-4-26B-A4B-it", "google/gemma-4-26B-A4B-it-assistant"]),
    ],
)
def test_dry_run_of_a_gpu_study_on_this_cpu_machine_says_why_not(
    autotune, db_path: Path, study: str, tp: int, targets: list[str]
) -> None:
    store_study(db_path, STUDIES / f"{study}.yaml")
    r = autotune("study", "run", study, "--dry-run")
    assert r.exit_code == 1, r.stdout + r.stderr
    gpus = f"{tp} GPU{'s' if tp > 1 else ''}"
    assert (
        f"cannot run: no GPU here ({targets[0]} needs {gpus} per engine): use a GPU node, "
        "--ray-address ADDRESS, or a replay study (--landscape)"
    ) in r.stdout
    assert "cannot run: weights not local and the hub is offline (HF_HUB_OFFLINE)" in r.stdout
    for ref in targets:
        assert f"{ref}: would be downloaded (not in the hub cache" in r.stdout
    assert "on the CPU needs" not in r.stdout  # the old, misleading reason
    data = json.loads(autotune("study", "run", study, "--dry-run", "--json").stdout)
    assert data["ok"] is False and len(data["problems"]) == 2
    assert data["tensor_parallel_size"] == tp
    assert data["planned"][1] == "off (no speculation)"  # after the first method's anchor
    assert {w["ref"] for w in data["weights"]} >= set(targets)
    assert data["budget"]["max_engine_hours"] == (8 if study == "kimi-k2.5" else 4)
    assert data["engine_hours"] is None


@pytest.mark.vllm  # reads vLLM's own code
def test_a_real_run_of_kimi_here_is_refused_up_front(autotune, db_path: Path) -> None:
    store_study(db_path, STUDIES / "kimi-k2.5.yaml")
    before = store_digest(db_path)
    r = autotune("study", "run", "kimi-k2.5")
    assert r.exit_code == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "study 'kimi-k2.5' cannot run here: no GPU here" in lines[0]
    assert "--ray-address ADDRESS, or a replay study (--landscape)" in lines[0]
    assert store_digest(db_path) == before  # nothing written: no trial, no Optuna study
    store = Store(str(db_path))
    record = store.get_study("kimi-k2.5")
    assert store.trials(record) == [] and record.status != "running"


def test_weights_offline_are_refused_even_without_the_gpu_rule(
    autotune, db_path: Path, tmp_path: Path
) -> None:
    """A small HF model (not a catalog GPU model) that is not cached, with the hub offline."""
    study = tmp_path / "small.yaml"
    study.write_text(
        "name: small\nmodel: {name: acme/small-lm}\nworkloads: [code]\nconcurrency: [1]\n"
        "methods:\n  - method: ngram\n    num_speculative_tokens: {min: 1, max: 2}\n"
    )
    store_study(db_path, study)
    r = autotune("study", "run", "small")
    assert r.exit_code == 2
    assert "weights not local and the hub is offline (HF_HUB_OFFLINE): acme/small-lm" in r.stderr
    assert "no GPU here" not in r.stderr


def test_dry_run_of_a_replay_study_estimates_from_the_recorded_times(
    autotune, db_path: Path
) -> None:
    land = REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv"
    r = autotune("study", "create", "--landscape", str(land), "--name", "rep")
    assert r.exit_code == 0, r.stderr
    before = store_digest(db_path)
    r = autotune("study", "run", "rep", "--dry-run", "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["ok"] and data["engine"] == "replay" and data["weights"] == []
    assert data["estimate_basis"] == "the landscape's recorded times (cpu-tiny-llama.csv)"
    # The recorded cost of every config: its median start + its levels' median times x repeats.
    from statistics import median

    from autotune.engine.readers.landscape import read_landscape

    points = read_landscape(land)
    configs = {(p.method, p.draft, p.num_speculative_tokens) for p in points}
    expected = 0.0
    for c in configs:
        mine = [p for p in points if (p.method, p.draft, p.num_speculative_tokens) == c]
        expected += median(p.engine_start_s for p in mine)
        for level in {(p.workload, p.concurrency) for p in mine}:
            times = [p.measure_s for p in mine if (p.workload, p.concurrency) == level]
            expected += median(times) * data["repeats"]
    assert data["engine_hours"] == pytest.approx(expected / 3600, abs=0.01)
    assert data["space_size"] == len(configs)
    text = autotune("study", "run", "rep", "--dry-run").stdout
    assert "replay engines in this process, one at a time (no GPU needed)" in text
    assert "hub " not in text  # a replay loads no weights
    assert store_digest(db_path) == before
    # After a partial run, the resume's dry run counts what is done.
    assert autotune("study", "run", "rep", "--max-configs", "2", "-q").exit_code == 0
    resumed = json.loads(autotune("study", "resume", "rep", "--dry-run", "--json").stdout)
    assert resumed["done"] == 2 and resumed["engine_hours"] < data["engine_hours"]
    assert "off (no speculation)" not in resumed["planned"]


def test_a_baseline_that_cannot_start_ends_the_run(autotune, db_path: Path, tmp_path: Path):
    """A landscape without the baseline's rows: the baseline fails at its start, and the run
    stops there instead of starting configs that have nothing to be compared with."""
    full = write_rows(tmp_path / "full.csv")
    cut = tmp_path / "no-baseline.csv"
    cut.write_text(
        "".join(line for line in full.read_text().splitlines(True) if ",none," not in line)
    )
    data = study_from_landscape(full, "nobase", sampler="grid")
    data["engine"]["landscape"] = str(cut)
    store = Store(str(db_path))
    api.create_study(store, data=data, source=str(cut))
    r = autotune("study", "run", "nobase", "-q")  # -q: no progress lines
    assert r.exit_code == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and r.stdout == "", r.stderr
    assert "study 'nobase' stopped: the baseline could not start (the landscape" in lines[0]
    record = store.get_study("nobase")
    trials = store.trials(record)
    assert [(t.method, t.state) for t in trials] == [("none", "failed")]
    assert record.status == "stopped: baseline"
    # A resume does not go on without it either.
    assert autotune("study", "resume", "nobase").exit_code == 1
    assert len(store.trials(record)) == 1


def test_dry_run_flags_belong_together(autotune, db_path: Path) -> None:
    store_study(db_path, STUDIES / "tiny-cpu.yaml")
    r = autotune("study", "run", "tiny-cpu", "--json")
    assert r.exit_code == 2 and "--check-hub and --json go with --dry-run" in r.stderr
    assert autotune("study", "run", "nope", "--dry-run").exit_code == 2


def test_devices_and_weights_are_read_without_a_network(offline_cpu: Path) -> None:
    assert local_devices() == Devices("cpu", 0, local_devices().cores)
    assert Devices("cpu", 0, 2).engines_at_once(8) == 0
    assert Devices("cuda", 8, 64).engines_at_once(2) == 4
    assert locate_weights("tiny:llama").state == "local-build"
    assert locate_weights("/no/such/dir").state == "missing"
    assert locate_weights("acme/model").state == "download"
    # A hub cache laid out as huggingface_hub writes it: refs/main -> a snapshot.
    repo = offline_cpu / "models--acme--model"
    snap = repo / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    (snap / "config.json").write_text("{}")
    index = {"weight_map": {"x": "model-1.safetensors", "y": "model-2.safetensors"}}
    (snap / "model.safetensors.index.json").write_text(json.dumps(index))
    (snap / "model-1.safetensors").write_bytes(b"")
    partial = locate_weights("acme/model")
    assert (partial.state, partial.here) == ("partial", False)
    assert "1 of 2 weight files" in partial.detail
    (snap / "model-2.safetensors").write_bytes(b"")
    assert locate_weights("acme/model").state == "cached"


def test_a_real_study_is_estimated_from_the_stores_finished_configs(
    autotune, db_path: Path
) -> None:
    """No landscape: the estimate is the median engine-seconds of this model's finished engine
    configs in the store (here those a replay of the recorded tiny sweep stored)."""
    land = REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv"
    assert autotune("study", "create", "--landscape", str(land), "--name", "rep").exit_code == 0
    assert autotune("study", "run", "rep", "--max-configs", "3", "-q").exit_code == 0
    store_study(db_path, STUDIES / "tiny-cpu.yaml")
    store = Store(str(db_path))
    seconds = sorted(t.engine_seconds for t in store.trials(store.get_study("rep")))
    data = json.loads(autotune("study", "run", "tiny-cpu", "--dry-run", "--json").stdout)
    assert data["estimate_basis"].startswith("the median of 3 finished engine configs")
    assert data["engine_hours"] == pytest.approx(seconds[1] * 13 / 3600, abs=0.01)
    # The wall budget (8 min a run) buys as many configs as fit at that engine time each, in
    # the strategy's order; the run's own start-up is measured apart when it starts.
    from autotune.search.wall_budget import configs_bought

    bought = configs_bought(8.0, seconds[1], 0.0, 13)
    assert data["wall_plan"].startswith(f"8 min a run buys {bought} of 13 configs at ~")
    assert "ngram N=3, off (no speculation)" in data["wall_plan"]
    text = autotune("study", "run", "tiny-cpu", "--dry-run").stdout
    assert f"wall       8 min a run buys {bought} of 13 configs" in text


def test_dry_run_of_the_real_model_demo_names_its_local_builds_and_wall_budget(
    autotune, db_path: Path
) -> None:
    store_study(db_path, STUDIES / "smollm2-cpu.yaml")
    r = autotune("study", "run", "smollm2-cpu", "--dry-run")
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    for ref in ("tiny:smollm2-135m",):
        assert f": {ref}: local-build" in out
    assert "wall       6.5 min a run; how many configs that buys is known once" in out
    assert "2 levels x 2 repeats" in out


def test_a_missing_draft_fails_its_configs_not_the_study(
    autotune, db_path: Path, tmp_path: Path
) -> None:
    """A draft path that does not exist stops only the configs that load it (they become failed
    trials with their reason): the run is not refused, the dry run says which configs fail."""
    from autotune.search import preflight

    study = tmp_path / "draft.yaml"
    study.write_text(
        "name: draft\nmodel: {name: tiny}\nworkloads: [code]\nconcurrency: [1]\n"
        "methods:\n  - method: ngram\n    num_speculative_tokens: {min: 1, max: 1}\n"
        f"  - method: eagle3\n    draft: {tmp_path / 'no-such-draft'}\n"
        "    num_speculative_tokens: {min: 1, max: 1}\n"
    )
    store_study(db_path, study)
    resolved = resolve_study(load_study_file(study), str(study))
    preflight.refuse(resolved, "draft", None)  # no CannotRunError
    r = autotune("study", "run", "draft", "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert "no-such-draft" in r.stdout + r.stderr
    assert "the configs that load it will fail" in r.stdout + r.stderr
