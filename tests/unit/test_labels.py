"""One name per config in every output (autotune.spec.labels), on a replay of the recorded knob
sweep (bench/landscapes/cpu-tiny-knobs.csv: n-gram lookup windows and rejection samplers)."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest

from autotune.spec.labels import OFF, OFF_PROSE, PLAIN, Labels

REPO = Path(__file__).resolve().parents[2]
KNOBS = REPO / "bench" / "landscapes" / "cpu-tiny-knobs.csv"


def _ngram(n: int, lo: int, hi: int) -> dict[str, object]:
    return {
        "method": "ngram",
        "num_speculative_tokens": n,
        "prompt_lookup_min": lo,
        "prompt_lookup_max": hi,
    }


def test_only_the_knobs_that_differ_are_shown() -> None:
    names = Labels([None, _ngram(3, 3, 3), _ngram(3, 3, 5), _ngram(2, 3, 5)])
    assert names(_ngram(3, 3, 5)) == "ngram[max=5] N=3"  # min is 3 everywhere: not shown
    assert names(None) == OFF == "off" and names(None, prose=True) == OFF_PROSE
    both = Labels([_ngram(3, 1, 3), _ngram(3, 3, 5)])
    assert both(_ngram(3, 1, 3)) == "ngram[min=1,max=3] N=3"
    assert both.variant(_ngram(9, 1, 3)) == "ngram[min=1,max=3]"
    assert PLAIN(_ngram(3, 1, 3)) == "ngram N=3"
    drafts = Labels(
        [
            {"method": "eagle3", "model": "org/a-eagle", "num_speculative_tokens": 3},
            {"method": "eagle3", "model": "other/a-eagle", "num_speculative_tokens": 3},
        ]
    )
    # Two drafts with the same last path part are named in full.
    assert drafts({"method": "eagle3", "model": "org/a-eagle", "num_speculative_tokens": 3}) == (
        "eagle3[draft=org/a-eagle] N=3"
    )


CONFIG = re.compile(r"(off|ngram\[[^\]]*\] N=\d+|draft_model\[[^\]]*\] N=\d+)")


@pytest.fixture
def knob_study(autotune, tmp_path: Path):
    made = autotune("study", "create", "--landscape", str(KNOBS), "--name", "knobs")
    assert made.exit_code == 0, made.stderr
    ran = autotune("study", "run", "knobs", "--no-progress")
    assert ran.exit_code == 0, ran.stderr
    return autotune, ran.stderr


@pytest.mark.slow  # a knob study through run, recommend, check, export and the HTML report: `make test` runs it
def test_a_knob_study_names_its_configs_apart_and_alike_everywhere(knob_study, tmp_path):
    autotune, progress = knob_study
    # Progress: one line per engine config, each a different name.
    done = re.findall(r"\] done\s+(.+?): [\d,.]+ tok/s", progress)
    assert len(done) == 11 and len(set(done)) == 11, done
    assert "off (no speculation)" in done and "baseline" not in progress
    expected = {OFF if d == OFF_PROSE else d for d in done}

    shown = autotune("study", "show", "knobs", "--format", "tsv")
    assert shown.exit_code == 0, shown.stderr
    trial_rows = [line.split("\t") for line in shown.stdout.splitlines()]
    in_show = {r[1] for r in trial_rows if len(r) > 2 and r[2] == "complete"}
    assert in_show == expected

    report = autotune("report", "knobs", "--format", "tsv")
    assert report.exit_code == 0, report.stderr
    in_report = {m.group(1) for m in CONFIG.finditer(report.stdout)}
    assert {c.removesuffix(" ★") for c in in_report} == expected

    out = tmp_path / "knobs.csv"
    html = tmp_path / "knobs.html"
    files = autotune("report", "knobs", "--csv", str(out), "--html", str(html))
    assert files.exit_code == 0, files.stderr
    in_csv = {row["config"] for row in csv.DictReader(io.StringIO(out.read_text()))}
    assert in_csv == expected
    page = html.read_text()
    # The legend (matplotlib's SVG keeps each text as a comment): one entry per variant.
    for variant in {d.rsplit(" N=", 1)[0] for d in expected if d != OFF}:
        assert f"<!-- {variant} -->" in page, variant
    assert "<!-- draft_model (tiny:draft) -->" not in page and "ngram N=3" not in page

    rec = autotune("recommend", "--model", "tiny", "--workload", "code", "--explain")
    assert rec.exit_code == 0, rec.stderr
    named = {m.group(1) for m in CONFIG.finditer(rec.stderr)}
    assert named and named <= expected
    assert "ngram N=" not in rec.stderr and "draft_model N=" not in rec.stderr
