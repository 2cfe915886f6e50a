"""``autotune.cli``: help examples work from any folder, or say where they must run.

An example that names a file shipped in the checkout (``studies/...``, ``bench/...``) only
resolves from the checkout's root; such an example is preceded by a comment that says so.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from autotune.cli import cli

REPO = Path(__file__).resolve().parents[2]
SHIPPED = re.compile(r"(?<![\w/.])((?:studies|bench|workloads|tests|docs)/[\w./-]+)")


def _commands(group: click.Group, path: str = "autotune") -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = [(path, group)]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            out += _commands(command, f"{path} {name}")
        else:
            out.append((f"{path} {name}", command))
    return out


def test_every_example_naming_a_shipped_file_says_to_run_it_from_the_checkout() -> None:
    checked = 0
    for name, command in _commands(cli):
        lines = (command.help or "").splitlines()
        start = next((i for i, line in enumerate(lines) if line.strip() == "Example:"), None)
        if start is None:
            continue
        said = False
        for line in lines[start + 1 :]:
            text = line.strip()
            if text.startswith("#"):
                said = "checkout" in text
                continue
            for path in SHIPPED.findall(text):
                checked += 1
                assert said, f"{name}: example {text!r} needs the checkout's root; say so"
                assert (REPO / path).exists(), f"{name}: {path} is not in the checkout"
    assert checked >= 3


def test_examples_use_each_options_own_name_not_an_earlier_spelling() -> None:
    """An option kept under an earlier spelling (``--slo-itl-p99``) is shown by its own name
    (``--slo-p99-itl-ms``) in every example, as in the README."""
    checked = 0
    for name, command in _commands(cli):
        lines = (command.help or "").splitlines()
        start = next((i for i, line in enumerate(lines) if line.strip() == "Example:"), None)
        earlier = {o: p.opts[0] for p in command.params for o in p.opts[1:] if o.startswith("--")}
        for line in lines[start + 1 :] if start is not None else ():
            for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", line):
                checked += 1
                assert flag not in earlier, f"{name}: example uses {flag}; say {earlier[flag]}"
    assert checked >= 20
