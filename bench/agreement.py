"""`make bench-agreement`: do two identical studies rank configs the same way?

Creates the study of ``bench/record/agreement-tiny.yaml`` twice (``-a`` and ``-b`` suffixes) in
one store, runs them one after the other on real vLLM engines (``--gap-s`` seconds apart), and
prints per level: each study's answer (or its tie), the n-gram/baseline speedup with its 95%
interval (the combined intervals of the two medians, ``ConfigScore.tie_pct``), the runs each
config took to reach the precision, the baseline's drift between its two runs, an estimate of
the prefill share of the timed window, and the verdict: the two studies agree when they give
the same answer, or both call the level a tie.

``--fidelity`` then serves the second study's n-gram config and the baseline with ``vllm serve``
and drives them with ``vllm bench serve`` (``autotune verify``, the same prompts, output
lengths and levels) and prints the server-path speedup beside the study's, with their ratio.

The prefill share is estimated from what a measurement stores (p50 TTFT and p50 TPOT, output
tokens per request): TTFT / (TTFT + TPOT × (tokens - 1)), a median request's share of time
before its first token; the sum over requests is not stored.

``--confirm both`` runs the pair twice, with confirmation across engine starts off and on
(``measurement.confirm_starts``, :mod:`autotune.search.confirm`; four studies in all), and prints
the two agreement figures side by side with what confirmation cost (engine starts and
engine-seconds). ``--confirm on``/``off`` runs one pair with it forced on or off; without the flag
the study file decides.

``--landscape CSV`` replays a recorded sweep instead of starting real engines (the study's model
must be the landscape's): two replayed studies of one seed draw the same repeats, so the second
study takes the next seed, standing in for a second machine-day. Its figures check the harness and
the confirmation logic on recorded noise, not the protocol on hardware.

Numbers from a loaded machine say nothing about the protocol; record on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STUDY_FILE = REPO / "bench" / "record" / "agreement-tiny.yaml"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--study-file", type=Path, default=STUDY_FILE)
    p.add_argument("--db", help="SQLAlchemy URL of the store to use [a temporary SQLite file]")
    p.add_argument("--gap-s", type=float, default=0.0, help="seconds between the two studies")
    p.add_argument("--fidelity", action="store_true", help="also run vllm bench serve")
    p.add_argument("--fidelity-repeats", type=int, default=3)
    p.add_argument(
        "--quick",
        action="store_true",
        help="a reduced protocol to check the harness runs (32 tokens, 2 repeats, 10 s per "
        "level): its numbers mean nothing",
    )
    p.add_argument(
        "--confirm",
        choices=["study", "off", "on", "both"],
        default="study",
        help="confirmation across engine starts: as the study file says, forced off or on, or "
        "both (two pairs of studies, agreement side by side)",
    )
    p.add_argument("--landscape", type=Path, help="replay this recorded sweep (no real engines)")
    p.add_argument("--json", dest="json_path", type=Path, help="also write the result as JSON")
    args = p.parse_args(argv)
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")

    import yaml

    from autotune import api
    from autotune.store import Store

    data = yaml.safe_load(args.study_file.read_text())
    if args.quick:
        data["repeats"] = 2
        data["measurement"].update(
            max_tokens=32, min_measure_s=0, max_level_s=10, max_repeats=4, max_prompts=4
        )
    if args.landscape is not None:
        data["engine"] = {"kind": "replay", "landscape": str(args.landscape.resolve())}
    tmp = tempfile.TemporaryDirectory(prefix="autotune-agreement-")
    store = Store(args.db or f"sqlite:///{tmp.name}/agreement.db")
    modes = {"study": [None], "off": [False], "on": [True], "both": [False, True]}[args.confirm]
    results = []
    for confirm in modes:
        run = _with_confirm(data, confirm)
        result = run_pair(store, run, args, api, suffix="" if confirm is None else _SUFFIX[confirm])
        print(render(result))
        results.append(result)
    result = results[-1]
    if len(results) == 2:
        print(render_side_by_side(results))
        result = {"off": results[0], "on": results[1]}
    if args.fidelity:
        last = results[-1]
        fid = fidelity(store, last["studies"][1], data, args.fidelity_repeats, last)
        result["fidelity"] = fid
        print(render_fidelity(fid))
    if args.json_path:
        args.json_path.write_text(json.dumps(result, indent=2))
    return 0 if all(lv["agree"] for r in results for lv in r["levels"]) else 1


_SUFFIX = {False: "-off", True: "-confirm"}


def _with_confirm(data: dict[str, Any], confirm: bool | None) -> dict[str, Any]:
    """The study file with ``measurement.confirm_starts`` forced (None: as it says)."""
    if confirm is None:
        return data
    return {**data, "measurement": {**data.get("measurement", {}), "confirm_starts": confirm}}


def run_pair(
    store: Any, data: dict[str, Any], args: argparse.Namespace, api: Any, suffix: str = ""
) -> dict[str, Any]:
    """Create and run the two identical studies one after the other, and compare them."""
    names = [f"{data['name']}{suffix}-a", f"{data['name']}{suffix}-b"]
    t0 = time.time()
    cost = {"engine_starts": 0, "confirm_starts": 0, "confirm_engine_seconds": 0.0}
    for i, name in enumerate(names):
        if i and args.gap_s > 0:
            print(f"waiting {args.gap_s:g} s before the second study", file=sys.stderr)
            time.sleep(args.gap_s)
        study = {**data, "name": name}
        if args.landscape is not None:  # one seed draws the same repeats: the next one
            study["seed"] = int(data.get("seed", 0)) + i
        api.create_study(store, data=study, source=str(args.study_file), replace=True)
        started = time.time()
        summary = api.run_study(store, name)
        cost["engine_starts"] += summary.trials_started
        cost["confirm_starts"] += summary.confirm_starts
        cost["confirm_engine_seconds"] += summary.confirm_engine_seconds
        print(
            f"{name}: {summary.trials_run} engine configs, {summary.measurements} measurements, "
            f"{time.time() - started:.0f} s ({summary.stop_reason})",
            file=sys.stderr,
        )
        if summary.confirm_note:
            print(f"{name}: {summary.confirm_note}", file=sys.stderr)
    result = compare(store, names, data)
    result["wall_s"] = time.time() - t0
    result["confirm_starts"] = (data.get("measurement") or {}).get("confirm_starts")
    result["cost"] = cost
    return result


def render_side_by_side(results: list[dict[str, Any]]) -> str:
    """The agreement figures with confirmation off and on, and what it cost."""
    off, on = results

    def agree(r: dict[str, Any]) -> str:
        n = sum(lv["agree"] for lv in r["levels"])
        return f"{n} of {len(r['levels'])} levels"

    rows = [
        ("agreement", agree(off), agree(on)),
        ("engine starts", str(off["cost"]["engine_starts"]), str(on["cost"]["engine_starts"])),
        ("confirmation starts", "0", str(on["cost"]["confirm_starts"])),
        ("confirmation engine-s", "0", f"{on['cost']['confirm_engine_seconds']:,.0f}"),
        ("wall s", f"{off['wall_s']:.0f}", f"{on['wall_s']:.0f}"),
    ]
    lines = ["confirmation across engine starts, off vs on (two identical studies each)"]
    lines.append(f"{'':<22} {'off':>16} {'on':>16}")
    lines += [f"{k:<22} {a:>16} {b:>16}" for k, a, b in rows]
    return "\n".join(lines)


def _level(store: Any, name: str, workload: str, concurrency: int) -> dict[str, Any]:
    from autotune.evidence.scores import median_ci_halfwidth_pct
    from autotune.recommend.choose import choose

    rows = store.measurements(study=name)
    choice = choose(rows, workload, concurrency)
    assert choice is not None, f"{name}: nothing measured at concurrency {concurrency}"
    base = choice.baseline
    drafter = next((s for s in choice.ranked if not s.is_baseline), None)
    speedup = ci = None
    if base is not None and drafter is not None and base.median_tok_s > 0:
        speedup = drafter.median_tok_s / base.median_tok_s
        ci = drafter.tie_pct(base)
    cell = [r for r in rows if r.workload == workload and r.concurrency == concurrency]
    shares = [
        r.median_ttft_ms / (r.median_ttft_ms + r.median_tpot_ms * max(r.num_output_tokens / r.num_requests - 1, 0))
        for r in cell
        if r.median_ttft_ms and r.median_tpot_ms is not None and r.num_requests
    ]  # fmt: skip
    return {
        "answer": choice.best.label(),
        "tie": choice.tie,
        "tied_with": [o.label() for o in choice.tied_with],
        "speedup": speedup,
        "speedup_ci_pct": ci,
        # baseline first, then the drafter (both runs of the baseline pooled)
        "runs": [s.repeats if s else None for s in (base, drafter)],
        "ci_pct": [median_ci_halfwidth_pct(s.throughputs) if s else None for s in (base, drafter)],
        "drift_pct": choice.drift_pct,
        "prefill_share": statistics.median(shares) if shares else None,
    }


def compare(store: Any, names: list[str], data: dict[str, Any]) -> dict[str, Any]:
    workload = data["workloads"][0]
    levels = []
    for c in sorted(data["concurrency"]):
        a, b = (_level(store, n, workload, c) for n in names)
        same = a["answer"] == b["answer"]
        levels.append(
            {
                "concurrency": c,
                "studies": {names[0]: a, names[1]: b},
                "agree": same or (a["tie"] and b["tie"]),
                "verdict": _verdict(same, a["tie"] and b["tie"]),
            }
        )
    return {"studies": names, "workload": workload, "levels": levels}


def _verdict(same: bool, both_ties: bool) -> str:
    if same:
        return "same answer" + (", both ties" if both_ties else "")
    return "different answers, both ties" if both_ties else "DISAGREE"


def _f(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def render(result: dict[str, Any]) -> str:
    names = result["studies"]
    head = (
        f"{'conc':>4}  {'study':<18} {'answer':<28} {'speedup':>8} {'± 95%':>7} "
        f"{'runs off/ngram':>14} {'CI off/ngram %':>15} {'drift %':>8} {'prefill':>7}"
    )
    lines = [f"two identical studies ({', '.join(names)}), {result['wall_s']:.0f} s", head]
    for lv in result["levels"]:
        for name in names:
            s = lv["studies"][name]
            answer = s["answer"] + (" (tie)" if s["tie"] else "")
            runs = "/".join(_f(v, "d") for v in s["runs"])
            cis = "/".join(_f(v, ".1f") for v in s["ci_pct"])
            lines.append(
                f"{lv['concurrency']:>4}  {name:<18} {answer:<28} "
                f"{_f(s['speedup'], '.3f'):>8} {_f(s['speedup_ci_pct'], '.1f'):>7} "
                f"{runs:>14} {cis:>15} {_f(s['drift_pct'], '+.1f'):>8} "
                f"{_f(s['prefill_share'], '.0%'):>7}"
            )
        lines.append(f"{'':>4}  verdict: {lv['verdict']}")
    ok = all(lv["agree"] for lv in result["levels"])
    lines.append("agreement: " + ("every level" if ok else "NOT at every level"))
    return "\n".join(lines)


def fidelity(
    store: Any, name: str, data: dict[str, Any], repeats: int, result: dict[str, Any]
) -> list[dict[str, Any]]:
    """`autotune verify` on the second study: its drafter (or, when it answers off, its best
    drafter) and the baseline through vllm serve + vllm bench serve."""
    from autotune.verify import verify

    model = data["model"]["name"]
    v = verify(
        store,
        model,
        result["workload"],
        study=name,
        repeats=repeats,
        progress=lambda line: print(line, file=sys.stderr),
    )
    out = []
    for lv in v.levels:
        study_x, server_x = lv.study_speedup, lv.server_speedup
        out.append(
            {
                "concurrency": lv.concurrency,
                "config": v.label.split(" (")[0],  # "ngram N=3 (best drafting config; ...)"
                "recommended": v.label,
                "study_speedup": study_x,
                "server_speedup": server_x,
                "ratio": server_x / study_x if study_x and server_x else None,
            }
        )
    return out


def render_fidelity(rows: list[dict[str, Any]]) -> str:
    lines = [
        "server path (vllm bench serve against vllm serve) vs the study, second study",
        f"{'conc':>4}  {'config':<12} {'study x':>8} {'server x':>9} {'server/study':>12}",
    ]
    for r in rows:
        lines.append(
            f"{r['concurrency']:>4}  {r['config']:<12} {_f(r['study_speedup'], '.3f'):>8} "
            f"{_f(r['server_speedup'], '.3f'):>9} {_f(r['ratio'], '.3f'):>12}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
