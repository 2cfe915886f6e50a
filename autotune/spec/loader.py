"""Reading study and workload YAML into specs, and resolving a study against the catalog.

Every problem becomes one :class:`SpecError` line naming the file and the field, e.g.
``studies/x.yaml: methods.0.num_speculative_tokens.max: Input should be less than or equal to 15``.
What resolution knows of the engine and the host comes in as :class:`EngineFacts`, built by the
layers above; the checks that need the engine's own readers (a replayed landscape's rows) run
there too (``autotune.engine.resolution``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field, ValidationError

from autotune.errors import SpecError
from autotune.spec._base import StrictModel
from autotune.spec.catalog import load_catalog, tensor_parallel_for
from autotune.spec.consent import check_engine_args, check_env
from autotune.spec.context import base_workload, bucket_name
from autotune.spec.drafts import block_draft, unknown_block_reason
from autotune.spec.engine_facts import EngineFacts
from autotune.spec.knobs import check_params, cpu_warnings
from autotune.spec.methods import METHODS, RuleContext, block_width, check, max_n
from autotune.spec.reading import MAX_SPEC_BYTES, excerpt, read_text, regular_file
from autotune.spec.reading import load_yaml as parse_yaml
from autotune.spec.study import MethodSpec, NRange, StudySpec
from autotune.spec.workload import WorkloadSpec

M = TypeVar("M", bound=BaseModel)

_REPO_WORKLOADS = Path(__file__).resolve().parents[2] / "workloads"


def display_path(path: Path) -> str:
    """``path`` relative to the working directory where it is under it (how errors name files)."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except (ValueError, RuntimeError, OSError):  # not under it; a symlink loop (3.11: Runtime)
        return str(path)


def read_text_capped(path: Path, source: str, limit: int = MAX_SPEC_BYTES) -> str:
    """A regular UTF-8 text file of at most ``limit`` bytes (``autotune.spec.reading``)."""
    return read_text(path, source, limit)


def load_yaml(path: Path) -> dict[str, Any]:
    """Parse a YAML mapping (bounded: ``autotune.spec.reading``); syntax errors name the file,
    line and column."""
    source = display_path(path)
    data = parse_yaml(read_text_capped(path, source), source)
    if not isinstance(data, dict):
        raise SpecError("expected a mapping at the top level", source=source)
    return data


def validate(model: type[M], data: Any, source: str) -> M:
    """Validate ``data`` as ``model``; every error becomes one line of a SpecError."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise spec_error_from(exc, source, model) from None


def spec_error_from(
    exc: ValidationError, source: str, model: type[BaseModel] | None = None
) -> SpecError:
    """All of a validation's errors, one line each (``source: field: message``), with a
    "did you mean" for a misspelt key or value."""
    lines = []
    for err in exc.errors():
        # Discriminated unions add the tag as a path element ("source.jsonl.path"); keep it,
        # it tells the user which kind was assumed.
        loc = excerpt(".".join(str(p) for p in err["loc"])) or None
        lines.append((loc, _message(err, model)))
    # One line: the first error, and how many more. Listing each would quote the file's
    # content line after line (a file that is not a spec at all, such as /etc/shadow, parses
    # as a mapping whose keys are its lines).
    first_loc, first_msg = lines[0]
    more = len(lines) - 1
    tail = f" (and {more} more error{'s' if more != 1 else ''})" if more else ""
    return SpecError(first_msg + tail, source=source, field=first_loc)


def _message(err: Any, model: type[BaseModel] | None) -> str:
    import difflib

    msg = excerpt(err["msg"], 200)
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
        known = _keys_at(model, err["loc"][:-1]) if model else []
        guess = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
        if guess:
            msg += f"; did you mean {guess[0]!r}?"
        elif known:
            msg += f" (known: {', '.join(sorted(known))})"
    elif err["type"] in ("literal_error", "enum"):
        expected = re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", "")))
        guess = difflib.get_close_matches(str(err.get("input")), expected, n=1)
        if guess:
            msg += f"; did you mean {guess[0]!r}?"
    return msg


def _keys_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """The field names of the (nested) model at ``loc``, following lists, dicts and unions."""
    current: Any = model
    for part in loc:
        current = _model_in(current)
        if current is None:
            return []
        if isinstance(part, str) and part in current.model_fields:
            current = current.model_fields[part].annotation
        # a list index or dict key: the next step unwraps list[X] / dict[str, X] to X
    found = _model_in(current)
    return list(found.model_fields) if found else []


def _model_in(tp: Any) -> type[BaseModel] | None:
    """The BaseModel inside an annotation such as ``X | None``, ``list[X]``, ``dict[str, X]``."""
    import typing

    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    for arg in reversed(typing.get_args(tp)):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


# --- workloads -------------------------------------------------------------------------------


def workload_dirs() -> list[Path]:
    """Where workload names are looked up, first match wins."""
    dirs: list[Path] = []
    env = os.environ.get("AUTOTUNE_WORKLOADS")
    if env:
        dirs.extend(Path(p) for p in env.split(os.pathsep) if p)
    dirs.append(Path.cwd() / "workloads")
    dirs.append(_REPO_WORKLOADS)
    unique: list[Path] = []
    for d in dirs:
        if all(d.resolve() != u.resolve() for u in unique):
            unique.append(d)
    return unique


def find_workload(name: str) -> Path:
    """The YAML file of a workload given by name (``code``) or path (``my/wl.yaml``)."""
    if name.endswith((".yaml", ".yml")) or os.sep in name:
        path = Path(name)
        regular_file(path, excerpt(name), "workload file")
        return path
    for d in workload_dirs():
        for ext in (".yaml", ".yml"):
            path = d / f"{name}{ext}"
            if path.is_file():
                return path
    known = ", ".join(sorted(list_workload_names())) or "none"
    raise SpecError(f"unknown workload {name!r} (known: {known})", source="workloads")


def list_workload_names() -> list[str]:
    names: set[str] = set()
    for d in workload_dirs():
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.y*ml"))
    return sorted(names)


def load_workload(name: str) -> tuple[WorkloadSpec, Path]:
    """The validated spec of a workload and the file it came from."""
    path = find_workload(name)
    spec = validate(WorkloadSpec, load_yaml(path), display_path(path))
    return spec, path


# --- studies ---------------------------------------------------------------------------------


class ResolvedMethod(StrictModel):
    """A method of a resolved study: draft, N values and parameters all filled in."""

    method: str = Field(description="vLLM's method name.")
    draft: str | None = Field(description="Draft checkpoint, when the method needs one.")
    num_speculative_tokens: NRange = Field(description="N range to search.")
    params: dict[str, Any] = Field(
        description="Knobs (autotune.spec.knobs): a value, or a list of values whose "
        "combinations are the method's variants."
    )
    parallel_draft: bool = Field(description="Drafts all N tokens in one pass.")
    prefix_consistent: bool = Field(description="Draft at position i independent of N.")


class ResolvedWorkload(StrictModel):
    """A workload snapshot taken when the study was created."""

    spec: WorkloadSpec = Field(description="The workload spec as it was at creation.")
    base_dir: str = Field(description="Directory of the workload file (for relative paths).")


class ContextBucket(StrictModel):
    """A context-length bucket as built at ``study create``: its target and its prompts' real
    token counts (the target's tokenizer, chat template included, as the engine sends them)."""

    workload: str = Field(description="The workload the bucket grows.")
    context_length: int = Field(description="The bucket's target, in prompt tokens.")
    num_prompts: int = Field(description="Prompts in the bucket.")
    prompt_tokens_mean: float = Field(description="Mean prompt tokens per prompt.")
    prompt_tokens_min: int = Field(description="Shortest prompt, in tokens.")
    prompt_tokens_max: int = Field(description="Longest prompt, in tokens.")
    digest: str = Field(description="The bucket's workload digest (its measurements').")


class ResolvedStudy(StrictModel):
    """A study with the catalog applied: what the tuner runs, stored as JSON with the study."""

    spec: StudySpec = Field(description="The study file as written.")
    model_alias: str | None = Field(description="Catalog alias, when the model is one.")
    model: str = Field(description="HF id or path of the target.")
    tensor_parallel_size: int = Field(description="GPUs per engine.")
    engine_args: dict[str, Any] = Field(description="vLLM engine args (catalog ∪ study).")
    env: dict[str, str] = Field(description="Engine process environment.")
    methods: list[ResolvedMethod] = Field(description="Methods to search.")
    workloads: dict[str, ResolvedWorkload] = Field(description="Workloads by name.")
    warnings: list[str] = Field(default_factory=list, description="Rule warnings.")
    landscape: str | None = Field(None, description="Absolute path of a replayed landscape.")
    trust_remote_code: bool = Field(
        False, description="Whether the engine may run code shipped with the checkpoints."
    )
    trust_remote_code_by: str | None = Field(
        None, description="Who consented: the study file, or the catalog entry (with its source)."
    )
    context_buckets: dict[str, ContextBucket] = Field(
        default_factory=dict,
        description="The context-length buckets by measured workload name (WORKLOAD@ctxL), as "
        "built at study create; empty without context_lengths.",
    )

    def measured_names(self) -> list[str]:
        """The workloads the study measures: with ``context_lengths``, one ``WORKLOAD@ctxL``
        per (workload, bucket); else the study's workloads (a replayed landscape's names)."""
        lengths = self.spec.context_lengths
        if not lengths or self.landscape is not None:
            return list(self.spec.workloads)
        return [bucket_name(w, n) for w in self.spec.workloads for n in lengths]

    def measured_workload(self, name: str) -> tuple[WorkloadSpec, Path]:
        """Workload ``name`` as the study measures it: its snapshot with the study's
        ``measurement.max_prompts``/``max_tokens`` caps applied, and its base directory (what
        ``autotune.datasets.prepare`` takes). A bucket (``WORKLOAD@ctxL``) gives its
        workload's; ``autotune.datasets.context`` grows its prompts."""
        w = self.workloads[base_workload(name)]
        m = self.spec.measurement
        caps: dict[str, Any] = {}
        if m.max_prompts is not None and m.max_prompts < w.spec.num_prompts:
            caps["num_prompts"] = m.max_prompts
        if m.max_tokens is not None and m.max_tokens < w.spec.max_tokens:
            caps["max_tokens"] = m.max_tokens
        return w.spec.model_copy(update=caps), Path(w.base_dir)

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> ResolvedStudy:
        return cls.model_validate_json(text)


def load_study_file(path: Path) -> StudySpec:
    return validate(StudySpec, load_yaml(path), display_path(path))


def resolve_study(
    spec: StudySpec,
    source: str,
    platform: str | None = None,
    engine: EngineFacts | None = None,
) -> ResolvedStudy:
    """Apply the catalog and the method rules; raise SpecError on the first broken rule.

    ``engine`` is what the layers above know of the engine and this host
    (``autotune.engine.resolution.engine_facts()``: what ``study create`` passes); without it
    the study is resolved from its YAML alone (:class:`EngineFacts`' defaults). ``platform``
    resolves for another platform than the facts' (the host's device is then not used).
    """
    engine = engine if engine is not None else EngineFacts()
    platform = platform or engine.platform
    catalog = load_catalog()
    found = catalog.resolve(spec.model.name)
    if found is None and _looks_like_alias(spec.model.name):
        known = ", ".join(sorted(catalog.models))
        raise SpecError(
            f"unknown model alias {spec.model.name!r} (known: {known}; or give an HF id or path)",
            source=source,
            field="model.name",
        )
    alias, entry = found if found else (None, None)

    model = entry.model if entry else spec.model.name
    tp = spec.model.tensor_parallel_size or (
        _catalog_tp(entry.tensor_parallel_size, platform, engine) if entry else 1
    )
    check_engine_args(spec.model.engine_args, source, engine, trusted=spec.trust_remote_code)
    trust, trust_by = _trust_remote_code(spec, alias, entry)
    # The environment needs the study's own consent: the catalog's covers the model's code only.
    check_env(spec.model.env, source, trusted=spec.trust_remote_code, engine=engine)
    engine_args = {**(entry.engine_args if entry else {}), **spec.model.engine_args}
    if trust:
        engine_args["trust_remote_code"] = True
    env = {**(entry.env if entry else {}), **spec.model.env}

    method_specs = list(spec.methods)
    from_catalog = not method_specs
    if not method_specs:
        if entry is None:
            raise SpecError(
                "no methods given and the model is not in the catalog",
                source=source,
                field="methods",
            )
        method_specs = [MethodSpec(method=m) for m in entry.methods]

    warnings: list[str] = []
    methods: list[ResolvedMethod] = []
    for i, m in enumerate(method_specs):
        field = f"methods.{i}"
        rule = METHODS[m.method]
        cat = entry.methods.get(m.method) if entry else None
        draft = m.draft or (cat.draft if cat else None)
        if rule.needs_draft and not draft:
            raise SpecError(
                f"method {m.method} needs a draft checkpoint and the catalog has none for "
                f"{spec.model.name}; set draft",
                source=source,
                field=f"{field}.draft",
            )
        if not rule.accepts_draft and m.draft:
            raise SpecError(
                f"method {m.method} takes no draft checkpoint",
                source=source,
                field=f"{field}.draft",
            )
        if rule.requires_package and importlib.util.find_spec(rule.requires_package) is None:
            raise SpecError(
                f"method {m.method} needs the {rule.requires_package} package installed",
                source=source,
                field=f"{field}.method",
            )
        block = block_draft(draft) if rule.parallel_draft else None
        if rule.n_is_block and block is None and not (cat and cat.block_size):
            # N is the draft's trained block; without its config.json there is no N to run.
            why = unknown_block_reason(draft)
            if from_catalog:
                warnings.append(f"{field}: {m.method} skipped: {why}")
                continue
            raise SpecError(why, source=source, field=f"{field}.draft")
        ctx = RuleContext(
            mtp_layers=entry.mtp_layers if entry else None,
            # The draft's own config.json wins over the catalog: it is what vLLM will read.
            block_size=block.block_size if block else (cat.block_size if cat else None),
            sample_from_anchor=block.sample_from_anchor if block else True,
            mla_attention=entry.mla_attention if entry else False,
            platform=platform,
            allow_rocm_mla_override=spec.model.allow_rocm_mla_override,
            tensor_parallel_size=tp,
            **_vocab_sizes(m.method, model, draft),
        )
        width = block_width(m.method, ctx)
        if m.num_speculative_tokens is not None:
            n_range = m.num_speculative_tokens
        elif width is not None:
            n_range = NRange(min=width, max=width)  # the draft's block fixes N
        else:
            hi = min(cat.n_max, max_n(m.method, ctx)) if cat and cat.n_max else max_n(m.method, ctx)
            n_range = NRange(min=1, max=hi)
        params: dict[str, Any] = {**(cat.params if cat else {}), **m.params}
        # Knob rules first: their errors name the knob (methods.0.params.prompt_lookup_min).
        for knob, why in check_params(m.method, params, tensor_parallel_size=tp):
            where = f"{field}.params.{knob}" if knob else f"{field}.params"
            raise SpecError(why, source=source, field=where)
        why_not = _parallel_drafting_refused(params, draft)
        if why_not:
            raise SpecError(why_not, source=source, field=f"{field}.params.parallel_drafting")
        result = check(m.method, n_range.values(), ctx)
        if result.errors:
            sub = (
                "num_speculative_tokens"
                if "num_speculative_tokens" in result.errors[0]
                else (
                    "params"
                    if "param" in result.errors[0] or "prompt_lookup" in result.errors[0]
                    else "draft"
                    if "vocabulary" in result.errors[0]
                    else "method"
                )
            )
            raise SpecError(result.errors[0], source=source, field=f"{field}.{sub}")
        warnings.extend(f"{field}: {w}" for w in result.warnings)
        if platform == "cpu" and not rule.runs_on_cpu:
            warnings.append(f"{field}: {m.method} does not run on vLLM's CPU build")
        if platform == "cpu":
            warnings.extend(f"{field}.params: {w}" for w in cpu_warnings(params))
        methods.append(
            ResolvedMethod(
                method=m.method,
                draft=draft,
                num_speculative_tokens=n_range,
                params=params,
                parallel_draft=rule.parallel_draft,
                prefix_consistent=rule.prefix_consistent,
            )
        )

    workloads: dict[str, ResolvedWorkload] = {}
    landscape: Path | None = None
    if spec.engine.kind == "replay":
        # A replayed study's workloads are the landscape's names, not workload files; that
        # they are its names is checked by the engine's reader (autotune.engine.resolution).
        landscape = landscape_path(spec.engine.landscape, source)
        if not landscape.is_file():
            raise SpecError("landscape file not found", source=source, field="engine.landscape")
    elif spec.engine.kind == "imported":
        pass  # an imported sweep's workloads are the names it recorded (autotune import)
    else:
        for i, name in enumerate(spec.workloads):
            try:
                wspec, wpath = load_workload(name)
            except SpecError as exc:
                if exc.source == "workloads":  # unknown name: point at the study's field
                    raise SpecError(exc.reason, source=source, field=f"workloads.{i}") from None
                raise
            workloads[name] = ResolvedWorkload(spec=wspec, base_dir=str(wpath.parent.resolve()))

    _check_context_lengths(spec, engine_args, workloads, source)
    return ResolvedStudy(
        spec=spec,
        model_alias=alias,
        model=model,
        tensor_parallel_size=tp,
        engine_args=engine_args,
        env=env,
        methods=methods,
        workloads=workloads,
        warnings=warnings,
        landscape=str(landscape.resolve()) if landscape else None,
        trust_remote_code=trust,
        trust_remote_code_by=trust_by,
    )


def landscape_path(landscape: str, source: str) -> Path:
    """A replay study's ``engine.landscape`` as a path: a relative one is under the folder of
    the study file ``source``."""
    path = Path(landscape)
    return path if path.is_absolute() else Path(source).parent / path


def _check_context_lengths(
    spec: StudySpec,
    engine_args: dict[str, Any],
    workloads: dict[str, ResolvedWorkload],
    source: str,
) -> None:
    """Each bucket plus each workload's output tokens must fit the model's ``max_model_len``
    (when the engine args give it), or vLLM would refuse the requests."""
    lengths = spec.context_lengths
    if not lengths:
        return
    if spec.engine.kind == "replay":
        raise SpecError(
            "a replayed landscape's workloads are its buckets already (WORKLOAD@ctxL names); "
            "drop context_lengths",
            source=source,
            field="context_lengths",
        )
    limit = engine_args.get("max_model_len")
    if not isinstance(limit, int) or isinstance(limit, bool):
        return
    cap = spec.measurement.max_tokens
    for i, length in enumerate(lengths):
        for name, w in workloads.items():
            out = min(w.spec.max_tokens, cap) if cap else w.spec.max_tokens
            if length + out > limit:
                raise SpecError(
                    f"{length} prompt tokens + {out} output tokens of workload {name} exceed "
                    f"the model's max_model_len ({limit})",
                    source=source,
                    field=f"context_lengths.{i}",
                )


def _trust_remote_code(spec: StudySpec, alias: str | None, entry: Any) -> tuple[bool, str | None]:
    """Consent comes from the study's top-level key, or from a catalog entry (which cites the
    model card or recipe that needs it)."""
    if spec.trust_remote_code:
        return True, "the study (trust_remote_code: true)"
    if entry is not None and entry.engine_args.get("trust_remote_code") is True:
        return True, f"the catalog entry {alias} ({entry.source})"
    return False, None


def _looks_like_alias(name: str) -> bool:
    # HF ids have an org ("google/gemma-4-31B-it"); paths have a separator or exist locally.
    return "/" not in name and os.sep not in name and not Path(name).exists()


def _catalog_tp(tp: dict[str, int], platform: str, engine: EngineFacts) -> int:
    # The device key (mi300x, h200, ...) is only known for the machine autotune runs on.
    device = engine.device_key() if platform == engine.platform else None
    return tensor_parallel_for(tp, platform, device)


def _local_config(ref: str | None) -> dict[str, Any] | None:
    if not ref or ref.startswith("tiny:"):
        return None
    path = Path(ref) / "config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


PARALLEL_DRAFT_TOKENS = ("mask_token_id", "dspark_noise_token_id", "pard_token", "ptd_token_id")
"""A draft's config.json keys, one of which vLLM needs for parallel drafting (the masked slots'
token; ``LLMBaseProposer._init_parallel_drafting_params``; DFlash's sits in ``dflash_config``)."""


def _parallel_drafting_refused(params: dict[str, Any], draft: str | None) -> str | None:
    """Why a draft whose config.json is at hand cannot draft in parallel (None: it can, or its
    config is not local; the engine start then says)."""
    values = params.get("parallel_drafting")
    if True not in (values if isinstance(values, list) else [values]):
        return None
    config = _local_config(draft)
    if config is None:
        return None
    if any(config.get(k) is not None for k in PARALLEL_DRAFT_TOKENS) or (
        "mask_token_id" in (config.get("dflash_config") or {})
    ):
        return None
    return (
        f"parallel_drafting needs a draft trained for it: {draft}'s config.json has none of "
        f"{', '.join(PARALLEL_DRAFT_TOKENS)} (vLLM's parallel drafter fills masked slots with it)"
    )


def _vocab_sizes(method: str, model: str, draft: str | None) -> dict[str, int | None]:
    if not METHODS[method].same_vocabulary:
        return {}
    t, d = _local_config(model), _local_config(draft)
    if not t or not d:
        return {}
    return {"target_vocab_size": t.get("vocab_size"), "draft_vocab_size": d.get("vocab_size")}


def quick_study_data(
    model: str,
    workloads: Sequence[str],
    name: str | None = None,
    concurrency: Sequence[int] = (),
    methods: Sequence[str] = (),
    repeats: int | None = None,
) -> dict[str, object]:
    """The study the quick-study flags describe: the catalog's methods and defaults for
    ``model`` unless ``methods``/``concurrency``/``repeats`` are given."""
    data: dict[str, object] = {
        "name": name or f"{model}-{'-'.join(workloads)}".lower().replace("/", "-"),
        "model": {"name": model},
        "workloads": list(workloads),
    }
    if concurrency:
        data["concurrency"] = list(concurrency)
    if methods:
        data["methods"] = [{"method": m} for m in methods]
    if repeats is not None:
        data["repeats"] = repeats
    return data
