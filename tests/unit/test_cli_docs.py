"""Every CLI command has help with an example and is documented; import stays light.

A command must be named in the hand-written docs (README.md or a guide in docs/), not only in the
generated reference; every option must appear in the docs, where the command-line reference that
docs/cli.md generates with mkdocs-click (rendered here as the site renders it) counts, so an
option the reference stops showing (hidden, or a command left out of the directive) fails too.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import click
import markdown
import pytest

from autotune.cli import cli

REPO = Path(__file__).resolve().parents[2]
GUIDES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
WRITTEN = "\n".join(p.read_text(encoding="utf-8") for p in GUIDES)


@functools.cache
def _generated_reference() -> str:
    """docs/cli.md as the site renders it: its mkdocs-click directive expanded to HTML."""
    source = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    return markdown.markdown(source, extensions=["attr_list", "tables", "mkdocs-click"])


def _commands(group: click.Group, prefix: str = "autotune"):
    for name, cmd in sorted(group.commands.items()):
        path = f"{prefix} {name}"
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, path)
        else:
            yield path, cmd


COMMANDS = list(_commands(cli))


def test_there_are_commands():
    names = {p for p, _ in COMMANDS}
    assert {"autotune study create", "autotune study run", "autotune recommend"} <= names


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[p for p, _ in COMMANDS])
def test_command_has_help_and_is_documented(path: str, cmd: click.Command):
    assert cmd.help and len(cmd.help.strip()) > 20, f"{path} has no help"
    assert "Example:" in cmd.help, f"{path} help has no Example: block"
    assert path in WRITTEN, f"{path} is named in neither README.md nor a page of docs/"
    reference = _generated_reference()
    for param in cmd.params:
        if isinstance(param, click.Option):
            assert param.help, f"{path} {param.opts[0]} has no help"
            long = [o for o in param.opts if o.startswith("--")]
            if long:
                assert long[0] in WRITTEN or long[0] in reference, (
                    f"{path} {long[0]} is in neither the docs nor the generated reference"
                )


def test_the_generated_reference_shows_every_command_and_its_options():
    reference = _generated_reference()
    assert "::: mkdocs-click" not in reference, "docs/cli.md's directive was not expanded"
    for path, cmd in COMMANDS:
        head = f">{path}</h"
        assert head in reference, f"{path} has no section in the generated reference"
        section = reference.split(head, 1)[1].split("<h", 1)[0]  # up to the next command
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden:
                long = [o for o in param.opts if o.startswith("--")]
                if long:
                    assert long[0] in section, f"{path} {long[0]} is not in its reference"


def test_help_runs_without_heavy_imports():
    code = (
        "import sys\n"
        "from autotune.cli import main\n"
        "sys.argv = ['autotune', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('vllm', 'ray', 'optuna', 'torch', 'pandas', 'sqlalchemy', 'transformers')"
        " if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stderr
    assert "study" in out.stdout


def test_import_autotune_is_light():
    code = (
        "import sys, autotune\n"
        "print([m for m in ('vllm', 'ray', 'optuna', 'torch', 'pandas', 'sqlalchemy') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_version(autotune):
    from autotune import __version__

    result = autotune("--version", db=False)
    assert result.exit_code == 0 and __version__ in result.stdout
