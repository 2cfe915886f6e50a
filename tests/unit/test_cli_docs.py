"""Every CLI command has help with an example and appears in the README; import stays light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from autotune.cli import cli

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


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
    assert path in README, f"{path} is not in the README"
    for param in cmd.params:
        if isinstance(param, click.Option):
            assert param.help, f"{path} {param.opts[0]} has no help"
            long = [o for o in param.opts if o.startswith("--")]
            if long:
                assert long[0] in README, f"{path} {long[0]} is not in the README"


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
