"""Prompts that look like random tokens (autotune.datasets.prompt_check) are refused at
`study create` with one line; real and realistic prompts pass."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from autotune.datasets.prompt_check import random_prompts, random_reason

REAL = [
    "My invoice PDF shows the wrong currency symbol. Customers in Germany see $ instead of €.",
    "def parse_duration(text: str) -> int:\n    parts = _PART.findall(text)\n    "
    "return sum(int(n) * _UNITS[u] for n, u in parts)  # camelCase getHTTPResponse",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
    "in May. How many clips did Natalia sell altogether in April and May?",
    "请用中文解释一下什么是推测解码，以及它为什么能加速大语言模型的推理。" * 4,
]


def soup(seed: int) -> str:
    rng = random.Random(seed)
    letters = "bcdfghjklmnpqrstvwxzBCDFGHJKLMNPQRSTVWXZaeiou"
    return " ".join(
        "".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(80)
    )


def test_real_prompts_pass() -> None:
    assert [random_reason(t) for t in REAL] == [None] * len(REAL)
    assert random_prompts(REAL) is None


def test_random_token_prompts_are_recognised() -> None:
    rng = random.Random(1)
    ids = ", ".join(str(rng.randrange(128_000)) for _ in range(60))
    assert "integers" in (random_reason(ids) or "")
    assert "not words" in (random_reason(soup(0)) or "")
    broken = "".join(rng.choice(["ab", "\ufffd", "the ", "\x07", "tion"]) for _ in range(200))
    assert "undecodable" in (random_reason(broken) or "")
    ascii_soup = "".join(chr(rng.randrange(33, 127)) for _ in range(400))
    assert random_reason(ascii_soup) is not None
    verdict = random_prompts([soup(1), soup(2), REAL[0]])
    assert verdict is not None and (verdict.count, verdict.total) == (2, 3)
    assert "2 of 3 prompts look like random tokens (prompt 0:" in verdict.line()
    assert random_prompts([soup(1), REAL[0]]) is None  # half is not "more than half"


def test_study_create_refuses_random_prompts(
    tmp_path: Path, autotune, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wdir = tmp_path / "wl"
    wdir.mkdir()
    (wdir / "soup.yaml").write_text(
        "name: soup\nsource:\n  kind: inline\n  prompts: " + json.dumps([soup(i) for i in range(4)])
    )
    study = tmp_path / "s.yaml"
    study.write_text("name: s\nmodel: {name: tiny}\nworkloads: [soup]\n")
    monkeypatch.setenv("AUTOTUNE_WORKLOADS", str(wdir))
    result = autotune("study", "create", str(study))
    assert result.exit_code == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "workload soup: source: 4 of 4 prompts look like random" in lines[0]
    assert not db_path.exists()


def test_study_create_refuses_a_bad_request_log(
    tmp_path: Path, autotune, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wdir = tmp_path / "wl"
    wdir.mkdir()
    (wdir / "log.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{"x": 1}\n')
    (wdir / "log.yaml").write_text("name: log\nsource: {kind: chat_jsonl, path: log.jsonl}\n")
    study = tmp_path / "s.yaml"
    study.write_text("name: s\nmodel: {name: tiny}\nworkloads: [log]\n")
    monkeypatch.setenv("AUTOTUNE_WORKLOADS", str(wdir))
    result = autotune("study", "create", str(study))
    assert result.exit_code == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "source.path: log.jsonl line 2: messages: missing" in lines[0]
    assert not db_path.exists()
