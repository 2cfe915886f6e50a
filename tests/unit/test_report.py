"""Reports of a replayed study: the measurements and summary frames, PNG/HTML, CSV/Parquet, CLI."""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
from pathlib import Path

import click
import pandas as pd
import pytest
from click.testing import CliRunner

from autotune import api
from autotune.cli import cli
from autotune.cli._common import Context, report_errors
from autotune.cli.report import report
from autotune.engine.readers.landscape import LandscapePoint
from autotune.evidence.scores import MAD_SCALE
from autotune.recommend.choose import choose
from autotune.report import (
    measurements_frame,
    plot_png,
    read_csv,
    summary_frame,
    write_csv,
    write_html,
)
from autotune.spec.methods import config_id
from autotune.store import Store
from autotune.testing.landscapes import point, write

WORKLOADS = ("code", "chat")
LEVELS = (1, 4, 16)
# Per-position acceptance a_i of two chain drafters, per workload (hand-picked).
ACCEPTANCE = {
    ("ngram", "code"): (0.7, 0.5, 0.35),
    ("ngram", "chat"): (0.3, 0.15, 0.05),
    ("eagle3", "code"): (0.85, 0.7, 0.55),
    ("eagle3", "chat"): (0.75, 0.55, 0.4),
}
BASE_TOK_S = {1: 50.0, 4: 180.0, 16: 520.0}
COST_PER_N = {1: 0.10, 4: 0.25, 16: 0.9}  # verification cost per draft token, relative
REPEAT_FACTOR = (1.0, 0.98, 1.03)  # recorded repeats disagree a little


def landscape_points() -> list[LandscapePoint]:
    points: list[LandscapePoint] = []
    for w in WORKLOADS:
        for c in LEVELS:
            for r, f in enumerate(REPEAT_FACTOR):
                points.append(
                    point("none", 0, c, BASE_TOK_S[c] * f, repeat=r, model="tiny", workload=w,
                          engine_start_s=30, measure_s=4)
                )  # fmt: skip
            for (method, wl), acc in ACCEPTANCE.items():
                if wl != w:
                    continue
                draft = "tiny:eagle3" if method == "eagle3" else None
                for n in range(1, 4):
                    al = 1 + sum(acc[:n])
                    tput = BASE_TOK_S[c] * al / (1 + COST_PER_N[c] * n)
                    for r, f in enumerate(REPEAT_FACTOR):
                        points.append(
                            point(method, n, c, round(tput * f, 3), repeat=r, acceptance=acc[:n],
                                  model="tiny", workload=w, draft=draft, engine_start_s=40,
                                  measure_s=4)
                        )  # fmt: skip
    return points


def write_landscape(path: Path) -> Path:
    return write(path, landscape_points())


STUDY = "report-test"


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, Path]:
    """A store holding one replayed study (run once for the module: replay is in-process)."""
    tmp = tmp_path_factory.mktemp("report")
    land = write_landscape(tmp / "landscape.csv")
    store = Store(str(tmp / "autotune.db"))
    data = {
        "name": STUDY,
        "model": {"name": "tiny"},
        "workloads": list(WORKLOADS),
        "concurrency": list(LEVELS),
        "methods": [
            {"method": "ngram", "num_speculative_tokens": {"min": 1, "max": 3}},
            {"method": "eagle3", "num_speculative_tokens": {"min": 1, "max": 3}},
        ],
        "repeats": 3,
        "sampler": "grid",  # every config measured: the report shows the whole sweep
        "engine": {"kind": "replay", "landscape": str(land)},
        # Exactly 3 repeats per cell: the noisy flags below are the report's to show.
        "measurement": {"max_spread_pct": 4.0, "remeasure_noisy": False},
    }
    api.create_study(store, data=data, source=str(land))
    api.run_study(store, STUDY)
    return store, tmp / "autotune.db"


@pytest.fixture(scope="module")
def frame(filled: tuple[Store, Path]) -> pd.DataFrame:
    return measurements_frame(filled[0], STUDY)


# --- the measurements frame ------------------------------------------------------------------


def test_frame_has_one_row_per_measurement_with_config_columns(filled, frame):
    store, _ = filled
    records = store.measurements(study=STUDY)
    assert len(frame) == len(records) == 7 * len(WORKLOADS) * len(LEVELS) * 3
    for col in ("method", "draft", "num_speculative_tokens", "speculative_config", "speedup"):
        assert col in frame.columns
    assert frame.attrs["study"] == STUDY and frame.attrs["max_spread_pct"] == 4.0
    by_id = {r.trial_id: r for r in records}
    for row in frame.itertuples():
        config = json.loads(row.speculative_config)
        assert config == by_id[row.trial_id].speculative_config
        if row.method == "none":
            assert config is None and row.config == "off"
        else:
            assert config["num_speculative_tokens"] == row.num_speculative_tokens


def test_speedup_is_against_the_baseline_median_of_the_same_cell(filled, frame):
    store, _ = filled
    records = store.measurements(study=STUDY)
    for r, row in zip(records, frame.itertuples(), strict=True):
        base = statistics.median(
            b.output_throughput_tok_s
            for b in records
            if b.speculative_config is None
            and (b.workload, b.concurrency) == (r.workload, r.concurrency)
        )
        assert row.output_throughput_tok_s == r.output_throughput_tok_s
        assert row.speedup == pytest.approx(r.output_throughput_tok_s / base)
    # The baseline's own speedup is 1 at its median, in every cell.
    for _, cell in frame[frame["config"] == "off"].groupby(["workload", "concurrency"]):
        assert cell["speedup"].median() == pytest.approx(1.0)


def test_acceptance_per_position_is_expanded(filled, frame):
    store, _ = filled
    records = store.measurements(study=STUDY)
    cols = [f"acceptance_pos_{i}" for i in (1, 2, 3)]
    assert set(cols) <= set(frame.columns) and "acceptance_pos_4" not in frame.columns
    for r, row in zip(records, frame.to_dict("records"), strict=True):
        for i, col in enumerate(cols):
            if i < len(r.accepted_per_pos):
                assert row[col] == pytest.approx(r.accepted_per_pos[i] / r.num_drafts)
                expected = ACCEPTANCE[(r.method, r.workload)][i]
                assert row[col] == pytest.approx(expected, abs=1e-6)
            else:
                assert math.isnan(row[col])


# --- the summary frame -----------------------------------------------------------------------


def test_summary_statistics_match_the_repeats(frame):
    summary = summary_frame(frame)
    assert len(summary) == 7 * len(WORKLOADS) * len(LEVELS)
    for s in summary.to_dict("records"):
        rows = frame[
            (frame["workload"] == s["workload"])
            & (frame["concurrency"] == s["concurrency"])
            & (frame["speculative_config"] == s["speculative_config"])
        ]
        tput = rows["output_throughput_tok_s"].tolist()
        med = statistics.median(tput)
        mad = statistics.median(abs(t - med) for t in tput)
        assert s["repeats"] == len(tput) == 3
        assert s["median_tok_s"] == pytest.approx(med)
        assert s["mad_tok_s"] == pytest.approx(mad)
        assert s["score_tok_s"] == pytest.approx(med - MAD_SCALE * mad)
        assert s["spread_pct"] == pytest.approx(100 * (max(tput) - min(tput)) / med)
        assert s["noisy"] == (s["spread_pct"] > 4.0)  # the study's max_spread_pct
        if s["config"] == "off":
            assert s["speedup"] == pytest.approx(1.0)
            assert math.isnan(s["mean_acceptance_length"])
        else:
            acc = ACCEPTANCE[(s["method"], s["workload"])][: s["num_speculative_tokens"]]
            assert s["mean_acceptance_length"] == pytest.approx(1 + sum(acc), abs=1e-5)
    # The flag follows the argument, not the study. Replay draws without replacement, so every
    # cell shows its recorded spread (REPEAT_FACTOR: 5%): the study's 4% flags every cell, a 6%
    # bound none.
    strict = summary_frame(frame, max_spread_pct=0.0)
    assert strict["noisy"].sum() == (strict["spread_pct"] > 0).sum() == len(summary)
    assert summary["noisy"].all()
    assert not summary_frame(frame, max_spread_pct=6.0)["noisy"].any()


def test_summary_recommends_what_recommend_chooses(filled, frame):
    store, _ = filled
    summary = summary_frame(frame)
    rows = store.measurements(study=STUDY)
    for (workload, concurrency), cell in summary.groupby(["workload", "concurrency"]):
        choice = choose(rows, str(workload), int(concurrency))
        assert choice is not None
        top = cell[cell["recommended"]]
        assert len(top) == 1
        assert json.loads(top["speculative_config"].iloc[0]) == choice.best.speculative_config
    # The landscape makes speculation lose at concurrency 16: the report says "off" there.
    assert set(summary[summary["recommended"] & (summary["concurrency"] == 16)]["config"]) == {
        "off"
    }


def test_a_screening_run_is_never_chosen_and_ranks_last(filled, frame):
    # Keep only the first repeat of code c=1's winner: one run against repeated configs.
    store, _ = filled
    rows = store.measurements(study=STUDY)
    winner = choose(rows, "code", 1)
    assert winner is not None and winner.best.repeats == 3
    key = winner.best.speculative_config

    def screened(r) -> bool:
        return (r.workload, r.concurrency, r.speculative_config, r.repeat != 0) == (
            "code", 1, key, True
        )  # fmt: skip

    choice = choose([r for r in rows if not screened(r)], "code", 1)
    assert choice is not None
    assert choice.best.speculative_config != key
    assert all(s.speculative_config != key for s in choice.ranked)
    # Where every config ran once (a study with repeats: 1), one run each is all there is.
    once = choose([r for r in rows if r.repeat == 0], "code", 1)
    assert once is not None and once.best.speculative_config == key

    keep = ~(
        (frame["workload"] == "code")
        & (frame["concurrency"] == 1)
        & (frame["speculative_config"] == config_id(key))
        & (frame["repeat"] != 0)
    )
    summary = summary_frame(frame[keep])
    cell = summary[(summary["workload"] == "code") & (summary["concurrency"] == 1)]
    last = cell.sort_values("rank").iloc[-1]
    assert json.loads(last["speculative_config"]) == key
    assert last["repeats"] == 1 and not last["recommended"]


# --- files -----------------------------------------------------------------------------------


@pytest.mark.slow  # renders the three figures as PNG (matplotlib): `make test` runs it
def test_png_files_are_written(frame, tmp_path: Path):
    paths = plot_png(frame, tmp_path / "png")
    assert sorted(p.name for p in paths) == ["acceptance.png", "speedup.png", "throughput.png"]
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


@pytest.mark.slow  # renders the three figures as PNG again: `make test` runs it
def test_html_without_plotly_embeds_png(frame, tmp_path: Path):
    path = write_html(frame, tmp_path / "r.html", renderer="matplotlib")
    text = path.read_text()
    assert text.count("data:image/png;base64,") == 3
    # one inline script (copy buttons, sorting, filtering) and the answers' JSON island; none
    # fetched
    assert "eagle3 N=" in text and text.count("<script>") == 1 and "<script src=" not in text
    assert text.count('<script type="application/json" id="autotune-answers">') == 1


@pytest.mark.slow  # renders the three figures as SVG (matplotlib): `make test` runs it
def test_html_default_embeds_scalable_svg(frame, tmp_path: Path):
    text = write_html(frame, tmp_path / "r.html").read_text()
    assert text.count("<figure") == 3 and text.count("<svg") >= 3
    assert text.index('id="answer"') < text.index("<figure") < text.index('class="summary"')


@pytest.mark.skipif(importlib.util.find_spec("plotly") is None, reason="plotly not installed")
def test_html_with_plotly_is_self_contained(frame, tmp_path: Path):
    path = write_html(frame, tmp_path / "r.html", renderer="plotly")
    text = path.read_text()
    assert "Plotly.newPlot" in text
    # plotly.js itself is inlined, once; no script is fetched from anywhere.
    assert text.count("* plotly.js v") == 1
    assert "<script src=" not in text


def test_csv_round_trip(frame, tmp_path: Path):
    path = write_csv(frame, tmp_path / "m.csv")
    back = read_csv(path)
    assert list(back.columns) == list(frame.columns) and len(back) == len(frame)
    assert (back["speculative_config"] == frame["speculative_config"]).all()
    assert (back["config"] == frame["config"]).all()
    pd.testing.assert_series_equal(
        back["output_throughput_tok_s"], frame["output_throughput_tok_s"], check_exact=False
    )
    pd.testing.assert_series_equal(back["speedup"], frame["speedup"], check_exact=False)
    # The summary of the read-back frame is the same (max_spread_pct travels as an argument).
    a = summary_frame(frame)
    b = summary_frame(back, max_spread_pct=frame.attrs["max_spread_pct"])
    for col in ("median_tok_s", "score_tok_s", "speedup", "mean_acceptance_length"):
        assert b[col].tolist() == pytest.approx(a[col].tolist(), nan_ok=True)
    for col in ("config", "draft", "repeats", "noisy", "recommended"):
        assert b[col].fillna("").tolist() == a[col].fillna("").tolist()


# --- the command -----------------------------------------------------------------------------


def _group() -> click.Group:
    """The real CLI once `report` is registered; until then a group with the same --db."""
    if "report" in cli.commands:
        return cli

    @click.group()
    @click.option("--db", default=None)
    @click.pass_context
    def group(ctx: click.Context, db: str | None) -> None:
        ctx.obj = Context(db=db)

    group.add_command(report)
    return group


def run_cli(db: Path, *args: str) -> tuple[int, str, str]:
    runner = CliRunner()
    with runner.isolation() as streams:
        code = report_errors(_group(), ["--db", str(db), *args])
        return code, streams[0].getvalue().decode(), streams[1].getvalue().decode()


@pytest.mark.slow  # renders every figure twice (PNG, SVG): `make test` runs it
def test_report_command_prints_table_and_writes_files(filled, tmp_path: Path):
    _, db = filled
    code, out, err = run_cli(
        db, "report", STUDY, "--png", str(tmp_path / "p"), "--html", str(tmp_path / "r.html"),
        "--csv", str(tmp_path / "m.csv"),
    )  # fmt: skip
    assert code == 0, err
    assert "★" in out and "eagle3 N=" in out and "off" in out
    assert (tmp_path / "p" / "throughput.png").stat().st_size > 0
    assert (tmp_path / "r.html").stat().st_size > 0
    assert len(read_csv(tmp_path / "m.csv")) == 126


def test_report_command_json(filled):
    _, db = filled
    code, out, _ = run_cli(db, "report", STUDY, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["study"] == STUDY and len(data["summary"]) == 42
    off = [s for s in data["summary"] if s["config"] == "off"]
    assert all(s["speculative_config"] is None and s["speedup"] == 1.0 for s in off)
    assert data["published_acceptance"] is None  # the catalog cites no curve for tiny


def test_report_command_errors(filled, tmp_path: Path):
    _, db = filled
    code, _, err = run_cli(db, "report", "nope")
    assert code == 2 and "nope" in err
    if (
        importlib.util.find_spec("pyarrow") is None
        and importlib.util.find_spec("fastparquet") is None
    ):
        csv = tmp_path / "m.csv"
        code, _, err = run_cli(
            db, "report", STUDY, "--csv", str(csv), "--parquet", str(tmp_path / "m.pq")
        )
        assert code == 2 and "pyarrow" in err and len(err.strip().splitlines()) == 1
        assert not csv.exists()  # refused before anything was written
    else:
        code, _, err = run_cli(db, "report", STUDY, "--parquet", str(tmp_path / "m.pq"))
        assert code == 0, err
        assert len(pd.read_parquet(tmp_path / "m.pq")) == 126


def test_report_of_a_study_not_run_yet(tmp_path: Path):
    land = write_landscape(tmp_path / "l.csv")
    store = Store(str(tmp_path / "e.db"))
    data = {
        "name": "empty",
        "model": {"name": "tiny"},
        "workloads": ["code"],
        "concurrency": [1],
        "methods": [{"method": "ngram", "num_speculative_tokens": {"min": 1, "max": 1}}],
        "engine": {"kind": "replay", "landscape": str(land)},
    }
    api.create_study(store, data=data, source=str(land))
    assert measurements_frame(store, "empty").empty
    code, _, err = run_cli(tmp_path / "e.db", "report", "empty")
    assert code == 1 and "no measurements yet" in err


# --- the latency trade-off: the real CPU sweep with its p99s (tests/data/tiny-cpu-slo.csv) ---


@pytest.fixture(scope="module")
def slo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_slo import _load_recording

    db = tmp_path_factory.mktemp("slo") / "slo.db"
    _load_recording(db, {"p99_itl_ms": 20})
    return db


def test_the_report_prints_each_levels_pareto_front_and_the_slo_choice(slo_db: Path):
    """Under `p99_itl_ms: 20` the recording's fastest config at 8 in flight (n-gram N=3) misses
    the SLO: the front lists it, the ★ goes to no speculation, as `recommend` chooses."""
    from autotune.recommend.slo import choose_slo, pareto_front
    from autotune.spec.slo import SLO

    code, out, err = run_cli(slo_db, "report", "slo-sweep", "--format", "table")
    assert code == 0, err
    front = out[out.index("p99 TPOT ms") :]
    assert "off ★" in front and "under the SLO (code: p99 ITL <= 20 ms)" in front
    records = Store(str(slo_db)).measurements(study="slo-sweep")
    for level in (1, 8):
        choice = choose_slo(records, "code", level, SLO(p99_itl_ms=20))
        assert choice is not None and choice.best is not None
        for s in pareto_front(choice.scores):
            assert s.config.label(prose=False) in front  # every front config is listed
    code, out, _ = run_cli(slo_db, "report", "slo-sweep", "--json")
    data = json.loads(out)
    assert data["slo"] == {"code": "p99 ITL <= 20 ms"}
    at8 = [r for r in data["trade_off"] if r["concurrency"] == 8]
    assert {r["config"] for r in at8 if r["recommended"]} == {"off"}
    assert {r["config"] for r in at8 if r["on_front"]} >= {"ngram N=3"}
    assert all(r["meets_slo"] == (r["p99_itl_ms"] <= 20) for r in data["trade_off"])


def test_a_replayed_study_has_no_trade_off(filled):
    _, db = filled
    code, out, _ = run_cli(db, "report", STUDY, "--json")
    assert code == 0 and json.loads(out)["trade_off"] == []
    code, out, _ = run_cli(db, "report", STUDY)
    assert "p99 TPOT" not in out


# --- published vs measured acceptance ------------------------------------------------------


def test_report_shows_published_beside_measured_acceptance(tmp_path: Path):
    """A replayed study of a catalog model with a cited curve (Kimi-K2.5's eagle3, InferenceX):
    text, JSON and HTML show each N's published AL next to the measured one."""
    from autotune.engine.readers.landscape import LandscapePoint
    from autotune.engine.readers.landscape import write_landscape as write_points
    from autotune.search.landscape_study import study_from_landscape

    acc = (0.8, 0.6, 0.4)
    points = [
        LandscapePoint(
            model="moonshotai/Kimi-K2.5",
            workload="code",
            method="eagle3" if n else "none",
            draft="lightseekorg/kimi-k2.5-eagle3" if n else None,
            num_speculative_tokens=n,
            concurrency=1,
            repeat=r,
            output_throughput_tok_s=100.0 * (1 + sum(acc[:n])) / (1 + 0.2 * n),
            mean_acceptance_length=1 + sum(acc[:n]) if n else None,
            acceptance_per_pos=acc[:n],
            engine_start_s=30.0,
            measure_s=5.0,
        )
        for n in range(4)
        for r in range(2)
    ]
    land = tmp_path / "kimi.csv"
    write_points(land, points)
    store = Store(str(tmp_path / "k.db"))
    data = study_from_landscape(land, "kimi-replay", sampler="grid", seed=0)
    api.create_study(store, data=data, source=str(land))
    api.run_study(store, "kimi-replay")
    db = tmp_path / "k.db"

    code, out, err = run_cli(db, "report", "kimi-replay", "--html", str(tmp_path / "k.html"))
    assert code == 0, err
    section = out.split("published vs measured acceptance length", 1)[1].splitlines()
    assert section[1].split() == [
        "method", "N", "published", "1", "published", "2", "measured", "code"
    ]  # fmt: skip
    assert section[2].split()[0] == "eagle3"
    lines = [ln.split() for ln in section[2:]]
    by_n = {int(ln[-4]): ln[-3:] for ln in lines if len(ln) >= 4 and ln[-4].isdigit()}
    assert by_n[1] == ["1.80", "1.83", "1.80"]  # published 1.80 / 1.83, measured 1 + 0.8
    assert by_n[3] == ["2.75", "2.88", "2.80"]
    assert by_n[7] == ["3.46", "3.71", "-"]  # published, never measured here
    assert "SemiAnalysisAI/InferenceX golden_al_distribution/kimik2.5_eagle3.yaml @ ab51b06" in out

    code, out, _ = run_cli(db, "report", "kimi-replay", "--json")
    assert code == 0
    pub = json.loads(out)["published_acceptance"]
    assert pub["model"] == "moonshotai/Kimi-K2.5"
    row = next(r for r in pub["rows"] if r["num_speculative_tokens"] == 2)
    assert row == {
        "method": "eagle3",
        "num_speculative_tokens": 2,
        "published": [2.33, 2.43],
        "measured": {"code": pytest.approx(2.4)},
    }
    (curve, _) = pub["curves"]["eagle3"]
    assert curve["commit"] == "ab51b0612d3aec25a08196505334848b83987a45"

    page = (tmp_path / "k.html").read_text()
    assert "Published vs measured acceptance length" in page and "<td>3.46</td>" in page
