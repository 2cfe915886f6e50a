"""Prepared workloads for engine tests: prompts cut from Python's own source (the ``json``
package), so a test needs no dataset and no download."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from autotune.engine._base import PreparedWorkload, Prompt


def code_prompts(n: int) -> list[str]:
    """``n`` overlapping 300-character slices of ``json/decoder.py``."""
    source = (Path(json.__file__).parent / "decoder.py").read_text()
    return [source[i * 97 : i * 97 + 300] for i in range(n)]


def prepared(name: str, texts: list[str], max_tokens: int, chat_template: bool) -> PreparedWorkload:
    """A workload of ``texts``, each asking for ``max_tokens`` output tokens (its digest
    covers all four, as an engine caches rendered prompts by digest)."""
    key = json.dumps([name, texts, max_tokens, chat_template]).encode()
    return PreparedWorkload(
        name=name,
        digest=hashlib.sha256(key).hexdigest()[:16],
        prompts=[Prompt(text, max_tokens) for text in texts],
        chat_template=chat_template,
    )
