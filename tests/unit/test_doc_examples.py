"""Every shell example in README.md and docs/*.md runs as written, so text and code cannot drift.

A fenced block labelled ``sh`` (or ``shell``, ``bash``) is a script: it runs whole under
``set -euo pipefail``. A ``console`` block is a session: each ``$ `` line is a command, run in
turn, and the lines after it are its output; every shown line that does not elide (``...``,
``…``) must be printed by that command (stdout or stderr). ``autotune`` is this checkout's CLI.
Each block runs in a fresh temporary copy of the files the checkout ships for examples (bench/,
studies/, workloads/, tests/data/) with its own empty store, offline (``HF_HUB_OFFLINE=1``) and
on loopback only.

HTML comments on the lines just before a block steer it: ``<!-- skip: REASON -->`` does not
run it (a GPU, a cluster, a real engine study, a file that does not ship), and
``<!-- expect-exit: N -->`` expects its last command to exit N. A block that shows a command
but is not meant to run (a synopsis, output) is labelled ``text``; an unlabelled block that
shows one fails the test, so no example escapes it by its fence.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHIPPED = ("bench", "studies", "workloads", "tests/data")
"""What an example may read, copied for each block (stores and databases left out)."""
SCRIPT = ("sh", "shell", "bash")
SESSION = ("console",)
COMMAND = re.compile(
    r"^(\$ |autotune |make |ray |pip |python |docker |export |[A-Z_]+=\S* autotune )"
)
MARKER = re.compile(r"^<!-- ([a-z-]+): (.*?) -->$")
ELIDED = ("...", "…")
TIMEOUT_S = 180
PRELUDE = 'set -euo pipefail\nautotune() { "$AUTOTUNE_PYTHON" -m autotune.cli "$@"; }\n'


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: where it is, its label, its lines and the markers before it."""

    page: Path
    line: int
    lang: str
    body: tuple[str, ...]
    markers: tuple[tuple[str, str], ...]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    def marker(self, key: str) -> str | None:
        return next((v for k, v in self.markers if k == key), None)


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, with the ``<!-- key: value -->`` lines before each."""
    lines = page.read_text(encoding="utf-8").split("\n")
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^(`{3,})(\S*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith(fence.group(1)))
        markers: list[tuple[str, str]] = []
        k = i - 1
        while k >= 0 and (not lines[k].strip() or MARKER.match(lines[k])):
            mark = MARKER.match(lines[k])
            if mark:
                markers.append((mark.group(1), mark.group(2)))
            k -= 1
        found.append(Block(page, i + 1, fence.group(2), tuple(lines[i + 1 : end]), tuple(markers)))
        i = end + 1
    return found


ALL = [b for page in PAGES for b in blocks(page)]
EXAMPLES = [b for b in ALL if b.lang in SCRIPT + SESSION]
RUN = [b for b in EXAMPLES if b.marker("skip") is None]


def test_every_block_that_shows_a_command_is_labelled():
    unlabelled = [b.where for b in ALL if not b.lang and any(COMMAND.match(x) for x in b.body)]
    assert not unlabelled, (
        f"blocks showing a command without a label: {unlabelled}; label each `sh`/`console` "
        "(run by this test; `<!-- skip: REASON -->` before it if it cannot run here) or `text`"
    )


def test_skips_give_a_reason_and_most_examples_run():
    for block in EXAMPLES:
        reason = block.marker("skip")
        assert reason is None or len(reason.strip()) > 2, f"{block.where}: skip without a reason"
    assert len(RUN) >= 6, f"only {len(RUN)} examples run: {[b.where for b in RUN]}"


def test_the_examples_are_found_where_expected():
    runs = {b.where for b in RUN}
    assert any(w.startswith("README.md:") for w in runs), "the README's five-minute start"
    assert any(w.startswith("docs/import.md:") for w in runs)
    assert all(b.marker("skip") for b in EXAMPLES if any("make demo" in x for x in b.body))


@dataclass(frozen=True)
class Command:
    text: str
    shown: tuple[str, ...]


def session(block: Block) -> list[Command]:
    """A console block's commands (``$ `` lines, with ``\\`` continuations) and their output."""
    commands: list[Command] = []
    text: list[str] = []
    shown: list[str] = []
    continued = False
    for line in block.body:
        if continued:
            text.append(line)
        elif line.startswith("$ "):
            if text:
                commands.append(Command("\n".join(text), tuple(shown)))
            text, shown = [line[2:]], []
        else:
            shown.append(line)
        continued = line.rstrip().endswith("\\")
    if text:
        commands.append(Command("\n".join(text), tuple(shown)))
    return commands


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    for rel in SHIPPED:
        shutil.copytree(
            REPO / rel,
            tmp_path / rel,
            ignore=shutil.ignore_patterns("*.db", "*.db-*", "*.db.lock", "__pycache__"),
        )
    return tmp_path


def _run(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "AUTOTUNE_PYTHON": sys.executable,
        "AUTOTUNE_DB": f"sqlite:///{cwd / 'autotune.db'}",
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        ["bash", "-c", PRELUDE + script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@pytest.mark.slow  # every runnable example, each in its own copy and store: `make test` runs it
@pytest.mark.parametrize("block", RUN, ids=[b.where for b in RUN])
def test_example_runs_as_written(block: Block, workdir: Path):
    expect = int(block.marker("expect-exit") or 0)
    if block.lang in SCRIPT:
        done = _run("\n".join(block.body), workdir)
        assert done.returncode == expect, (
            f"{block.where}: exit {done.returncode}, expected {expect}\n{_tail(done.stderr)}"
        )
        return
    commands = session(block)
    assert commands, f"{block.where}: a console block without a `$ ` command"
    for n, command in enumerate(commands):
        done = _run(command.text, workdir)
        want = expect if n == len(commands) - 1 else 0
        assert done.returncode == want, (
            f"{block.where}: `{command.text}` exit {done.returncode}, expected {want}\n"
            f"{_tail(done.stderr)}"
        )
        printed = done.stdout + done.stderr
        for line in command.shown:
            line = line.rstrip()
            if line and not any(e in line for e in ELIDED):
                assert line in printed, (
                    f"{block.where}: `{command.text}` did not print {line!r}\n{_tail(printed)}"
                )
