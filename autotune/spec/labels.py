"""The one name a config goes by in every output: progress, notes, tables, report, HTML, CSV.

A config is named ``method N=n``; where several configs of the same method differ in a knob or
their draft within what is shown (a study's configs), the knobs that differ are added:
``ngram[min=3,max=5] N=3``, ``draft_model[rejection=block] N=3``, ``eagle3[draft=B] N=4``.
Knobs every config of the method shares are left out: they tell nothing apart. The baseline is
``off`` in tables and ``off (no speculation)`` in prose, never "baseline", "none" or "null".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from autotune.spec.knobs import KNOBS

OFF = "off"
"""The baseline's name in tables, CSV and legends."""
OFF_PROSE = "off (no speculation)"
"""The baseline's name in sentences (progress lines, notes, `recommend`)."""

SHORT = {
    "model": "draft",
    "prompt_lookup_min": "min",
    "prompt_lookup_max": "max",
    "rejection_sample_method": "rejection",
    "draft_tensor_parallel_size": "draft_tp",
    "parallel_drafting": "parallel",
    "suffix_decoding_max_tree_depth": "tree_depth",
    "suffix_decoding_max_cached_requests": "cached_requests",
    "suffix_decoding_max_spec_factor": "spec_factor",
    "suffix_decoding_min_token_prob": "min_token_prob",
}
"""Short names of the keys a label may show (a key not listed shows under its own name)."""

_ORDER = ["model", *KNOBS]
_NOT_SHOWN = frozenset({"method", "num_speculative_tokens"})


def _order(key: str) -> tuple[int, str]:
    return (_ORDER.index(key) if key in _ORDER else len(_ORDER), key)


def _value(key: str, value: Any) -> str:
    if value is None:
        return "default"
    if isinstance(value, bool):
        return "true" if value else "false"
    if key == "model":
        return str(value).rstrip("/").split("/")[-1] or str(value)
    return str(value)


class Labels:
    """Names configs told apart within ``configs`` (``--speculative-config`` dicts; None is the
    baseline). With no configs, every config is named ``method N=n``."""

    def __init__(self, configs: Iterable[Mapping[str, Any] | None] = ()):
        by_method: dict[str, list[Mapping[str, Any]]] = {}
        for c in configs:
            if c:
                by_method.setdefault(str(c.get("method")), []).append(c)
        self._shown: dict[str, list[str]] = {}
        self._full_draft: set[str] = set()
        for method, group in by_method.items():
            keys = {k for c in group for k in c if k not in _NOT_SHOWN}
            differing = [k for k in keys if len({repr(c.get(k)) for c in group}) > 1]
            self._shown[method] = sorted(differing, key=_order)
            drafts = {str(c.get("model")) for c in group if c.get("model") is not None}
            if len({_value("model", d) for d in drafts}) < len(drafts):
                self._full_draft.add(method)

    def variant(self, config: Mapping[str, Any] | None, *, prose: bool = False) -> str:
        """The config without its N: ``ngram[min=3,max=5]`` (a series in a plot), or ``off``."""
        if not config:
            return OFF_PROSE if prose else OFF
        method = str(config.get("method"))
        shown = self._shown.get(method, [])
        if not shown:
            return method
        parts = []
        for k in shown:
            v = config.get(k)
            text = str(v) if k == "model" and method in self._full_draft else _value(k, v)
            parts.append(f"{SHORT.get(k, k)}={text}")
        return f"{method}[{','.join(parts)}]"

    def __call__(self, config: Mapping[str, Any] | None, *, prose: bool = False) -> str:
        """``ngram[min=3,max=5] N=3``; the baseline ``off`` (``off (no speculation)`` in
        prose)."""
        if not config:
            return OFF_PROSE if prose else OFF
        return f"{self.variant(config)} N={config.get('num_speculative_tokens', '?')}"


PLAIN = Labels()
"""Labels without context: ``method N=n``."""
