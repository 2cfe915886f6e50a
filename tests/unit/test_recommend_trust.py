"""Answers a user can trust: published starting points for every catalog model, answers only
from finished studies (or a named partial one), coverage of partial studies, read-only commands
that never import vLLM or torch, and a printed command that is the measured one."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import api
from autotune.recommend import render
from autotune.spec.catalog import load_catalog
from autotune.store import Store
from autotune.testing.landscapes import NGRAM_TWO_LEVELS, write_rows
from autotune.testing.studies import replay_study

REPO = Path(__file__).resolve().parents[2]
CATALOG = load_catalog()
# The tiny models are random local test nets: nothing is published about them.
PUBLISHED_MODELS = [a for a, m in CATALOG.models.items() if not m.model.startswith("tiny:")]
WORKLOADS = ("code", "chat", "math")


@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.parametrize("model", PUBLISHED_MODELS)
def test_every_catalog_model_gets_a_cited_starting_point(autotune, db_path, model, workload):
    plain = autotune("recommend", "--model", model, "--workload", workload)
    assert plain.exit_code == 0, plain.stderr
    config = json.loads(plain.stdout)
    assert config["method"] in CATALOG.models[model].methods
    assert 1 <= config["num_speculative_tokens"] <= 15
    note = [ln for ln in plain.stderr.splitlines() if ln.strip()]
    assert len(note) == 1 and note[0].startswith("note: published starting point")
    assert "autotune study run" in note[0]

    out = autotune("recommend", "--model", model, "--workload", workload, "--json")
    assert out.exit_code == 0
    doc = json.loads(out.stdout)
    assert doc["source"] == "published"
    assert doc["speculative_config"] == config
    assert doc["citation"].startswith(("https://", "seed document: summary of AMD"))
    assert doc["citation"] in note[0]
    assert "hardware" in doc and isinstance(doc["labels"], list)
    if doc["dataset"] is None or "recipe only" in " ".join(doc["labels"]):
        assert any("recipe" in lb for lb in doc["labels"])
    matched = doc["labels"] == [] or not any("workload not matched" in lb for lb in doc["labels"])
    point = api.published_prior(model, workload)
    assert point is not None
    assert matched == (point.result is not None and point.result.workload == workload)
    if point.result is not None and point.result.num_speculative_tokens is None:
        assert any(lb.startswith("N from recipe") for lb in doc["labels"])
        assert doc["n_from"].startswith("https://")
    assert not db_path.exists()  # a published answer writes nothing


def test_published_answers_are_the_cited_numbers(autotune):
    # The seed summary: Gemma-4-26B-A4B DFlash 2.79x on HumanEval, N from a source that ran it.
    doc = json.loads(
        autotune("recommend", "--model", "gemma4", "--workload", "code", "--json").stdout
    )
    assert (doc["method"], doc["speedup"], doc["dataset"]) == ("dflash", 2.79, "HumanEval")
    assert doc["hardware"] == "AMD Instinct MI300X/MI355X"
    assert doc["num_speculative_tokens"] == 15 and "jarvislabs" in doc["n_from"]
    # MiniMax: only random-prompt results are published; labelled.
    mm = json.loads(
        autotune("recommend", "--model", "minimax", "--workload", "math", "--json").stdout
    )
    assert (mm["method"], mm["num_speculative_tokens"]) == ("eagle3", 3)
    assert any(lb.startswith("workload not matched") for lb in mm["labels"])
    # Qwen3.6: nothing measured is published; the vLLM recipe's N, labelled recipe only.
    q = json.loads(
        autotune("recommend", "--model", "qwen3.6", "--workload", "chat", "--json").stdout
    )
    assert (q["method"], q["num_speculative_tokens"]) == ("mtp", 2)
    assert q["labels"][0].startswith("recipe only") and "vllm-project/recipes" in q["citation"]


def test_source_flag(autotune, tmp_path):
    measured = autotune(
        "recommend", "--model", "kimi", "--workload", "code", "--source", "measured"
    )
    assert measured.exit_code == 1 and "nothing measured" in measured.stderr
    tiny = autotune("recommend", "--model", "tiny", "--workload", "code")
    assert tiny.exit_code == 1 and "no published result" in tiny.stderr


def _replayed(store: Store, tmp_path: Path, name: str, rows=NGRAM_TWO_LEVELS, **extra) -> None:
    land = write_rows(tmp_path / f"{name}.csv", rows)
    api.create_study(store, data=replay_study(land, name=name, **extra), source=str(land))


# A landscape where ngram N=1 wins clearly at both levels (NGRAM_TWO_LEVELS picks N=2 at c=1).
NGRAM1 = [
    ("none", 0, 1, (100, 101), ""),
    ("none", 0, 4, (300, 302), ""),
    ("ngram", 1, 1, (190, 191), "0.6"),
    ("ngram", 1, 4, (390, 391), "0.6"),
    ("ngram", 2, 1, (120, 121), "0.6;0.4"),
    ("ngram", 2, 4, (250, 252), "0.6;0.4"),
]


def test_answers_only_from_finished_studies(tmp_path, db_path, autotune):
    store = Store(str(db_path))
    _replayed(store, tmp_path, "finished")
    api.run_study(store, "finished")
    assert store.get_study("finished").status == "done"
    finished = api.recommend(store, "org/tiny", "code").speculative_config
    # A newer study, killed mid-run (its status stays "running"), answering differently.
    _replayed(store, tmp_path, "killed", NGRAM1)
    api.run_study(store, "killed")
    store.set_study_status("killed", "running")
    killed = api.recommend(store, "org/tiny", "code", study="killed").speculative_config
    assert killed != finished
    rec = api.recommend(store, "org/tiny", "code")
    assert rec.study.name == "finished" and rec.speculative_config == finished
    assert rec.notes == ()
    # Only the partial study measured the pair: it answers, and says so on stderr.
    api.delete_study(store, "finished")
    out = autotune("recommend", "--model", "org/tiny", "--workload", "code")
    assert out.exit_code == 0 and json.loads(out.stdout) == killed
    assert "no finished study" in out.stderr and "'killed'" in out.stderr


def test_partial_study_says_how_much_was_measured(tmp_path, db_path, autotune):
    store = Store(str(db_path))
    _replayed(store, tmp_path, "partial")
    api.run_study(store, "partial", max_configs=2)
    assert store.get_study("partial").status == "stopped: --max-configs"
    out = autotune("recommend", "--model", "org/tiny", "--workload", "code")
    assert out.exit_code == 0
    assert "2 of the 3 configs" in out.stderr and "stopped: --max-configs" in out.stderr
    explain = autotune("recommend", "--model", "org/tiny", "--workload", "code", "--explain")
    assert "2 of 3 planned configs measured" in explain.stderr
    json.loads(explain.stdout)  # the explanation is on stderr: stdout stays the config
    report = autotune("report", "partial")
    assert report.exit_code == 0 and "2 of the 3 configs" in report.stderr
    doc = json.loads(
        autotune("recommend", "--model", "org/tiny", "--workload", "code", "--json").stdout
    )
    assert (doc["configs_measured"], doc["configs_planned"]) == (2, 3)
    assert doc["status"] == "stopped: --max-configs"
    deployed = tmp_path / "deployed.json"
    deployed.write_text("null")
    check = autotune(
        "check", "--model", "org/tiny", "--workload", "code", "--config", str(deployed)
    )
    assert check.exit_code in (0, 1) and "2 of the 3 configs" in check.stderr


PROBE = """\
import json, os, runpy, sys, traceback
import autotune.cli  # what `python -m autotune.cli` imports first; each command forks from here
commands, out = json.loads(sys.argv[1]), sys.argv[2]
for i, cmd in enumerate(commands):
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # a fresh `autotune CMD` process but for the interpreter's start
        try:
            os.dup2(os.open(f"{out}/{i}.err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            sys.argv = ["autotune", *cmd]
            try:
                runpy.run_module("autotune.cli", run_name="__main__")
            except SystemExit:
                pass
            heavy = ",".join(m for m in ("vllm", "torch") if m in sys.modules)
            print("HEAVY=" + heavy, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os._exit(0)
    os.waitpid(pid, 0)
"""
"""Each command in a process of its own, forked after ``import autotune.cli`` (the import every
``autotune`` process starts with): what a command imports is its own, the interpreter starts
once."""


@pytest.mark.slow  # seven commands, each in a process of its own: `make test` runs it
def test_read_only_commands_import_neither_vllm_nor_torch(tmp_path, db_path):
    store = Store(str(db_path))
    _replayed(store, tmp_path, "quiet")
    api.run_study(store, "quiet")
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    commands: list[list[str]] = []
    for cmd in (
        ["recommend", "--model", "org/tiny", "--workload", "code"],
        ["recommend", "--model", "kimi", "--workload", "code"],
        ["study", "list"],
        ["study", "show", "quiet"],
        ["report", "quiet"],
        # check normalizes with vLLM's SpeculativeConfig defaults, read from vLLM's source
        ["check", "--model", "org/tiny", "--workload", "code", "--config", "null"],
        [
            "check",
            "--model",
            "org/tiny",
            "--workload",
            "code",
            "--config",
            '{"method": "ngram", "num_speculative_tokens": 2}',
        ],
    ):
        commands.append(["--db", str(db_path), *cmd])
    errs = tmp_path / "stderr"
    errs.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(commands), str(errs)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr  # `import autotune.cli`
    for i, cmd in enumerate(commands):
        stderr = (errs / f"{i}.err").read_text()
        lines = stderr.splitlines()
        assert "HEAVY=" in lines, (cmd, stderr)
        # autotune's own notes and verdicts ("autotune: error: the deployed config ...") only
        noise = [ln for ln in lines if ln and not ln.startswith(("HEAVY=", "note:", "autotune:"))]
        assert noise == [], (cmd, noise)


ENGINE_ARGS = {
    "max_model_len": 1024,
    "dtype": "bfloat16",
    "enforce_eager": True,
    "enable_chunked_prefill": False,
    "enable_prefix_caching": False,
    "seed": 0,
    "gpu_memory_utilization": 0.3,
}


def test_printed_command_is_the_measured_command():
    """Each rendered flag parses, through vLLM's own argument parser, to the stored value."""
    pytest.importorskip("vllm")
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    config = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    line = render.serve_args("org/tiny", config, tensor_parallel_size=2, engine_args=ENGINE_ARGS)
    argv = shlex.split(line)
    assert argv[:3] == ["vllm", "serve", "org/tiny"]
    assert "--no-enable-chunked-prefill" in argv and "--seed" in argv
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    ns = parser.parse_args(["--model", argv[2], *argv[3:]])
    for key, value in {**ENGINE_ARGS, "tensor_parallel_size": 2}.items():
        assert getattr(ns, key) == value, key
    assert ns.speculative_config == config
    # The YAML form carries the same values.
    import yaml

    doc = yaml.safe_load(
        render.as_yaml(config, model="org/tiny", tensor_parallel_size=2, engine_args=ENGINE_ARGS)
    )
    assert doc == {"model": "org/tiny", "tensor_parallel_size": 2, **ENGINE_ARGS,
                   "speculative_config": config}  # fmt: skip


def test_recommendation_renders_the_trials_engine_args(tmp_path, db_path):
    store = Store(str(db_path))
    land = write_rows(tmp_path / "l.csv")
    data = replay_study(land, name="args")
    data["model"]["engine_args"] = {"enable_chunked_prefill": False, "max_num_seqs": 8}
    api.create_study(store, data=data, source=str(land))
    api.run_study(store, "args")
    rec = api.recommend(store, "org/tiny", "code")
    trial = next(t for t in store.trials(rec.study) if t.id in rec.choice.best.trial_ids)
    assert rec.engine_args == trial.engine_args
    assert rec.engine_args["enable_chunked_prefill"] is False
    argv = shlex.split(
        render.serve_args(rec.model, rec.speculative_config, engine_args=rec.engine_args)
    )
    assert "--no-enable-chunked-prefill" in argv and argv[argv.index("--max-num-seqs") + 1] == "8"


def test_study_create_validates_against_vllm(tmp_path):
    """vLLM's verdict is taken at create, for every config of a real-engine study (and the
    Dynamic SD field `--format dsd` adds), so recommend never needs vLLM."""
    pytest.importorskip("vllm")
    from autotune.engine.vllm.checks import check_speculative_config
    from autotune.search.space import validate_study
    from autotune.spec.loader import load_study_file, resolve_study

    path = REPO / "studies" / "tiny-cpu.yaml"
    resolved = resolve_study(load_study_file(path), str(path))
    validate_study(resolved, str(path))  # every config of the demo passes
    assert check_speculative_config({"method": "ngram", "num_speculative_tokenz": 3}) != []
    assert check_speculative_config({"method": "ngram", "num_speculative_tokens": "x"}) != []


def test_published_answer_on_a_fresh_install_opens_no_store(tmp_path):
    """No store file yet: the published answer comes without importing SQLAlchemy and without
    creating the file (the fresh-install `recommend --model kimi --workload code`)."""
    db = tmp_path / "absent.db"
    code = (
        "import sys\n"
        "from autotune.cli import main\n"
        f"sys.argv = ['autotune', '--db', {str(db)!r}, 'recommend', '--model', 'kimi',"
        " '--workload', 'code']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    rc = exc.code\n"
        "print('HEAVY', [m for m in ('sqlalchemy', 'vllm', 'torch') if m in sys.modules],"
        " rc, file=sys.stderr)\n"
    )
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert "HEAVY [] 0" in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["method"]
    assert not db.exists()


def test_study_create_prints_no_library_notices(tmp_path):
    """`study create` imports vLLM to validate the configs; vLLM's import-time notices ("Triton
    is installed, but doesn't include CPU backend") are not the user's business."""
    pytest.importorskip("vllm")
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "autotune.cli", "--db", str(tmp_path / "s.db")),
            *("study", "create", str(REPO / "studies" / "tiny-cpu.yaml")),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "created study 'tiny-cpu'" in proc.stdout
    assert proc.stderr.strip() == ""


def test_published_starting_points_an_expert_would_accept() -> None:
    """HF ids resolve to catalog aliases; acceptance-only results never suggest an N past the
    catalog's bound for the method; random-prompt results rank last and say so."""
    from autotune.recommend.published import starting_point
    from autotune.spec.published import load_published

    catalog = load_catalog()
    by_id = starting_point("moonshotai/Kimi-K2.5", "code")
    by_alias = starting_point("kimi", "code")
    assert by_id is not None and by_alias is not None and by_id == by_alias
    for alias, entry in catalog.models.items():
        for workload in ("code", "chat", "math"):
            point = starting_point(alias, workload)
            if point is None or point.result is None:
                continue
            method = entry.methods.get(point.method)
            if point.result.speedup is None and method is not None and method.n_max:
                assert point.num_speculative_tokens <= method.n_max, (alias, workload, point)
            random = (point.result.dataset or "").lower().startswith("random")
            assert random == any(label.startswith("random prompts") for label in point.labels)
            if random:  # only when the model has nothing measured on real prompts
                real = [
                    r
                    for r in load_published().results
                    if r.alias == alias and not (r.dataset or "").lower().startswith("random")
                ]
                assert not real or all(r.num_speculative_tokens is None for r in real)
    qwen = starting_point("qwen", "chat")
    assert qwen is not None and not (qwen.method == "mtp" and qwen.num_speculative_tokens > 8)
