"""Input that cannot hurt (issue #11): every class of malformed study, workload and landscape
file, and bad store paths, is exit 2 with one line naming the file and field; nothing is
written; a damaged store says so; trust_remote_code and code-loading env need consent."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.engine.readers.landscape import COLUMNS
from autotune.testing.studies import store_digest

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
name: t1
model: {name: tiny}
workloads: [code]
concurrency: [1, 4]
methods:
  - method: ngram
    num_speculative_tokens: {min: 1, max: 3}
"""

LANDSCAPE_HEADER = ",".join(COLUMNS)
LANDSCAPE_ROW = "org/tiny,code,none,,0,1,0,100.0,,,5,1"


def _bomb(levels: int) -> str:
    lines = ['  a0: &a0 ["xxxxxxxx", "xxxxxxxx", "xxxxxxxx", "xxxxxxxx"]']
    for i in range(1, levels):
        lines.append(f"  a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]")
    return "\n".join(lines)


def _replay(landscape: str) -> str:
    return GOOD.replace(
        "workloads: [code]", f"workloads: [code]\nengine: {{kind: replay, landscape: {landscape}}}"
    )


# name -> (file text or bytes, text expected in the message, field expected or None)
STUDY_CASES: dict[str, tuple[str | bytes, str, str | None]] = {
    "alias-bomb-in-engine-args": (
        GOOD.replace("model: {name: tiny}", "model:\n  name: tiny\n  engine_args:\n" + _bomb(9)),
        "YAML aliases (*name) are not allowed",
        "line ",
    ),
    "duplicate-key": (GOOD + "name: t2\n", "duplicate key 'name'", "line 8"),
    "binary-file": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "not a UTF-8 text file", None),
    "nul-byte": ("name: t1\x00\n", "NUL", None),
    "repeats-true": (GOOD + "repeats: true\n", "valid integer", "repeats"),
    "repeats-float": (GOOD + "repeats: 2.0\n", "valid integer", "repeats"),
    "concurrency-1e9": (
        GOOD.replace("[1, 4]", "[1, 1000000000]"),
        "less than or equal",
        "concurrency.1",
    ),
    "timeout-inf": (
        GOOD + "measurement: {timeout_s: .inf}\n",
        "Input should be",
        "measurement.timeout_s",
    ),
    "timeout-nan": (
        GOOD + "measurement: {timeout_s: .nan}\n",
        "Input should be",
        "measurement.timeout_s",
    ),
    "baseline-string": (GOOD + "baseline: 'yes'\n", "valid boolean", "baseline"),
    "long-name": (GOOD.replace("name: t1", "name: " + "a" * 10_000), "at most 128", "name"),
    "long-model": (
        GOOD.replace("{name: tiny}", "{name: org/" + "m" * 1000 + "}"),
        "at most 512",
        "model.name",
    ),
    "reserved-speculative-config": (
        GOOD.replace("{name: tiny}", "{name: tiny, engine_args: {speculative_config: {}}}"),
        "set by autotune itself",
        "model.engine_args.speculative_config",
    ),
    "reserved-prefix-caching": (
        GOOD.replace("{name: tiny}", "{name: tiny, engine_args: {enable_prefix_caching: true}}"),
        "set by autotune itself",
        "model.engine_args.enable_prefix_caching",
    ),
    "trust-remote-code-in-engine-args": (
        GOOD.replace("{name: tiny}", "{name: tiny, engine_args: {trust_remote_code: true}}"),
        "top level of the study",
        "model.engine_args.trust_remote_code",
    ),
    "engine-arg-not-json": (
        GOOD.replace("{name: tiny}", "{name: tiny, engine_args: {max_model_len: .nan}}"),
        "must be a string, number",
        "model.engine_args.max_model_len",
    ),
    "ld-preload-without-consent": (
        GOOD.replace("{name: tiny}", "{name: tiny, env: {LD_PRELOAD: /tmp/x.so}}"),
        "set trust_remote_code: true",
        "model.env.LD_PRELOAD",
    ),
    "pythonpath-without-consent": (
        GOOD.replace("{name: tiny}", "{name: tiny, env: {PYTHONPATH: /tmp}}"),
        "set trust_remote_code: true",
        "model.env.PYTHONPATH",
    ),
    "context-lengths-decreasing": (
        GOOD + "context_lengths: [512, 128]\n",
        "strictly increasing",
        "context_lengths",
    ),
    "context-length-zero": (GOOD + "context_lengths: [0]\n", "greater than or equal", None),
    "context-length-over-max-model-len": (
        GOOD + "context_lengths: [128, 1000]\n",
        "exceed the model's max_model_len (1024)",
        "context_lengths.1",
    ),
    "too-large": ("name: t1\n" + "# pad\n" * 800_000, "larger than 4 MiB", None),
}


def _write(tmp_path: Path, content: str | bytes, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def _assert_rejected(result, source: str, message: str, field: str | None) -> None:
    assert result.exit_code == 2, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert source in lines[0], lines[0]
    assert message in lines[0], lines[0]
    if field:
        assert f": {field}" in lines[0], lines[0]


@pytest.fixture
def seeded(autotune, db_path: Path) -> str | None:
    """A store holding one study, and its digest."""
    assert autotune("study", "create", "--model", "tiny", "--workload", "math").exit_code == 0
    return store_digest(db_path)


@pytest.mark.parametrize("case", sorted(STUDY_CASES))
def test_bad_study_file(case: str, tmp_path: Path, db_path: Path, autotune, seeded):
    content, message, field = STUDY_CASES[case]
    path = _write(tmp_path, content)
    result = autotune("study", "create", str(path))
    _assert_rejected(result, path.name, message, field)
    assert store_digest(db_path) == seeded


def test_alias_bomb_is_refused_before_expansion(tmp_path: Path, autotune, seeded, db_path):
    """The issue's 1 KB file needed > 2.2 GB expanded; refused at parse time, it costs nothing."""
    text = GOOD.replace("model: {name: tiny}", "model:\n  name: tiny\n  engine_args:\n" + _bomb(14))
    assert len(text) < 1500
    result = autotune("study", "create", str(_write(tmp_path, text)))
    assert result.exit_code == 2 and "aliases" in result.stderr
    assert store_digest(db_path) == seeded


LANDSCAPE_CASES: dict[str, tuple[str | bytes, str]] = {
    "measure-s-nan": (
        f"{LANDSCAPE_HEADER}\norg/tiny,code,none,,0,1,0,100.0,,,5,nan\n",
        "measure_s",
    ),
    "throughput-inf": (
        f"{LANDSCAPE_HEADER}\norg/tiny,code,none,,0,1,0,inf,,,5,1\n",
        "output_throughput",
    ),
    "binary": (b"\xff\xfe\x00\x01garbage", "not a UTF-8 CSV"),
    "short-row": (f"{LANDSCAPE_HEADER}\norg/tiny,code\n", "row 2"),
    "huge-concurrency": (
        f"{LANDSCAPE_HEADER}\norg/tiny,code,none,,0,1000000000,0,1,,,5,1\n",
        "concurrency",
    ),
    "no-rows": (f"{LANDSCAPE_HEADER}\n", "no rows"),
    "not-a-landscape": ("root:x:0:0:root:/root:/bin/bash\n", "missing column(s)"),
}


@pytest.mark.parametrize("case", sorted(LANDSCAPE_CASES))
def test_bad_landscape_is_refused_at_create(case: str, tmp_path: Path, db_path, autotune, seeded):
    content, message = LANDSCAPE_CASES[case]
    land = _write(tmp_path, content, "land.csv")
    result = autotune("study", "create", str(_write(tmp_path, _replay(str(land)))))
    _assert_rejected(result, "land.csv", message, None)
    assert store_digest(db_path) == seeded


WORKLOAD_CASES: dict[str, tuple[str | bytes, str, str | None]] = {
    "binary": (b"\x00\x01\x02\xff", "not a UTF-8 text file", None),
    "inline-prompt-too-long": (
        "name: big\nsource: {kind: inline, prompts: ['" + "x" * 1_000_001 + "']}\n",
        "at most 1000000",
        "source.inline.prompts.0",
    ),
    "file-too-large": (
        "name: big\nsource: {kind: inline, prompts: ['" + "x" * 5_000_000 + "']}\n",
        "larger than 4 MiB",
        None,
    ),
    "temperature-bool": (
        "name: w\nsource: {kind: math}\ntemperature: true\n",
        "boolean",
        "temperature",
    ),
    "alias": ("name: w\nsource: &s {kind: math}\ndescription: *s\n", "aliases", "line "),
}


@pytest.mark.parametrize("case", sorted(WORKLOAD_CASES))
def test_bad_workload_file(case: str, tmp_path: Path, db_path, autotune, seeded):
    content, message, field = WORKLOAD_CASES[case]
    wl = _write(tmp_path, content, "wl.yaml")
    study = _write(tmp_path, GOOD.replace("[code]", f"[{wl}]"))
    result = autotune("study", "create", str(study))
    _assert_rejected(result, "wl.yaml", message, field)
    assert store_digest(db_path) == seeded


def test_empty_db_url(autotune):
    result = autotune("--db", "", "study", "list", db=False)
    _assert_rejected(result, "--db", "empty or invalid store URL", None)


def test_unwritable_db_folder(tmp_path: Path, autotune):
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the store's folder should be
    result = autotune(
        "--db",
        str(blocker / "sub" / "x.db"),
        "study",
        "create",
        "--model",
        "tiny",
        "--workload",
        "math",
        db=False,
    )
    _assert_rejected(result, "--db", "cannot create the store's folder", None)


@pytest.mark.slow  # three autotune processes per case: `make test` runs it
@pytest.mark.parametrize("damage", ["garbage", "overwritten-pages"])
def test_corrupted_store_says_so(damage: str, tmp_path: Path):
    """Separate processes, as in use: a store damaged between two commands."""
    import subprocess
    import sys

    db = tmp_path / "store.db"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "autotune.cli", "--db", str(db), *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )

    # A replay study: creating it needs no vLLM import (seconds per process).
    landscape = str(REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv")
    assert cli("study", "create", "--landscape", landscape, "--name", "s").returncode == 0
    data = db.read_bytes()
    if damage == "garbage":
        db.write_bytes(b"this is not a database" * 100)
    else:
        # Keep the 100-byte header, overwrite every page after it.
        db.write_bytes(data[:100] + b"\xff" * (len(data) - 100))
    for args in (("study", "list"), ("recommend", "--model", "tiny", "--workload", "math")):
        result = cli(*args)
        assert result.returncode == 2, result
        assert "Traceback" not in result.stderr
        line = result.stderr.strip()
        assert len(line.splitlines()) == 1 and str(db) in line, line
        assert "SQLite store" in line, line


def test_trust_remote_code_needs_consent(tmp_path: Path):
    from autotune.spec.loader import load_study_file, resolve_study

    plain = resolve_study(load_study_file(_write(tmp_path, GOOD)), "s.yaml")
    assert not plain.trust_remote_code and "trust_remote_code" not in plain.engine_args
    text = GOOD + "trust_remote_code: true\n"
    text = text.replace("{name: tiny}", "{name: tiny, env: {LD_PRELOAD: /opt/x.so}}")
    trusted = resolve_study(load_study_file(_write(tmp_path, text)), "s.yaml")
    assert trusted.trust_remote_code and trusted.engine_args["trust_remote_code"] is True
    assert trusted.trust_remote_code_by == "the study (trust_remote_code: true)"
    # A catalog entry that needs it carries the consent, with the card that says so.
    kimi = resolve_study(
        load_study_file(_write(tmp_path, GOOD.replace("{name: tiny}", "{name: kimi}"))),
        "s.yaml",
        platform="cuda",
    )
    assert kimi.trust_remote_code
    assert (
        kimi.trust_remote_code_by
        == "the catalog entry kimi (https://huggingface.co/moonshotai/Kimi-K2.5)"
    )


@pytest.mark.vllm
def test_false_engine_args_are_valid_vllm_fields(tmp_path: Path):
    """False/zero values are kept; names are checked against the installed vLLM's EngineArgs."""
    from autotune.engine.resolution import engine_facts
    from autotune.errors import SpecError
    from autotune.spec.loader import load_study_file, resolve_study

    text = GOOD.replace(
        "{name: tiny}", "{name: tiny, engine_args: {enable_chunked_prefill: false}}"
    )
    engine = engine_facts()
    resolved = resolve_study(load_study_file(_write(tmp_path, text)), "s.yaml", engine=engine)
    assert resolved.engine_args["enable_chunked_prefill"] is False
    bad = GOOD.replace("{name: tiny}", "{name: tiny, engine_args: {enable_chunked_prefil: false}}")
    with pytest.raises(SpecError, match=r"model\.engine_args\.enable_chunked_prefil: not a field"):
        resolve_study(load_study_file(_write(tmp_path, bad)), "s.yaml", engine=engine)


def test_recommendations_are_replaced_on_rerun(tmp_path: Path):
    from autotune import api
    from autotune.store import Store
    from autotune.testing.landscapes import write_rows
    from autotune.testing.studies import replay_study

    store = Store(str(tmp_path / "r.db"))
    land = write_rows(tmp_path / "l.csv")
    api.create_study(store, data=replay_study(land), source=str(land))
    api.run_study(store, "replayed")
    record = store.get_study("replayed")
    first = store.recommendations(record)
    assert len(first) == 2  # one per (workload, concurrency)
    api.run_study(store, "replayed")
    from autotune.search.protocol import save_recommendations

    save_recommendations(store, record)
    again = store.recommendations(record)
    assert len(again) == 2
    assert [(r.workload, r.concurrency, r.speculative_config) for r in again] == [
        (r.workload, r.concurrency, r.speculative_config) for r in first
    ]


@pytest.mark.parametrize(
    "args",
    [
        ("report", "replayed", "--html", "/proc/nope/x.html"),
        ("report", "replayed", "--csv", "/proc/nope/x.csv"),
        ("export", "--landscape", "replayed", "--output", "/proc/nope/x.csv"),
    ],
)
def test_unwritable_output_paths(args, tmp_path: Path, db_path: Path, autotune):
    from autotune import api
    from autotune.store import Store
    from autotune.testing.landscapes import write_rows
    from autotune.testing.studies import replay_study

    store = Store(str(db_path))
    land = write_rows(tmp_path / "l.csv")
    api.create_study(store, data=replay_study(land), source=str(land))
    api.run_study(store, "replayed")
    store.dispose()
    before = store_digest(db_path)
    result = autotune(*args)
    _assert_rejected(result, "/proc/nope", "No such file or directory", None)
    assert store_digest(db_path) == before
