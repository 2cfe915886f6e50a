"""The preflight of a study run: what it would start, on what, from which weights, for how long.

``study run --dry-run`` prints it without starting anything; a real run refuses up front (one
line, exit 2, nothing written) what it shows cannot work: a GPU study on a machine without GPUs
and without ``--ray-address``, more tensor-parallel ranks than the machine has, weights that are
neither local nor downloadable. Nothing here talks to Ray or starts an engine, and the hub is
asked only with ``check_hub`` (otherwise its state is read from ``HF_HUB_OFFLINE``).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import AutotuneError
from autotune.search.space import SearchSpace
from autotune.spec.loader import ResolvedStudy

if TYPE_CHECKING:
    from autotune.cluster.devices import Devices
    from autotune.engine.models import Weights
    from autotune.store import Store, StudyRecord

NO_GPU = "no GPU here: use a GPU node, --ray-address ADDRESS, or a replay study (--landscape)"

_TRUE = ("1", "on", "yes", "true")


class CannotRunError(AutotuneError):
    """The preflight shows the run cannot work (exit code 2, nothing written or started)."""

    exit_code = 2


@dataclass(frozen=True)
class WeightsLine:
    role: str
    """``target`` or the draft's method."""
    ref: str
    state: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"role": self.role, "ref": self.ref, "state": self.state, "detail": self.detail}


@dataclass(frozen=True)
class Preflight:
    """A study run's plan and what stands in its way (``problems`` empty: it can go)."""

    study: str
    model: str
    engine: str
    sampler: str
    space_size: int
    done: int
    """Engine configs earlier runs finished (complete or failed)."""
    planned: tuple[str, ...]
    """The configs the strategy starts first (grid: every one still to run)."""
    planned_all: bool
    """Whether ``planned`` is the whole rest of the run (grid), not its first batch."""
    levels: int
    """Measured (workload, concurrency) levels per engine config."""
    repeats: int
    tensor_parallel_size: int
    devices: str
    engines_at_once: int | None
    weights: tuple[WeightsLine, ...]
    hub: str
    engine_hours: float | None
    """Estimated engine-hours of the whole rest of the space (None: unknown)."""
    estimate_basis: str
    budget_hours: float | None
    budget_configs: int | None
    problems: tuple[str, ...] = ()
    budget_wall_minutes: float | None = None
    notes: tuple[str, ...] = field(default=())
    wall_plan: str = ""
    """What the wall budget buys: how many of the planned configs, and which ("": no wall
    budget)."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "study": self.study,
            "ok": self.ok,
            "problems": list(self.problems),
            "notes": list(self.notes),
            "model": self.model,
            "engine": self.engine,
            "sampler": self.sampler,
            "space_size": self.space_size,
            "done": self.done,
            "planned": list(self.planned),
            "planned_all": self.planned_all,
            "levels": self.levels,
            "repeats": self.repeats,
            "tensor_parallel_size": self.tensor_parallel_size,
            "devices": self.devices,
            "engines_at_once": self.engines_at_once,
            "weights": [w.to_json() for w in self.weights],
            "hub": self.hub,
            "engine_hours": None if self.engine_hours is None else round(self.engine_hours, 2),
            "estimate_basis": self.estimate_basis,
            "budget": {
                "max_engine_hours": self.budget_hours,
                "max_engine_configs": self.budget_configs,
                "max_wall_minutes": self.budget_wall_minutes,
            },
            "wall_plan": self.wall_plan,
        }

    def lines(self) -> list[str]:
        """The plan as ``study run --dry-run`` prints it."""
        rest = self.space_size - self.done
        which = "every one" if self.planned_all else "first batch"
        out = [
            f"study {self.study}: {self.model}, {self.engine} engines, sampler {self.sampler}",
            f"space      {self.space_size} engine configs ({self.done} done, {rest} to go), "
            f"{self.levels} levels x {self.repeats} repeats each",
            f"plan       {which}: {', '.join(self.planned) or '(nothing left)'}",
            f"devices    tensor_parallel_size={self.tensor_parallel_size} per engine; "
            f"{self.devices}",
        ]
        for w in self.weights:
            out.append(f"weights    {w.role}: {w.ref}: {w.state} ({w.detail})")
        if self.engine in ("vllm", "vllm-serve"):
            out.append(f"hub        {self.hub}")
        out.append(f"estimate   {self.estimate_line()}")
        if self.wall_plan:
            out.append(f"wall       {self.wall_plan}")
        out += [f"note       {n}" for n in self.notes]
        if self.problems:
            out += [f"cannot run: {p}" for p in self.problems]
        else:
            out.append("ready: nothing above stops this run")
        return out

    def estimate_line(self) -> str:
        budget = []
        if self.budget_hours is not None:
            budget.append(f"{self.budget_hours:g} engine-hours")
        if self.budget_configs is not None:
            budget.append(f"{self.budget_configs} engine configs")
        if self.budget_wall_minutes is not None:
            budget.append(f"{self.budget_wall_minutes:g} wall-minutes a run")
        against = f"; budget {' and '.join(budget)}" if budget else "; no budget set"
        if self.engine_hours is None:
            return f"engine-hours unknown ({self.estimate_basis}){against}"
        rest = self.space_size - self.done
        fits = ""
        if self.budget_hours is not None:
            fits = (
                "; fits"
                if self.engine_hours <= self.budget_hours
                else "; the budget stops it first"
            )
        scope = f"the {rest} configs to go"
        if self.sampler == "model":
            scope = f"at most, all {rest} configs to go (the model strategy starts fewer)"
        return (
            f"{self.engine_hours:,.2f} engine-hours for {scope}, from {self.estimate_basis}"
            f"{against}{fits}"
        )


def hub_offline(env: dict[str, str] | None = None) -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set (here, or in the engines' environment ``env``)."""
    values = [os.environ.get("HF_HUB_OFFLINE", ""), (env or {}).get("HF_HUB_OFFLINE", "")]
    return any(v.strip().lower() in _TRUE for v in values)


def needs_gpu(study: ResolvedStudy) -> bool:
    """A GPU study: a catalog model that is not a local build (the catalog's tensor-parallel
    sizes come from GPU recipes), or one whose catalog tensor_parallel_size is above 1."""
    if study.model_alias is None:
        return False
    from autotune.engine.models import locate_weights
    from autotune.spec.catalog import load_catalog

    entry = load_catalog().models.get(study.model_alias)
    if entry is None:
        return False
    if entry.tensor_parallel_size.get("default", 1) > 1:
        return True
    return locate_weights(entry.model).state != "local-build"


def checkpoints(study: ResolvedStudy) -> list[tuple[str, str]]:
    """(role, ref) of every checkpoint the study's engines load: the target, then the drafts."""
    out = [("target", study.model)]
    seen = {study.model}
    for m in study.methods:
        if m.draft and m.draft not in seen:
            seen.add(m.draft)
            out.append((f"{m.method} draft", m.draft))
    return out


def problems(
    study: ResolvedStudy,
    *,
    ray_address: str | None = None,
    devices: Devices | None = None,
    weights: Sequence[Weights] = (),
    hub_problem: str | None = None,
) -> list[str]:
    """What stops a run of ``study`` here (empty: nothing the preflight can see)."""
    if study.spec.engine.kind == "imported":
        engine = study.spec.engine
        return [f"it was imported from {engine.tool} output ({engine.path}): nothing to run"]
    if study.spec.engine.kind == "replay":
        return []
    from autotune.cluster.devices import local_devices

    found: list[str] = []
    tp = study.tensor_parallel_size
    if ray_address is None:
        d = devices or local_devices()
        if not d.gpus and needs_gpu(study):
            gpus = f"{tp} GPU{'s' if tp != 1 else ''}"
            found.append(NO_GPU.replace(":", f" ({study.model} needs {gpus} per engine):", 1))
        elif not d.gpus and tp > d.cores:
            found.append(
                f"tensor_parallel_size={tp} on the CPU needs {tp} cores; this process may use "
                f"{d.cores}: use a GPU node or --ray-address ADDRESS"
            )
        elif d.gpus and tp > d.gpus:
            found.append(
                f"tensor_parallel_size={tp} needs {tp} GPUs on one node; this one has {d.gpus}: "
                "use a bigger node or --ray-address ADDRESS"
            )
        # A missing target stops every engine; a missing draft fails only the configs that
        # load it (failed trials with their reason, the rest of the study goes on).
        found += [
            f"{w.ref}: {w.detail}" for w in weights if w.state == "missing" and w.ref == study.model
        ]
        absent = [w.ref for w in weights if not w.here and w.state != "missing"]
        if absent and hub_offline(study.env):
            found.append(
                f"weights not local and the hub is offline (HF_HUB_OFFLINE): {', '.join(absent)}"
                " (download them first: hf download REPO, or unset HF_HUB_OFFLINE)"
            )
        elif absent and hub_problem:
            found.append(f"weights not local and {hub_problem}: {', '.join(absent)}")
    return found


def refuse(study: ResolvedStudy, name: str, ray_address: str | None) -> None:
    """Raise :class:`CannotRunError` (one line) when the preflight shows the run cannot work."""
    if study.spec.engine.kind == "imported":
        raise CannotRunError(
            f"study {name!r} was imported from {study.spec.engine.tool} output "
            f"({study.spec.engine.path}): there is nothing to run; `autotune recommend` and "
            f"`autotune report {name}` read it"
        )
    if study.spec.engine.kind == "replay":
        return
    from autotune.engine.models import locate_weights

    revision = study.engine_args.get("revision")
    weights = [
        locate_weights(ref, revision if role == "target" else None)
        for role, ref in checkpoints(study)
    ]
    found = problems(study, ray_address=ray_address, weights=weights)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise CannotRunError(
            f"study {name!r} cannot run here: {found[0]}{more}; "
            f"autotune study run {name} --dry-run shows the plan"
        )


def check_hub(ref: str) -> str | None:
    """Ask the hub about ``ref`` (a network request: only with ``--check-hub``); None when the
    hub answers that it has it, else why not."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        HfApi().model_info(ref, timeout=10)
    except GatedRepoError:
        return f"{ref} is gated on the hub: log in (hf auth login) with access to it"
    except RepositoryNotFoundError:
        return f"the hub has no {ref} (or it is private)"
    except Exception as exc:  # any transport error: the hub is not usable from here
        return f"the hub is not reachable ({type(exc).__name__})"
    return None


def preflight(
    store: Store,
    record: StudyRecord,
    *,
    ray_address: str | None = None,
    num_gpus: int | None = None,
    max_engines: int | None = None,
    check_hub_now: bool = False,
) -> Preflight:
    """The plan of the next run of ``record`` and what would stop it. Reads the store; writes
    nothing, starts nothing; asks the hub only with ``check_hub_now``."""
    study = ResolvedStudy.from_json(record.resolved_json)
    space = SearchSpace(study)
    kind = _engine_kind(study)
    done, rows = _finished(store, record, study)
    planned, planned_all = _plan(study, space, done, rows)
    notes: list[str] = []
    weights: list[WeightsLine] = []
    located: list[Weights] = []
    hub = "not used (replay engines load no weights)"
    hub_problem: str | None = None
    devices_line, at_once = _devices(study, ray_address, num_gpus, max_engines, notes)
    if kind != "replay":
        from autotune.engine.models import locate_weights

        revision = study.engine_args.get("revision")
        for role, ref in checkpoints(study):
            w = locate_weights(ref, revision if role == "target" else None)
            located.append(w)
            state = {"download": "would be downloaded", "partial": "partly cached"}.get(
                w.state, w.state
            )
            weights.append(WeightsLine(role, ref, state, w.detail))
        if hub_offline(study.env):
            hub = "offline (HF_HUB_OFFLINE is set): only local and cached weights load"
        elif not check_hub_now:
            hub = "not checked (--check-hub asks it; HF_HUB_OFFLINE=1 says it is offline)"
        else:
            missing = [w.ref for w in located if not w.here and w.state != "missing"]
            answers = [a for a in (check_hub(ref) for ref in missing) if a]
            hub_problem = answers[0] if answers else None
            hub = hub_problem or ("usable for " + ", ".join(missing) if missing else "not needed")
        notes += [
            f"draft {w.ref}: {w.detail}: the configs that load it will fail"
            for w in located
            if w.state == "missing" and w.ref != study.model
        ]
        if ray_address is not None:
            notes.append(
                "with --ray-address the weights load on the cluster's nodes: the cache shown "
                "is this machine's"
            )
    hours, basis = _estimate(store, record, study, space, done)
    budget = study.spec.budget
    wall_plan = ""
    if budget.max_wall_minutes is not None:
        wall_plan = _wall_plan(
            budget.max_wall_minutes, hours, len(space) - len(done), basis, planned, planned_all
        )
    return Preflight(
        study=record.name,
        model=study.model,
        engine=kind,
        sampler=study.spec.sampler,
        space_size=len(space),
        done=len(done),
        planned=tuple(planned),
        planned_all=planned_all,
        levels=len(study.measured_names()) * len(study.spec.concurrency),
        repeats=study.spec.repeats,
        tensor_parallel_size=study.tensor_parallel_size,
        devices=devices_line,
        engines_at_once=at_once,
        weights=tuple(weights),
        hub=hub,
        engine_hours=hours,
        estimate_basis=basis,
        budget_hours=budget.max_engine_hours,
        budget_configs=budget.max_engine_configs,
        budget_wall_minutes=budget.max_wall_minutes,
        problems=tuple(
            problems(study, ray_address=ray_address, weights=located, hub_problem=hub_problem)
        ),
        notes=tuple(notes),
        wall_plan=wall_plan,
    )


def _wall_plan(
    minutes: float,
    hours: float | None,
    rest: int,
    basis: str,
    planned: Sequence[str],
    planned_all: bool,
) -> str:
    """How many configs a ``minutes`` wall budget buys, at the estimate's engine time per
    config (start-up is the run's own, measured apart once it starts), and which."""
    from autotune.search.wall_budget import configs_bought

    if hours is None or rest <= 0:
        return (
            f"{minutes:g} min a run; how many configs that buys is known once a config of this "
            "model has finished here (each run measures its start-up apart from its configs)"
        )
    per_config = hours * 3600 / rest
    n = configs_bought(minutes, per_config, 0.0, rest)
    listed = list(planned[:n]) if planned_all or n <= len(planned) else list(planned)
    which = ", ".join(listed) + (" ..." if n > len(listed) else "")
    if not planned_all and n > len(planned):
        which += " (then what the strategy ranks next)"
    return (
        f"{minutes:g} min a run buys {n} of {rest} configs at ~{per_config:,.0f} engine-s each "
        f"(plus the run's one-time start-up): {which}"
    )


# --- the parts ---------------------------------------------------------------------------------


def _engine_kind(study: ResolvedStudy) -> str:
    engine = study.spec.engine
    if engine.kind == "vllm" and getattr(engine, "client", None) == "server":
        return "vllm-serve"
    return str(engine.kind)


def _finished(
    store: Store, record: StudyRecord, study: ResolvedStudy
) -> tuple[dict[str, float | None], list[Any]]:
    """Config key -> value (None: failed) of the finished trials, and their measurements."""
    from autotune.evidence.objectives import study_objective
    from autotune.store import FINISHED_STATES, MEASURED_STATES

    objective = study_objective(study.spec)
    rows = store.measurements(study=record.name)
    by_trial: dict[int, list[Any]] = {}
    for r in rows:
        by_trial.setdefault(r.trial_id, []).append(r)
    done: dict[str, float | None] = {}
    for t in store.trials(record):
        if t.state in FINISHED_STATES and t.config_key not in done:
            complete = t.state in MEASURED_STATES and by_trial.get(t.id)
            done[t.config_key] = objective(by_trial[t.id]) if complete else None
    return done, rows


def _plan(
    study: ResolvedStudy, space: SearchSpace, done: dict[str, float | None], rows: list[Any]
) -> tuple[list[str], bool]:
    """The labels of the configs the strategy starts first, and whether that is all of them."""
    from autotune.spec.labels import Labels

    labels = Labels(c.speculative_config() for c in space.configs())
    if study.spec.sampler == "model":
        from autotune.search.model_strategy import ModelStrategy
        from autotune.search.strategy import SearchState

        state = SearchState(study=study, space=space, rows=rows, done=done, in_flight=frozenset())
        first = ModelStrategy(study).propose(state, max(1, len(space)), fill=False)
        return [c.label(labels) for c in first], False
    rest = [c for c in space.configs() if c.key() not in done]
    if study.spec.sampler == "grid":
        return [c.label(labels) for c in rest], True
    return [f"{len(rest)} configs as Optuna's {study.spec.sampler} sampler picks them"], False


def _devices(
    study: ResolvedStudy,
    ray_address: str | None,
    num_gpus: int | None,
    max_engines: int | None,
    notes: list[str],
) -> tuple[str, int | None]:
    """What the engines run on, and how many at once (None: not known before Ray answers)."""
    tp = study.tensor_parallel_size
    if ray_address is not None:
        return f"the Ray cluster at {ray_address} (not asked in a dry run)", None
    if study.spec.engine.kind == "replay":
        if num_gpus is None:
            return "replay engines in this process, one at a time (no GPU needed)", 1
        at_once = num_gpus // tp
        return f"{num_gpus} logical GPUs (--num-gpus): {at_once} replay engines at once", at_once
    from autotune.cluster.devices import local_devices

    d = local_devices()
    if num_gpus is not None and not d.gpus:
        notes.append("--num-gpus gives Ray logical GPUs: vLLM engines still need real ones")
    at_once = d.engines_at_once(tp)
    if max_engines is not None:
        at_once = min(at_once, max_engines)
    where = ("GPU" if d.gpus else "core") + ("s" if tp != 1 else "")
    engines = "1 engine at a time" if at_once == 1 else f"{at_once} engines at once"
    return f"this machine: {d.line()}; {engines} ({tp} {where} each)", at_once


def _estimate(
    store: Store,
    record: StudyRecord,
    study: ResolvedStudy,
    space: SearchSpace,
    done: dict[str, float | None],
) -> tuple[float | None, str]:
    """Engine-hours for every config still to run: a replay's recorded times, else the median
    engine-seconds of finished engine configs of the same model in this store."""
    rest = [c for c in space.configs() if c.key() not in done]
    if study.landscape is not None:
        return _landscape_hours(Path(study.landscape), study, rest)
    seconds = [
        t.engine_seconds
        for other in store.list_studies()
        if other.model == record.model
        for t in store.trials(other)
        if t.state == "complete" and t.engine_seconds
    ]
    if not seconds:
        return None, f"no engine of {study.model} has finished in this store yet"
    per_config = statistics.median(seconds)
    return (
        per_config * len(rest) / 3600,
        f"the median of {len(seconds)} finished engine configs of this model in the store "
        f"({per_config:,.0f} s each)",
    )


def _landscape_hours(path: Path, study: ResolvedStudy, rest: Sequence[Any]) -> tuple[float, str]:
    """A replay's engine-hours: each config's recorded start plus its levels' recorded
    measurement times x the study's repeats."""
    from autotune.engine.readers.landscape import read_landscape
    from autotune.spec.knobs import params_key

    points = read_landscape(path)
    start: dict[tuple[Any, ...], list[float]] = {}
    cell: dict[tuple[Any, ...], list[float]] = {}
    for p in points:
        key = (p.method, p.draft, p.num_speculative_tokens, params_key(dict(p.params)))
        start.setdefault(key, []).append(p.engine_start_s)
        cell.setdefault((*key, p.workload, p.concurrency), []).append(p.measure_s)
    with_params = any(p.params for p in points)  # as the replay engine names configs
    total = 0.0
    for c in rest:
        knobs = params_key(c.method_params) if with_params else ""
        key = (c.method, c.draft, c.num_speculative_tokens, knobs)
        if key not in start:
            continue  # not recorded: fails at once, costs nothing
        total += statistics.median(start[key])
        for (*k, _, _), times in cell.items():
            if tuple(k) == key:
                total += statistics.median(times) * study.spec.repeats
    return total / 3600, f"the landscape's recorded times ({path.name})"
