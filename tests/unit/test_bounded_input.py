"""Input that cannot take the machine down (issue #23, items 4, 5 and 7): a corpus of hostile
files, flags and fields, each run through the CLI in-process exactly as the console script runs
it, under a per-case time limit and an address-space cap.

Every case must end in its expected exit code (2 for bad input) with one line on stderr (or
click's usage error), no traceback, no hang, bounded memory, and the store untouched. The
summary test prints the corpus size and the counts (``pytest -s``)."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.engine.readers.landscape import COLUMNS
from autotune.testing.studies import store_digest

REPO = Path(__file__).resolve().parents[2]

CASE_TIMEOUT_S = 30.0
"""A case still running after this long is a hang (the slowest legitimate one takes ~1 s)."""
MEMORY_HEADROOM = 2 * 1024**3
"""Address space a case may add to the process (the cap turns a runaway read into a
MemoryError instead of the machine's OOM killer)."""
MAX_RSS_GROWTH_KIB = 256 * 1024
"""Peak resident memory a case may add."""
MAX_LINE_CHARS = 600
"""Longest error line (a path plus a reason; never the input echoed back)."""

HEADER = ",".join(COLUMNS)
BASELINE_ROW = "org/tiny,code,none,,0,1,0,100.0,,,5,1"
NGRAM_ROW = "org/tiny,code,ngram,,2,1,0,120.0,1.5,0.5;0.2,5,1"
LAND = f"{HEADER}\n{BASELINE_ROW}\n{NGRAM_ROW}\n"

STUDY = """\
name: s1
model: {name: tiny}
workloads: ["{work}/wl.yaml"]
concurrency: [1]
methods:
  - method: ngram
    num_speculative_tokens: {min: 1, max: 2}
"""

REPLAY = """\
name: r1
model: {name: org/tiny}
workloads: [code]
concurrency: [1]
baseline: true
methods: [{method: ngram, num_speculative_tokens: {min: 2, max: 2}}]
engine: {kind: replay, landscape: l.csv}
"""


def _bomb(levels: int) -> str:
    lines = ['a0: &a0 ["xxxxxxxx", "xxxxxxxx", "xxxxxxxx", "xxxxxxxx"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]")
    return "\n".join(lines) + "\n"


def _fifo(name: str) -> Callable[[Path], None]:
    return lambda work: os.mkfifo(work / name)


def _sparse(name: str, size: int) -> Callable[[Path], None]:
    def make(work: Path) -> None:
        with open(work / name, "wb") as f:
            f.truncate(size)  # a file that size on disk, written in no time

    return make


def _dir(name: str) -> Callable[[Path], None]:
    return lambda work: (work / name).mkdir()


def _link(name: str, target: str) -> Callable[[Path], None]:
    return lambda work: (work / name).symlink_to(target)


def _files(**files: str | bytes) -> Callable[[Path], None]:
    def make(work: Path) -> None:
        for name, content in files.items():
            target = work / name.replace("__", ".")
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content.replace("{work}", str(work)))

    return make


def _all(*steps: Callable[[Path], None]) -> Callable[[Path], None]:
    def make(work: Path) -> None:
        for step in steps:
            step(work)

    return make


@dataclass(frozen=True)
class Case:
    argv: list[str]
    setup: Callable[[Path], None] = lambda work: None
    code: int = 2
    expect: str = ""
    """Text the error line must hold."""
    writes: bool = False
    """The command may write the store (a run whose every config failed)."""
    before: list[list[str]] = field(default_factory=list)
    """Commands run first (their exit code must be 0)."""


def _wl_source(kind: str, setup: Callable[[Path], None], path: str = "src.jsonl") -> Case:
    wl = f"name: w\nsource: {{kind: {kind}, path: {path}}}\nnum_prompts: 4\n"
    return Case(
        ["study", "create", "{work}/study.yaml"],
        _all(_files(study__yaml=STUDY, wl__yaml=wl), setup),
        expect="source.path",
    )


def _wl_show(kind: str, setup: Callable[[Path], None]) -> Case:
    """``workload show`` on a request log (the conversation caps come before any tokenizer)."""
    wl = f"name: w\nsource: {{kind: {kind}, path: src.jsonl}}\nnum_prompts: 4\n"
    return Case(
        ["workload", "show", "{work}/wl.yaml"],
        _all(_files(wl__yaml=wl), setup),
        expect="source.path",
    )


def _study_env(model: str, key: str) -> Case:
    text = STUDY.replace("{name: tiny}", f"{{name: {model}, env: {{{key}: /tmp/x}}}}")
    text = text.replace('["{work}/wl.yaml"]', "[math]")
    return Case(
        ["study", "create", "{work}/study.yaml"],
        _files(study__yaml=text),
        expect=f"model.env.{key}",
    )


def _config(value: str, expect: str) -> Case:
    return Case(
        ["check", "--model", "tiny", "--workload", "code", "--config", value], expect=expect
    )


CHECK = ["check", "--model", "tiny", "--workload", "code", "--config"]
CONVERSATION_100K = (
    '{"conversations": ['
    + ", ".join(
        f'{{"from": "{"human" if i % 2 == 0 else "gpt"}", "value": "turn {i}"}}'
        for i in range(100_000)
    )
    + "]}\n"
)
"""One conversation of 100,000 turns (2.9 MB): its replay used to hang, its memory quadratic."""
RUN = ["study", "run", "seed"]

CASES: dict[str, Case] = {
    # --- item 4: bounded input -----------------------------------------------------------------
    "config-dev-zero": Case([*CHECK, "/dev/zero"], expect="is a device"),
    "config-fifo": Case([*CHECK, "{work}/c.json"], _fifo("c.json"), expect="FIFO"),
    "config-dir": Case([*CHECK, "{work}/d"], _dir("d"), expect="is a directory"),
    "config-symlink-dev-zero": Case(
        [*CHECK, "{work}/z.json"], _link("z.json", "/dev/zero"), expect="is a device"
    ),
    "config-50MB": Case([*CHECK, "{work}/c.json"], _sparse("c.json", 50 * 10**6), expect="1 MiB"),
    "config-60000-deep-json": Case(
        [*CHECK, "{work}/c.json"], _files(c__json="[" * 60_000 + "]" * 60_000), expect="deeper"
    ),
    "config-60000-deep-json-inline": Case([*CHECK, '{"a":' * 20_000], expect="deeper"),
    "config-20000-deep-yaml": Case(
        [*CHECK, "{work}/c.yaml"], _files(c__yaml="- " * 20_000 + "x\n"), expect="deeper"
    ),
    "config-alias-bomb": Case(
        [*CHECK, "{work}/c.yaml"], _files(c__yaml=_bomb(12)), expect="aliases"
    ),
    "config-alias-small": Case(
        [*CHECK, "{work}/c.yaml"],
        _files(c__yaml="m: &m ngram\nmethod: *m\nnum_speculative_tokens: 2\n"),
        expect="aliases",
    ),
    "config-binary": Case(
        [*CHECK, "{work}/c.json"], _files(c__json=b"\xff\xfe{\x00}"), expect="UTF-8"
    ),
    "study-fifo": Case(["study", "create", "{work}/s.yaml"], _fifo("s.yaml"), expect="FIFO"),
    "study-dev-zero": Case(["study", "create", "/dev/zero"], expect="is a device"),
    "study-dir": Case(["study", "create", "{work}/d"], _dir("d"), expect="is a directory"),
    "study-5MB": Case(
        ["study", "create", "{work}/s.yaml"], _sparse("s.yaml", 5 * 2**20), expect="4 MiB"
    ),
    "study-20000-deep-yaml": Case(
        ["study", "create", "{work}/s.yaml"],
        _files(s__yaml="name: x\nmodel:\n  " + "- " * 20_000 + "x\n"),
        expect="deeper",
    ),
    "study-60000-deep-json": Case(
        ["study", "create", "{work}/s.yaml"],
        _files(s__yaml='{"a":' * 60_000 + "1" + "}" * 60_000),
        expect="deeper",
    ),
    "study-alias-bomb": Case(
        ["study", "create", "{work}/s.yaml"], _files(s__yaml=_bomb(12)), expect="aliases"
    ),
    "workload-fifo": Case(
        ["study", "create", "{work}/study.yaml"],
        _all(_files(study__yaml=STUDY), _fifo("wl.yaml")),
        expect="FIFO",
    ),
    "workload-dev-zero": Case(
        ["study", "create", "{work}/study.yaml"],
        _files(study__yaml=STUDY.replace('"{work}/wl.yaml"', "/dev/zero")),
        expect="is a device",
    ),
    "landscape-fifo": Case(
        ["study", "create", "--landscape", "{work}/l.csv", "--name", "x"],
        _fifo("l.csv"),
        expect="FIFO",
    ),
    "landscape-dev-zero": Case(
        ["study", "create", "--landscape", "/dev/zero", "--name", "x"], expect="is a device"
    ),
    "landscape-100MB": Case(
        ["study", "create", "--landscape", "{work}/l.csv", "--name", "x"],
        _sparse("l.csv", 100 * 2**20),
        expect="64 MiB",
    ),
    "landscape-deep-params": Case(
        ["study", "create", "--landscape", "{work}/l.csv", "--name", "x"],
        _files(
            l__csv=f"{HEADER},params\n{BASELINE_ROW},\n"
            + 'org/tiny,code,ngram,,2,1,0,120.0,1.5,0.5;0.2,5,1,"'
            + '{""a"":' * 5000
            + '"\n'
        ),
        expect="row 3",
    ),
    "ray-address-unresolvable": Case(
        [*RUN, "--ray-address", "256.0.0.1:1"], expect="cannot reach the Ray cluster"
    ),
    "ray-address-refused": Case(
        [*RUN, "--ray-address", "127.0.0.1:1"], expect="cannot reach the Ray cluster"
    ),
    "ray-address-garbage": Case([*RUN, "--ray-address", "not an address"], expect="HOST:PORT"),
    # --- item 5: every flag and field validated --------------------------------------------------
    "tolerance-inf": Case([*CHECK, "{}", "--tolerance", "inf"], expect="finite"),
    "tolerance-nan": Case([*CHECK, "{}", "--tolerance", "nan"], expect="finite"),
    "slo-tpot-nan": Case(
        ["recommend", "--model", "tiny", "--workload", "code", "--slo-tpot-p99", "nan"],
        expect="finite",
    ),
    "replay-time-scale-nan": Case([*RUN, "--replay-time-scale", "nan"], expect="finite"),
    "replay-time-scale-inf": Case([*RUN, "--replay-time-scale", "inf"], expect="finite"),
    "replay-time-scale-1e308": Case([*RUN, "--replay-time-scale", "1e308"], expect="1000"),
    "max-configs-minus-1": Case([*RUN, "--max-configs", "-1"], expect="x>=1"),
    "max-configs-0": Case([*RUN, "--max-configs", "0"], expect="x>=1"),
    "max-engines-0": Case([*RUN, "--max-engines", "0"], expect="x>=1"),
    "max-engines-minus-1": Case([*RUN, "--max-engines", "-1"], expect="x>=1"),
    "concurrency-0": Case(
        ["recommend", "--model", "tiny", "--workload", "code", "--concurrency", "0"],
        expect="x>=1",
    ),
    "name-empty": Case(
        ["study", "create", "--model", "tiny", "--workload", "math", "--name", ""],
        expect="must not be empty",
    ),
    "slo-empty": Case(
        ["study", "create", "{work}/r.yaml"],
        _files(r__yaml=REPLAY + "slo: {}\n", l__csv=LAND),
        expect="slo",
    ),
    "slo-workload-empty": Case(
        ["study", "create", "{work}/r.yaml"],
        _files(r__yaml=REPLAY + "slo: {workloads: {code: {}}}\n", l__csv=LAND),
        expect="slo",
    ),
    "slo-tpot-inf": Case(
        ["study", "create", "{work}/r.yaml"],
        _files(r__yaml=REPLAY + "slo: {p99_tpot_ms: .inf}\n", l__csv=LAND),
        expect="slo.p99_tpot_ms",
    ),
    "prompt-nul": Case(
        ["study", "create", "{work}/study.yaml"],
        _files(
            study__yaml=STUDY,
            wl__yaml='name: w\nsource: {kind: inline, prompts: ["a\\0b"]}\n',
        ),
        expect="NUL",
    ),
    "landscape-duplicate-rows": Case(
        ["study", "create", "--landscape", "{work}/l.csv", "--name", "x"],
        _files(l__csv=f"{HEADER}\n{BASELINE_ROW}\n{BASELINE_ROW}\n"),
        expect="row 3: repeats row 2",
    ),
    "landscape-mixed-knob-sets": Case(
        ["study", "create", "--landscape", "{work}/l.csv", "--name", "x"],
        _files(
            l__csv=f"{HEADER},params\n{BASELINE_ROW},\n"
            'org/tiny,code,ngram,,2,1,0,120.0,1.5,0.5;0.2,5,1,"{""prompt_lookup_min"": 2}"\n'
            "org/tiny,code,ngram,,2,1,0,120.0,1.5,0.5;0.2,5,1,\n"
        ),
        expect="the rows set different knobs",
    ),
    "source-missing": _wl_source("jsonl", lambda work: None),
    "source-binary": _wl_source("jsonl", _files(src__jsonl=b"\x89PNG\r\n\x1a\n\xff\xfe")),
    "source-latin1": _wl_source(
        "jsonl", _files(src__jsonl='{"prompt": "caf\xe9"}'.encode("latin-1"))
    ),
    "source-utf16": _wl_source("jsonl", _files(src__jsonl='{"prompt": "x"}'.encode("utf-16"))),
    "source-nul": _wl_source("csv", _files(src__csv=b"prompt\nab\x00c\n"), "src.csv"),
    "source-dir": _wl_source("jsonl", _dir("src.jsonl")),
    "source-fifo": _wl_source("jsonl", _fifo("src.jsonl")),
    "source-dev-zero": _wl_source("jsonl", lambda work: None, "/dev/zero"),
    "source-csv-huge": _wl_source("csv", _sparse("src.csv", 1025 * 2**20), "src.csv"),
    "replay-unknown-workload": Case(
        ["study", "create", "{work}/r.yaml"],
        _files(r__yaml=REPLAY.replace("[code]", "[nope]"), l__csv=LAND),
        expect="workloads.0",
    ),
    "run-every-config-failed": Case(
        ["study", "run", "r1", "--quiet"],
        _files(
            r__yaml=REPLAY.replace("baseline: true", "baseline: false").replace(
                "methods: []",
                "methods: [{method: ngram, num_speculative_tokens: {min: 1, max: 1}}]",
            ),
            l__csv=f"{HEADER}\n{BASELINE_ROW}\n",
        ),
        code=1,
        writes=True,
        expect="every engine config of study 'r1' failed",
        before=[["study", "create", "{work}/r.yaml"]],
    ),
    "config-n-minus-1": _config('{"method": "ngram", "num_speculative_tokens": -1}', "[1, 15]"),
    "config-n-1e30": _config('{"method": "ngram", "num_speculative_tokens": 1e30}', "[1, 15]"),
    "config-n-nan": _config('{"method": "ngram", "num_speculative_tokens": NaN}', "[1, 15]"),
    "config-n-2.5": _config('{"method": "ngram", "num_speculative_tokens": 2.5}', "[1, 15]"),
    "config-n-true": _config('{"method": "ngram", "num_speculative_tokens": true}', "[1, 15]"),
    "config-method-bogus": _config('{"method": "bogus", "num_speculative_tokens": 2}', "bogus"),
    "config-huge-value": _config(
        '{"method": "ngram", "num_speculative_tokens": 2, "quantization": "' + "q" * 200_000 + '"}',
        "16 KiB",
    ),
    "config-unknown-key": _config(
        '{"method": "ngram", "num_speculative_tokens": 2, "foo": 1}', "unknown key"
    ),
    "config-knob-out-of-range": _config(
        '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 99}',
        "prompt_lookup_min",
    ),
    "config-knob-inf": _config(
        '{"method": "suffix", "num_speculative_tokens": 2, "suffix_decoding_min_token_prob": '
        "Infinity}",
        "suffix_decoding_min_token_prob",
    ),
    "report-html-missing-folder": Case(
        ["report", "seed", "--html", "{work}/nodir/r.html"], expect="does not exist"
    ),
    "report-csv-missing-folder": Case(
        ["report", "seed", "--csv", "{work}/nodir/r.csv"], expect="does not exist"
    ),
    "export-missing-folder": Case(
        ["export", "--landscape", "seed", "-o", "{work}/nodir/l.csv"], expect="does not exist"
    ),
    # --- item 7: code-loading variables by allowlist ----------------------------------------------
    **{
        f"env-{key}": _study_env("tiny", key)
        for key in (
            "GCONV_PATH",
            "OMP_TOOL_LIBRARIES",
            "CUDA_INJECTION64_PATH",
            "PYTHONPLATLIBDIR",
            "NCCL_NET_PLUGIN",
            "SOME_UNKNOWN_VARIABLE",
            "VLLM_PLUGINS",
            "VLLM_LOGGING_CONFIG_PATH",
        )
    },
    # --- issue #33: code named by engine args, secrets and checkpoint sources ------------------
    **{f"env-{key}": _study_env("tiny", key) for key in ("HF_ENDPOINT", "HF_HUB_CACHE")},
    "env-secret-S3_SECRET_ACCESS_KEY": _study_env("tiny", "S3_SECRET_ACCESS_KEY"),
    "env-secret-with-consent": Case(
        ["study", "create", "{work}/study.yaml"],
        _files(
            study__yaml="trust_remote_code: true\n"
            + STUDY.replace("{name: tiny}", "{name: tiny, env: {HF_TOKEN: hf_x}}").replace(
                '["{work}/wl.yaml"]', "[math]"
            )
        ),
        expect="HF_TOKEN looks like a secret",
    ),
    **{
        f"engine-arg-{key}": Case(
            ["study", "create", "{work}/study.yaml"],
            _files(
                study__yaml=STUDY.replace(
                    "{name: tiny}", f"{{name: tiny, engine_args: {{{key}: evil.Mod}}}}"
                ).replace('["{work}/wl.yaml"]', "[math]")
            ),
            expect=f"model.engine_args.{key}: names code",
        )
        for key in ("worker_cls", "logits_processors", "reasoning_parser_plugin")
    },
    "env-catalog-consent-LD_PRELOAD": _study_env("kimi", "LD_PRELOAD"),
    "env-catalog-consent-PYTHONPATH": _study_env("kimi", "PYTHONPATH"),
    # --- issue #33: what still got through ----------------------------------------------------
    "study-5000-digit-int": Case(
        ["study", "create", "{work}/s.yaml"],
        _files(s__yaml=STUDY.replace("concurrency: [1]", "concurrency: [" + "9" * 5000 + "]")),
        expect="an integer of 5000 digits",
    ),
    "config-5000-digit-int": Case(
        [*CHECK, "{work}/c.json"],
        _files(c__json='{"method": "ngram", "num_speculative_tokens": ' + "9" * 5000 + "}"),
        expect="an integer of 5000 digits",
    ),
    "config-5000-digit-int-inline": _config(
        '{"method": "ngram", "num_speculative_tokens": ' + "9" * 5000 + "}",
        "an integer of 5000 digits",
    ),
    "log-5000-digit-int": _wl_show(
        "chat_jsonl",
        _files(
            src__jsonl='{"model": "m", "messages": [{"role": "user", "content": "x"}], '
            '"max_tokens": ' + "9" * 5000 + "}\n"
        ),
    ),
    "study-symlink-loop": Case(
        ["study", "create", "{work}/s.yaml"],
        _all(_link("s.yaml", "t.yaml"), _link("t.yaml", "s.yaml")),
        expect="symbolic links",
    ),
    "config-symlink-loop": Case(
        [*CHECK, "{work}/c.json"],
        _all(_link("c.json", "d.json"), _link("d.json", "c.json")),
        expect="symbolic links",
    ),
    "log-symlink-loop": _wl_source(
        "chat_jsonl", _all(_link("src.jsonl", "t.jsonl"), _link("t.jsonl", "src.jsonl"))
    ),
    "study-shadow-like": Case(
        ["study", "create", "{work}/s.yaml"],
        _files(s__yaml="".join(f"user{i}:!:20582::::::\n" for i in range(27))),
        expect="more errors)",
    ),
    "log-100000-turns": _wl_show(
        "conversations",
        _files(src__jsonl=CONVERSATION_100K),
    ),
    "log-history-over-the-token-cap": _wl_show(
        "conversations",
        _files(
            src__jsonl='{"conversations": ['
            + ", ".join(
                f'{{"from": "{"human" if i % 2 == 0 else "gpt"}", "value": "{"x" * 40_000}"}}'
                for i in range(8)
            )
            + "]}\n"
        ),
    ),
}

STATS: Counter[str] = Counter()


class Hang(Exception):
    pass


@pytest.fixture(scope="module")
def seeded_store() -> Iterator[Path]:
    """A store holding one replay study ``seed`` (created without vLLM), copied per case."""
    root = Path(tempfile.mkdtemp(prefix="autotune-bounded-"))
    landscape = REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv"
    db = str(root / "seed.db")
    code, err = _cli(
        ["--db", db, "study", "create", "--landscape", str(landscape), "--name", "seed"]
    )
    assert code == 0, err
    yield root / "seed.db"
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def memory_cap() -> Iterator[None]:
    """Cap the address space at what the process has now plus MEMORY_HEADROOM."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        now = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    cap = now + MEMORY_HEADROOM
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _cli(argv: list[str]) -> tuple[int, str]:
    """The CLI in-process as the console script runs it; any exception other than autotune's
    own reaches the caller (a traceback)."""
    from autotune.cli import cli
    from autotune.cli._common import report_errors

    runner = CliRunner()
    with runner.isolation() as streams:
        code = report_errors(cli, argv)
        err = streams[1].getvalue().decode(errors="replace")
    return code, err


def _limited(argv: list[str]) -> tuple[int, str]:
    """:func:`_cli` with a SIGALRM after CASE_TIMEOUT_S (pytest-timeout's own alarm, if any,
    is put back afterwards)."""

    def on_alarm(signum: int, frame: object) -> None:
        raise Hang(f"still running after {CASE_TIMEOUT_S:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, CASE_TIMEOUT_S)
    started = time.monotonic()
    try:
        return _cli(argv)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(0.01, outer - (time.monotonic() - started)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_bounded_case(name: str, seeded_store: Path, memory_cap: None, monkeypatch) -> None:
    case = CASES[name]
    work = Path(tempfile.mkdtemp(prefix="autotune-bounded-case-"))
    monkeypatch.chdir(work)
    try:
        db = work / "store.db"
        with sqlite3.connect(seeded_store) as src, sqlite3.connect(db) as dst:
            src.backup(dst)
        case.setup(work)
        for argv in case.before:
            code, err = _cli(["--db", str(db), *[a.replace("{work}", str(work)) for a in argv]])
            assert code == 0, err
        before = store_digest(db)
        argv = ["--db", str(db), *[a.replace("{work}", str(work)) for a in case.argv]]
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        STATS["cases"] += 1
        try:
            code, err = _limited(argv)
        except Hang:
            STATS["hangs"] += 1
            raise
        except MemoryError:
            STATS["unbounded memory"] += 1
            raise
        except BaseException:
            STATS["tracebacks"] += 1
            raise
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
        if grown > MAX_RSS_GROWTH_KIB:
            STATS["unbounded memory"] += 1
        assert grown <= MAX_RSS_GROWTH_KIB, f"peak RSS grew by {grown} KiB"
        if "Traceback" in err:
            STATS["tracebacks"] += 1
        assert "Traceback" not in err, err
        if code != case.code:
            STATS["accepted bad inputs" if code == 0 else "wrong exit code"] += 1
        assert code == case.code, (argv, code, err)
        lines = err.strip().splitlines()
        if not err.startswith("Usage:"):  # click's usage errors keep click's format
            assert len(lines) == 1 and lines[0].startswith("autotune: error: "), err
        assert all(len(line) <= MAX_LINE_CHARS for line in lines), [len(x) for x in lines]
        assert case.expect in err, err
        if not case.writes:
            if store_digest(db) != before:
                STATS["writes on rejected input"] += 1
            assert store_digest(db) == before
        assert not (work / "nodir").exists()
        STATS["refused as expected"] += 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --- what must still be accepted ------------------------------------------------------------------


def test_good_config_passes_the_checks() -> None:
    from autotune.recommend.normalize import parse_config_text

    for text in (
        '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2}',
        "speculative_config:\n  method: ngram\n  num_speculative_tokens: 3\n",
        "null",
        '{"method": "eagle3", "model": "org/draft", "num_speculative_tokens": 3, '
        '"draft_tensor_parallel_size": 1}',
    ):
        parse_config_text(text, "t")


@pytest.mark.vllm  # reads vLLM's own code
def test_safe_env_passes_without_consent() -> None:
    from autotune.engine.resolution import engine_facts
    from autotune.engine.vllm.checks import vllm_env_names
    from autotune.spec.consent import check_env, safe_env

    vllm = engine_facts()
    env = {"OMP_NUM_THREADS": "4", "VLLM_CPU_KVCACHE_SPACE": "4"}
    check_env(env, "s", trusted=False, engine=vllm)
    check_env({"LD_PRELOAD": "/x.so"}, "s", trusted=True)  # the study's own consent
    if vllm_env_names():  # read from the installed vLLM's envs.py
        assert safe_env("VLLM_ROCM_USE_AITER", vllm) and not safe_env("VLLM_NCCL_SO_PATH", vllm)


def test_good_source_passes_the_create_check(tmp_path: Path) -> None:
    from autotune.datasets._base import check_sources
    from autotune.spec.workload import WorkloadSpec

    (tmp_path / "p.jsonl").write_text('{"prompt": "caf\u00e9 \u2603"}\n', encoding="utf-8")
    spec = WorkloadSpec.model_validate(
        {"name": "w", "source": {"kind": "jsonl", "path": "p.jsonl"}}
    )
    check_sources(spec, tmp_path, "wl.yaml")


def test_knob_values_off_a_grid_are_replayed(tmp_path: Path) -> None:
    """Recorded knob combinations that are not a full grid make one method entry over the
    recorded values; the grid's missing combinations fail at no cost on replay."""
    from autotune.search.landscape_study import study_from_landscape

    land = tmp_path / "l.csv"
    row = "org/tiny,code,ngram,,2,1,0,120.0,1.5,0.5;0.2,5,1"
    land.write_text(
        f"{HEADER},params\n{BASELINE_ROW},\n"
        f'{row},"{{""prompt_lookup_min"": 1, ""prompt_lookup_max"": 2}}"\n'
        f'{row},"{{""prompt_lookup_min"": 2, ""prompt_lookup_max"": 3}}"\n'
        f'{row},"{{""prompt_lookup_min"": 1, ""prompt_lookup_max"": 3}}"\n'
    )
    data = study_from_landscape(land, "g")
    assert data["methods"] == [
        {
            "method": "ngram",
            "num_speculative_tokens": {"min": 2, "max": 2},
            "params": {"prompt_lookup_max": [2, 3], "prompt_lookup_min": [1, 2]},
        }
    ]


def test_printed_commands_are_shell_quoted() -> None:
    import shlex
    from types import SimpleNamespace

    from autotune import api
    from autotune.cli._hints import next_lines

    resolved = SimpleNamespace(
        spec=SimpleNamespace(workloads=["my wl; rm -rf ~"], context_lengths=None), landscape=None
    )
    record = SimpleNamespace(name="s", model_alias=None, model="/models/my model", resolved_json="")
    original = api.ResolvedStudy.from_json
    api.ResolvedStudy.from_json = lambda text: resolved  # type: ignore[assignment,method-assign]
    try:
        lines = next_lines(api.next_steps(record))  # type: ignore[arg-type]
    finally:
        api.ResolvedStudy.from_json = original  # type: ignore[method-assign]
    words = shlex.split(lines[1])
    assert words[words.index("--model") + 1] == "/models/my model"
    assert words[words.index("--workload") + 1] == "my wl; rm -rf ~"


@pytest.mark.slow  # three autotune processes and two mounts: `make test` runs it
def test_read_only_store_folder_says_so(tmp_path: Path) -> None:
    """A store on a read-only mount is reported as read-only, not as a damaged store (a
    read-only bind mount of the store's folder: even root cannot write through it). Separate
    processes, as in use: the store is closed between the commands."""
    import subprocess
    import sys

    def cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "autotune.cli", "--db", str(db), *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )

    rw, ro = tmp_path / "rw", tmp_path / "ro"
    rw.mkdir()
    ro.mkdir()
    landscape = str(REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv")
    assert (
        cli(rw / "s.db", "study", "create", "--landscape", landscape, "--name", "s").returncode == 0
    )
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "--bind", str(rw), str(ro)], capture_output=True).returncode
    ):
        pytest.skip("needs root and mount(8) to make a read-only folder root cannot write")
    try:
        remount = ["mount", "-o", "remount,bind,ro", str(ro)]
        assert subprocess.run(remount, capture_output=True).returncode == 0
        result = cli(ro / "s.db", "study", "list")
        err = result.stderr
        assert result.returncode == 2 and "read-only" in err and "damaged" not in err, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    finally:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)


def test_bounded_summary() -> None:
    """The numbers the issue's closing note asks for (printed with -s)."""
    print(f"\nbounded input corpus: {len(CASES)} cases; {dict(STATS)}")
    for bad in ("tracebacks", "hangs", "unbounded memory", "accepted bad inputs"):
        assert STATS[bad] == 0, (bad, dict(STATS))
