"""Refuse prompts that look like random tokens: acceptance on them says nothing about traffic.

Speculative decoding's acceptance on random prompts is far from production (15-18 % on random
prompts against 34.7 % on real traffic, Tanguille/cluster#4651), and ``vllm bench``'s random
dataset (decoded random token ids) is the usual culprit. A prompt *looks random* when, over at
least ``MIN_WORDS`` words (alphabetic runs of 3+ letters) or ``MIN_CHARS`` characters, one of:

- *token-id soup*: at least 80 % of its whitespace-separated pieces are integers (a list of
  token ids pasted as text);
- *non-words*: more than ``MAX_NON_WORD_SHARE`` of its words are not pronounceable: no vowel
  (a e i o u y), a run of 5+ consonants, 3+ repeated letters, or a case change inside the
  word after its second letter (``sUhx``, ``qzkT``; ``iPhone``-style and ``camelCase``
  identifiers of code are split at the case change first);
- *broken bytes*: at least 1 % of its characters (and 5 or more) are control characters or
  U+FFFD (random ids of a byte-level vocabulary decode into partial UTF-8 sequences);
- *character soup*: mostly ASCII, yet the character entropy exceeds ``MAX_ASCII_ENTROPY``
  bits (English prose is about 4.2 bits per character, code about 4.5-5, uniformly random
  printable ASCII 6.6).

A workload is refused (at ``study create``, and wherever its prompts load for a study) when
more than half of its prompts look random. Plain standard library.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

MIN_WORDS = 20
MIN_CHARS = 200
MAX_NON_WORD_SHARE = 0.5
MAX_ASCII_ENTROPY = 5.8
MAX_BROKEN_SHARE = 0.01
MAX_RANDOM_PROMPT_SHARE = 0.5

_WORD = re.compile(r"[A-Za-z]{3,}")
_CAMEL = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_VOWELS = set("aeiouyAEIOUY")
_CLUSTER = re.compile(r"[^aeiouyAEIOUY]{5,}")
_REPEAT = re.compile(r"(.)\1\1")
_INT = re.compile(r"[+-]?\d+[,;]?")


def _non_word(word: str) -> bool:
    return (
        not (_VOWELS & set(word))
        or bool(_CLUSTER.search(word))
        or bool(_REPEAT.search(word.lower()))
    )


def _words(text: str) -> list[str]:
    out: list[str] = []
    for run in _WORD.findall(text):
        parts = _CAMEL.findall(run)
        # A well-cased identifier splits into parts that rebuild it; a soup of cases does not.
        if "".join(parts) == run and all(len(p) >= 2 for p in parts):
            out.extend(p for p in parts if len(p) >= 3)
        else:
            out.append(run + "\0")  # mixed case inside a word: counts as a non-word
    return out


def char_entropy(text: str) -> float:
    """Shannon entropy of the text's characters, in bits per character."""
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values()) if n else 0.0


def random_reason(text: str) -> str | None:
    """Why ``text`` looks like random tokens (module docstring), or None when it does not."""
    pieces = text.split()
    if len(pieces) >= MIN_WORDS:
        ints = sum(1 for p in pieces if _INT.fullmatch(p))
        if ints / len(pieces) >= 0.8:
            return f"{100 * ints / len(pieces):.0f}% of its pieces are integers (token ids?)"
    words = _words(text)
    if len(words) >= MIN_WORDS:
        bad = sum(1 for w in words if w.endswith("\0") or _non_word(w))
        if bad / len(words) > MAX_NON_WORD_SHARE:
            return f"{100 * bad / len(words):.0f}% of its words are not words"
    broken = sum(1 for ch in text if ch == "\ufffd" or (ord(ch) < 32 and ch not in "\t\n\r"))
    if broken >= 5 and broken / len(text) >= MAX_BROKEN_SHARE:
        return f"{100 * broken / len(text):.0f}% of its characters are control or undecodable"
    if len(text) >= MIN_CHARS:
        ascii_share = sum(1 for ch in text if ord(ch) < 128) / len(text)
        entropy = char_entropy(text)
        if ascii_share > 0.9 and entropy > MAX_ASCII_ENTROPY:
            return f"its character entropy is {entropy:.1f} bits (prose is about 4.2)"
    return None


@dataclass(frozen=True)
class RandomPrompts:
    """The prompts of a workload that look random, and why the first one does."""

    count: int
    total: int
    first_index: int
    first_reason: str

    def line(self) -> str:
        return (
            f"{self.count} of {self.total} prompts look like random tokens (prompt "
            f"{self.first_index}: {self.first_reason}); acceptance on random prompts says "
            "nothing about real traffic: use real or realistic prompts"
        )


def random_prompts(texts: Sequence[str]) -> RandomPrompts | None:
    """The verdict on a workload's prompt texts: None unless more than
    ``MAX_RANDOM_PROMPT_SHARE`` of them look random."""
    reasons = [(i, r) for i, t in enumerate(texts) if (r := random_reason(t)) is not None]
    if not texts or len(reasons) / len(texts) <= MAX_RANDOM_PROMPT_SHARE:
        return None
    first_index, first_reason = reasons[0]
    return RandomPrompts(len(reasons), len(texts), first_index, first_reason)
