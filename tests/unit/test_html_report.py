"""The HTML report in a real browser: headless Chromium opens the page of a real recorded sweep
(bench/landscapes/cpu-tiny-llama.csv replayed) and reports what is on the first screen."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from autotune import api
from autotune.report import measurements_frame, summary_frame, write_html
from autotune.store import Store

REPO = Path(__file__).resolve().parents[2]
LANDSCAPE = REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

PROBE = """<pre id="probe"></pre><script>
const box = (el) => { const r = el.getBoundingClientRect(); return [r.top, r.bottom, r.width]; };
document.getElementById('probe').textContent = JSON.stringify({
  height: window.innerHeight, width: window.innerWidth,
  scroll: document.documentElement.scrollWidth,
  answer: box(document.querySelector('table.answer')),
  rows: Array.from(document.querySelectorAll('table.answer tbody tr')).map(
    r => Array.from(r.cells).slice(0, 3).map(c => c.textContent)),
  figures: Array.from(document.querySelectorAll('figure svg')).map(box),
  all: document.querySelectorAll('table.summary tbody tr').length,
  filtered: (() => { const f = document.getElementById('filter'); f.value = 'code 8';
    f.dispatchEvent(new Event('input'));
    return Array.from(document.querySelectorAll('table.summary tbody tr'))
      .filter(r => r.style.display !== 'none').map(r => r.cells[0].textContent + ' ' +
        r.cells[1].textContent); })(),
  sorted: (() => { document.querySelectorAll('table.summary th')[3].click();
    return Array.from(document.querySelectorAll('table.summary tbody tr'))
      .map(r => parseFloat(r.cells[3].textContent.replace(/,/g, ''))); })(),
});
</script></body>"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    tmp = tmp_path_factory.mktemp("html")
    store = Store(str(tmp / "autotune.db"))
    data = {
        "name": "tiny-replay",
        "model": {"name": "tiny"},
        "workloads": ["code", "chat"],
        "concurrency": [1, 4, 8],
        "methods": [
            {"method": "ngram", "num_speculative_tokens": {"min": 1, "max": 4},
             "params": {"prompt_lookup_min": 2, "prompt_lookup_max": 4}},
            {"method": "draft_model", "num_speculative_tokens": {"min": 1, "max": 4}},
            {"method": "eagle3", "num_speculative_tokens": {"min": 1, "max": 3}},
            {"method": "dflash", "num_speculative_tokens": {"min": 1, "max": 3}},
        ],
        "repeats": 3,
        "sampler": "grid",
        "engine": {"kind": "replay", "landscape": str(LANDSCAPE)},
    }  # fmt: skip
    api.create_study(store, data=data, source=str(LANDSCAPE))
    api.run_study(store, "tiny-replay")
    df = measurements_frame(store, "tiny-replay")
    return write_html(df, tmp / "report.html"), df


def _open(page: Path, width: int, height: int) -> dict:
    probed = page.with_name(f"probe-{width}.html")
    probed.write_text(page.read_text().replace("</body>", PROBE, 1))
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={width},{height}", "--dump-dom", probed.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    m = re.search(r'<pre id="probe">(.*?)</pre>', out.stdout, re.S)
    assert m, out.stderr[-2000:]
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.mark.slow  # replays the whole recorded sweep (grid, 3 repeats) and renders its figures: `make test` runs it
def test_report_is_small_and_offline(report):
    page, _ = report
    text = page.read_text()
    assert page.stat().st_size <= 1_500_000
    # nothing is fetched: no script, stylesheet or image from the network
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text)
    assert text.count("<script>") == 1  # the page's own script
    assert text.count("<script") == 2  # and the answers' JSON island (data, not code)


@pytest.mark.slow  # starts headless Chromium twice: `make test` runs it
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
def test_answer_on_first_screen_and_figures_resize(report):
    page, df = report
    summary = summary_frame(df)
    best = {
        (r["workload"], str(r["concurrency"])): r["config"]
        for r in summary[summary["recommended"]].to_dict("records")
    }
    wide = _open(page, 1280, 900)
    top, bottom, _ = wide["answer"]
    assert top > 0 and bottom <= wide["height"], "the answer is not on the first screen"
    assert wide["scroll"] <= wide["width"], "the page is wider than the window"
    shown = {(w, c): config for w, c, config in wide["rows"]}
    assert shown == best  # one row per workload × concurrency, the recommended config
    assert len(wide["figures"]) == 3 and all(w > 300 for _, _, w in wide["figures"])
    # the full table filters and sorts in the page, offline
    code8 = len(summary[(summary["workload"] == "code") & (summary["concurrency"] == 8)])
    assert wide["all"] == len(summary) and wide["filtered"] == ["code 8"] * code8
    assert wide["sorted"] == sorted(wide["sorted"]) and len(wide["sorted"]) == len(summary)
    narrow = _open(page, 800, 900)
    assert all(w <= narrow["width"] for _, _, w in narrow["figures"])
    assert narrow["scroll"] <= narrow["width"]
    assert narrow["figures"][0][2] < wide["figures"][0][2]  # figures follow the window


# --- the latency trade-off: the real CPU sweep with its p99s (tests/data/tiny-cpu-slo.csv) ---

TRADE_PROBE = """<pre id="probe"></pre><script>
const box = (el) => { const r = el.getBoundingClientRect(); return [r.top, r.bottom, r.width]; };
document.getElementById('probe').textContent = JSON.stringify({
  width: window.innerWidth, scroll: document.documentElement.scrollWidth,
  figure: box(document.querySelector('figure.tradeoff svg')),
  slo: document.querySelector('p.slo-answer').textContent,
  rows: Array.from(document.querySelectorAll('table.tradeoff tbody tr')).map(
    r => Array.from(r.cells).map(c => c.textContent)),
});
</script></body>"""


@pytest.fixture(scope="module")
def slo_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_slo import _load_recording

    tmp = tmp_path_factory.mktemp("slo-html")
    _load_recording(tmp / "slo.db", {"p99_itl_ms": 20, "p99_tpot_ms": 12})
    df = measurements_frame(Store(str(tmp / "slo.db")), "slo-sweep")
    return write_html(df, tmp / "report.html"), df


@pytest.mark.slow  # replays the recorded sweep under an SLO and renders its figures: `make test` runs it
def test_the_trade_off_figure_is_inline_svg_with_front_and_slo_line(slo_report):
    page, _ = slo_report
    text = page.read_text()
    assert text.count('<figure class="tradeoff"><svg') == 1
    assert "Throughput vs p99 TPOT" in text and "the p99 TPOT limit" in text
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text)


@pytest.mark.slow  # starts headless Chromium twice: `make test` runs it
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
def test_trade_off_in_the_browser_matches_choosing_under_the_slo(slo_report):
    """Every config of every level is in the trade-off table, the ★ rows are what
    ``choose_slo`` picks, the front rows are ``pareto_front``'s, and the figure follows the
    window."""
    from autotune.recommend.slo import choose_slo, pareto_front
    from autotune.spec.slo import SLO

    page, _ = slo_report
    probed = page.with_name("probe-trade.html")
    probed.write_text(page.read_text().replace("</body>", TRADE_PROBE, 1))
    shown = _open_probe(probed, 1280)
    store_rows = Store(str(page.with_name("slo.db"))).measurements(study="slo-sweep")
    slo = SLO(p99_itl_ms=20, p99_tpot_ms=12)
    expected_best, expected_front, count = set(), set(), 0
    for level in (1, 8):
        choice = choose_slo(store_rows, "code", level, slo)
        assert choice is not None and choice.best is not None
        count += len(choice.scores)
        expected_best.add((str(level), choice.best.config.label(prose=False)))
        expected_front |= {
            (str(level), s.config.label(prose=False)) for s in pareto_front(choice.scores)
        }
    rows = shown["rows"]
    assert len(rows) == count
    assert {(r[1], r[2].removesuffix(" ★")) for r in rows if r[2].endswith("★")} == expected_best
    assert {(r[1], r[2].removesuffix(" ★")) for r in rows if r[-1] == "front"} == expected_front
    assert "code · 8: off" in shown["slo"]
    assert shown["figure"][2] > 300 and shown["scroll"] <= shown["width"]
    narrow = _open_probe(probed, 800)
    assert narrow["figure"][2] < shown["figure"][2] and narrow["scroll"] <= narrow["width"]


def _open_probe(probed: Path, width: int) -> dict:
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={width},900", "--dump-dom", probed.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    m = re.search(r'<pre id="probe">(.*?)</pre>', out.stdout, re.S)
    assert m, out.stderr[-2000:]
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.mark.slow  # replays the recorded sweep under an SLO and renders its figures: `make test` runs it
def test_the_trade_off_with_plotly_is_interactive_and_offline(slo_report, tmp_path: Path):
    pytest.importorskip("plotly")
    _, df = slo_report
    text = write_html(df, tmp_path / "p.html", renderer="plotly").read_text()
    assert text.count('"name":"Pareto front"') == 2  # one front per level (concurrency 1, 8)
    assert 'class="tradeoff"' in text and "p99 TPOT (ms)" in text
    assert "<script src" not in text  # plotly.js is inlined once: the page works offline
