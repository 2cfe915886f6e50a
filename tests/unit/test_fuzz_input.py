"""Fuzzing the inputs (issue #11): generated study, workload and landscape files and CLI
arguments never produce a traceback, exit 0 or 2 only, and a rejected input leaves the store's
digest unchanged. Bounded and deterministic (hypothesis ``derandomize``), about a minute."""

from __future__ import annotations

import copy
import shutil
import sqlite3
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.engine.readers.landscape import COLUMNS
from autotune.testing.studies import store_digest

pytestmark = pytest.mark.timeout(600)

BASE: dict[str, Any] = {
    "name": "t1",
    "model": {"name": "tiny"},
    "workloads": ["math"],
    "concurrency": [1, 4],
    "methods": [{"method": "ngram", "num_speculative_tokens": {"min": 1, "max": 3}}],
    "repeats": 2,
    "measurement": {"max_prompts": 8, "timeout_s": 600},
}

PATHS = [
    ("name",),
    ("description",),
    ("model",),
    ("model", "name"),
    ("model", "tensor_parallel_size"),
    ("model", "engine_args"),
    ("model", "env"),
    ("workloads",),
    ("concurrency",),
    ("methods",),
    ("methods", 0, "method"),
    ("methods", 0, "num_speculative_tokens"),
    ("methods", 0, "num_speculative_tokens", "max"),
    ("methods", 0, "params"),
    ("repeats",),
    ("baseline",),
    ("sampler",),
    ("seed",),
    ("trust_remote_code",),
    ("engine",),
    ("budget",),
    ("measurement", "timeout_s"),
    ("measurement", "max_prompts"),
    ("measurement", "max_spread_pct"),
]

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 3, 15, 16, 10**9]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(
        [
            "",
            "tiny",
            "kimi",
            "/etc/passwd",
            "../../etc/passwd",
            "a" * 3000,
            "ngram",
            "eagle3",
            "replay",
            "x\u202e\u0000y",
        ]
    ),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                [
                    "kind",
                    "landscape",
                    "min",
                    "max",
                    "LD_PRELOAD",
                    "speculative_config",
                    "enable_prefix_caching",
                    "trust_remote_code",
                    "max_model_len",
                    "method",
                    "x",
                ]
            ),
            inner,
            max_size=3,
        ),
    ),
    max_leaves=8,
)

STATS: Counter[str] = Counter()


def _set(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    node: Any = data
    for key in path[:-1]:
        if (isinstance(node, dict) and key in node) or (
            isinstance(node, list) and isinstance(key, int) and key < len(node)
        ):
            node = node[key]
        else:
            return
    if isinstance(node, dict) or (
        isinstance(node, list) and isinstance(path[-1], int) and path[-1] < len(node)
    ):
        node[path[-1]] = value


@pytest.fixture(scope="module")
def seeded_store() -> Path:
    """A store holding one valid study (not named t1), copied fresh for every example."""
    root = Path(tempfile.mkdtemp(prefix="autotune-fuzz-"))
    code, _ = _cli(
        [
            "--db",
            str(root / "seed.db"),
            "study",
            "create",
            "--model",
            "tiny",
            "--workload",
            "math",
            "--name",
            "seed",
        ]
    )
    assert code == 0
    yield root / "seed.db"
    shutil.rmtree(root, ignore_errors=True)


def _cli(argv: list[str]) -> tuple[int, str]:
    """The CLI in-process exactly as the console script runs it: an exception other than
    autotune's own would propagate here and fail the test with its traceback."""
    from autotune.cli import cli
    from autotune.cli._common import report_errors

    runner = CliRunner()
    with runner.isolation() as streams:
        code = report_errors(cli, argv)
        err = streams[1].getvalue().decode()
    return code, err


def _attempt(seed_db: Path, argv_tail: list[str], files: dict[str, str | bytes]) -> None:
    work = Path(tempfile.mkdtemp(prefix="autotune-fuzz-case-"))
    try:
        db = work / "store.db"
        # SQLite's backup API: the copy holds what the seed's WAL holds too.
        with sqlite3.connect(seed_db) as src, sqlite3.connect(db) as dst:
            src.backup(dst)
        for name, content in files.items():
            target = work / name
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content)
        before = store_digest(db)
        argv = ["--db", str(db), *[a.replace("{work}", str(work)) for a in argv_tail]]
        code, err = _cli(argv)
        STATS["cases"] += 1
        STATS[f"exit {code}"] += 1
        assert "Traceback" not in err, err
        assert code in (0, 2), (argv, err)
        if code == 2:
            # click's own usage errors (missing argument, bad option) keep click's format.
            if not err.startswith("Usage:"):
                # One line per problem (every spec error at once), each naming where it is.
                lines = err.strip().splitlines()
                assert lines and all(line.strip() for line in lines), err
                assert len(lines) == 1 or lines[0].startswith("autotune: error: "), err
            if store_digest(db) != before:
                STATS["writes on rejected input"] += 1
            assert store_digest(db) == before, (argv, err)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _settings(n: int) -> settings:
    return settings(
        max_examples=n,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


@pytest.mark.slow  # 120 generated study files through the CLI: `make test` runs it
@_settings(120)
@given(
    edits=st.lists(st.tuples(st.sampled_from(PATHS), VALUES), min_size=1, max_size=3),
    raw=st.one_of(st.none(), st.binary(max_size=200)),
)
def test_fuzz_study_files(seeded_store: Path, edits, raw) -> None:
    data = copy.deepcopy(BASE)
    for path, value in edits:
        _set(data, path, value)
    if raw is not None:
        content: str | bytes = raw
    else:
        try:
            content = yaml.safe_dump(data, allow_unicode=True)
        except yaml.YAMLError:
            return
    _attempt(seeded_store, ["study", "create", "{work}/study.yaml"], {"study.yaml": content})


WORKLOAD_BASE: dict[str, Any] = {"name": "w", "source": {"kind": "math"}, "num_prompts": 8}
WORKLOAD_PATHS = [
    ("name",),
    ("source",),
    ("source", "kind"),
    ("source", "prompts"),
    ("source", "path"),
    ("num_prompts",),
    ("max_tokens",),
    ("temperature",),
    ("seed",),
    ("chat_template",),
    ("max_prompt_chars",),
]


@_settings(60)
@given(
    edits=st.lists(st.tuples(st.sampled_from(WORKLOAD_PATHS), VALUES), min_size=1, max_size=3),
    raw=st.one_of(st.none(), st.binary(max_size=200)),
)
def test_fuzz_workload_files(seeded_store: Path, edits, raw) -> None:
    data = copy.deepcopy(WORKLOAD_BASE)
    for path, value in edits:
        _set(data, path, value)
    content: str | bytes = raw if raw is not None else yaml.safe_dump(data, allow_unicode=True)
    study = copy.deepcopy(BASE)
    study["workloads"] = ["{work}/wl.yaml"]
    study_text = yaml.safe_dump(study)
    _attempt(
        seeded_store,
        ["study", "create", "{work}/study.yaml"],
        {"wl.yaml": content, "study.yaml": study_text},
    )


GOOD_ROW = ["org/tiny", "code", "none", "", "0", "1", "0", "100.0", "", "", "5", "1"]
FIELD = st.one_of(
    st.sampled_from(["", "nan", "inf", "-1", "0", "1e309", "none", "ngram", "0.5;2", "x", "3"]),
    st.text(max_size=12),
)


@_settings(60)
@given(
    edits=st.lists(st.tuples(st.integers(0, len(COLUMNS) - 1), FIELD), min_size=1, max_size=4),
    raw=st.one_of(st.none(), st.binary(max_size=200)),
)
def test_fuzz_landscape_files(seeded_store: Path, edits, raw) -> None:
    row = list(GOOD_ROW)
    for i, value in edits:
        row[i] = value.replace(",", ";").replace("\n", " ").replace("\r", " ")
    content: str | bytes = (
        raw if raw is not None else ",".join(COLUMNS) + "\n" + ",".join(row) + "\n"
    )
    study = copy.deepcopy(BASE)
    study["engine"] = {"kind": "replay", "landscape": "{work}/land.csv"}
    study["model"] = {"name": "org/tiny"}
    text = yaml.safe_dump(study)
    _attempt(
        seeded_store,
        ["study", "create", "{work}/study.yaml"],
        {"land.csv": content, "study.yaml": text},
    )


ARG = st.one_of(
    st.sampled_from(
        [
            "--model",
            "--workload",
            "--name",
            "--concurrency",
            "--method",
            "--repeats",
            "--replace",
            "tiny",
            "math",
            "code",
            "ngram",
            "0",
            "-1",
            "99999999999999999999",
            "nan",
            "",
            "{work}/missing.yaml",
            "/etc/passwd",
        ]
    ),
    st.text(max_size=8),
)


@_settings(60)
@given(
    command=st.sampled_from(
        [
            ["study", "create"],
            ["study", "show"],
            ["study", "delete", "--yes"],
            ["study", "list"],
            ["recommend"],
            ["export", "--landscape"],
        ]
    ),
    args=st.lists(ARG, max_size=6),
)
def test_fuzz_cli_arguments(seeded_store: Path, command: list[str], args: list[str]) -> None:
    if any("\x00" in a for a in args):
        return  # the OS cannot pass a NUL in an argument
    _attempt(seeded_store, [*command, *args], {})


def test_fuzz_summary() -> None:
    """The numbers the issue's closing note asks for (printed with -s)."""
    print(f"\nfuzz: {dict(STATS)}")
    assert STATS["writes on rejected input"] == 0
