"""`autotune export --speculators-data` without an engine: bad input (one line, exit 2, nothing
written), the checks Speculators' reader applies to the rows, the README's commands and the
study snippet that measures the trained draft on the same prompt set, and when
`recommend --explain` suggests the export (on the recorded CPU sweep, replayed).

The full path (responses generated on vLLM, a tiny draft trained on them and measured) is
tests/integration/test_speculators_export.py.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import yaml

from autotune import api
from autotune.errors import NoResultError, SpecError
from autotune.export import check_prompt_rows, check_speculator_rows
from autotune.export import speculators as sx
from autotune.recommend import render
from autotune.spec.loader import ResolvedStudy, resolve_study, validate
from autotune.spec.methods import MODEL_DRAFTERS
from autotune.spec.study import StudySpec
from autotune.store import Store

REPO = Path(__file__).resolve().parents[2]
LANDSCAPE = REPO / "bench" / "landscapes" / "cpu-tiny-llama.csv"

GOOD = {"input_ids": [5, 6, 7, 8], "loss_mask": [0, 0, 1, 1]}


def test_rows_as_speculators_passes_them_through():
    assert check_speculator_rows([GOOD, GOOD]) == 4
    bad = [
        ({"input_ids": [5, 6, 7], "loss_mask": [0, 1]}, "input_ids has 3 tokens, loss_mask 2"),
        ({"input_ids": [5, 6], "loss_mask": [0, 0]}, "supervises no token"),
        ({"input_ids": [5, -1], "loss_mask": [0, 1]}, "input_ids"),
        ({"input_ids": [5, 6], "loss_mask": [0, 2]}, "loss_mask"),
        ({"loss_mask": [0, 1]}, "input_ids"),
    ]
    for row, why in bad:
        with pytest.raises(ValueError, match=why):
            check_speculator_rows([GOOD, row], "f.jsonl")
    with pytest.raises(ValueError, match="no rows"):
        check_speculator_rows([])


def test_prompt_rows_need_a_user_turn():
    row = {"conversations": [{"role": "user", "content": "def f():"}]}
    assert check_prompt_rows([row, row]) == 2
    for bad in (
        {"conversations": []},
        {"conversations": [{"role": "system", "content": "be brief"}]},
        {"conversations": [{"role": "user"}]},
    ):
        with pytest.raises(ValueError, match="row 1"):
            check_prompt_rows([row, bad])


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded CPU sweep as a replay study, run once for the module."""
    path = tmp_path_factory.mktemp("replayed") / "autotune.db"
    store = Store(str(path))
    api.create_replay_study(store, LANDSCAPE, "tiny-replay")
    api.run_study(store, "tiny-replay")
    store.dispose()
    return path


@pytest.fixture
def replay(replayed: Path, db_path: Path) -> Store:
    """The recorded CPU sweep as a replay study, run: real measurements, no engine (each test
    gets its own copy of the module's store, SQLite's backup API)."""
    src, dst = sqlite3.connect(replayed), sqlite3.connect(db_path)
    try:
        src.backup(dst)
    finally:
        src.close(), dst.close()
    return Store(str(db_path))


def test_bad_input_is_one_line_and_writes_nothing(autotune, replay: Store, tmp_path: Path):
    out = tmp_path / "out"
    cases = [
        (("export", "-o", str(out)), "exactly one of"),
        (("export", "--landscape", "x", "--speculators-data", "x", "-o", str(out)), "one of"),
        (("export", "--speculators-data", "tiny-replay", "-o", str(out)), "--workload"),
        (("export", "--landscape", "tiny-replay", "--workload", "code", "-o", str(out)),
         "--speculators-data only"),
        (("export", "--speculators-data", "nope", "--workload", "code", "-o", str(out)),
         "nope"),
        (("export", "--speculators-data", "tiny-replay", "--workload", "code", "-o", str(out)),
         "replays a recorded landscape"),
    ]  # fmt: skip
    for args, why in cases:
        result = autotune(*args)
        assert result.exit_code == 2, (args, result.stderr)
        assert why in result.stderr and len(result.stderr.strip().splitlines()) == 1, args
        assert "Traceback" not in result.stderr and result.stdout == ""
        assert not out.exists()
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "prompts.jsonl").write_text("keep me\n")
    result = autotune("export", "--speculators-data", "tiny-replay", "--workload", "code",
                      "-o", str(taken))  # fmt: skip
    assert result.exit_code == 2 and "already holds prompts.jsonl" in result.stderr
    assert (taken / "prompts.jsonl").read_text() == "keep me\n"
    afile = tmp_path / "afile"
    afile.write_text("")
    result = autotune("export", "--speculators-data", "tiny-replay", "--workload", "code",
                      "-o", str(afile))  # fmt: skip
    assert result.exit_code == 2 and "is a file" in result.stderr


def _tiny_study(tmp_path: Path, model: str = "tiny") -> ResolvedStudy:
    data = {
        "name": "tiny-src",
        "model": {"name": model},
        "workloads": ["code"],
        "concurrency": [1, 4],
        "methods": [{"method": "ngram", "num_speculative_tokens": {"min": 1, "max": 2}}],
        "repeats": 2,
        "measurement": {"max_prompts": 5, "max_tokens": 40},
    }
    return resolve_study(validate(StudySpec, data, "tiny-src.yaml"), "tiny-src.yaml", "cpu")


def test_readme_commands_and_the_snippet_measure_the_same_prompts(tmp_path: Path):
    # An HF id: nothing to build or download (a tiny:NAME target would build the tiny model).
    resolved = _tiny_study(tmp_path, model="Qwen/Qwen3-8B")
    prepared = sx.prepared_workload(resolved, "code")
    assert len(prepared.prompts) == 5 and {p.max_tokens for p in prepared.prompts} == {40}
    out = tmp_path / "data"
    readme = sx.commands_readme(resolved, "tiny-src", prepared, out, with_responses=True)
    assert "--model Qwen/Qwen3-8B" in readme and f"--data {out}/responses.jsonl" in readme
    assert "--verifier-name-or-path Qwen/Qwen3-8B" in readme
    assert "--speculator-type dflash" in readme and sx.SPECULATORS_COMMIT in readme
    assert readme.count("--draft-vocab-size 32000") == 2  # the tutorial's, vocabulary unknown
    assert prepared.digest in readme
    without = sx.commands_readme(resolved, "tiny-src", prepared, out, with_responses=False)
    assert "--with-responses" in without and "--render-endpoint" in without
    snippet = yaml.safe_load(sx.study_snippet(resolved, "code", out))
    spec = validate(StudySpec, snippet, "measure-draft.yaml")
    assert [m.method for m in spec.methods] == ["eagle3", "dflash"]
    assert spec.methods[0].draft == str(out / "eagle3" / "checkpoints" / "checkpoint_best")
    assert spec.concurrency == [1, 4] and spec.repeats == 2
    # Same workload and caps: the new study measures exactly the exported prompt set.
    # (n-gram stands in for the drafts: their checkpoints do not exist before training)
    ngram = [{"method": "ngram", "num_speculative_tokens": {"min": 1, "max": 1}}]
    same = validate(StudySpec, {**snippet, "methods": ngram}, "measure-draft.yaml")
    again = resolve_study(same, "measure-draft.yaml", "cpu")
    assert sx.prepared_workload(again, "code").digest == prepared.digest


def test_prompts_are_checked_against_the_measured_digest(tmp_path: Path):
    resolved = _tiny_study(tmp_path)
    prepared = sx.prepared_workload(resolved, "code")
    assert sx.measured_prompts(resolved, "s", "code", [prepared.digest]) == prepared
    with pytest.raises(SpecError, match="--workload: study 's' has no workload 'poems'"):
        sx.measured_prompts(resolved, "s", "poems", [prepared.digest])
    with pytest.raises(NoResultError, match="measured nothing"):
        sx.measured_prompts(resolved, "s", "code", [])
    with pytest.raises(NoResultError, match="not the ones study 's' measured last"):
        sx.measured_prompts(resolved, "s", "code", ["0" * 64])
    rows = sx.prompt_rows("s", prepared)
    assert check_prompt_rows(rows) == 5
    assert rows[0]["conversations"][0]["content"] == prepared.prompts[0].text
    assert rows[0]["metadata"]["workload_digest"] == prepared.digest


def test_explain_suggests_training_only_below_the_threshold(replay: Store):
    rec = api.recommend(replay, "tiny", "code")
    # The recorded sweep's drafts accept well (draft model, EAGLE-3, DFlash all above 1.5).
    assert render.explain_suggestion(rec) is None
    assert render.catalog_has_draft("tiny") and not render.catalog_has_draft("some/model")
    args = {"study": "tiny-replay", "workload": "code", "model": "tiny", "rows": rec.rows}
    trained = [r for r in rec.rows if r.method in MODEL_DRAFTERS]
    best = max(
        1
        + sum(r.num_accepted_tokens for r in trained if key(r) == k)
        / sum(r.num_drafts for r in trained if key(r) == k)
        for k in {key(r) for r in trained}
    )
    assert render.training_suggestion(**args, catalog_has_draft=True, threshold=best) is None
    line = render.training_suggestion(**args, catalog_has_draft=True, threshold=best + 0.01)
    assert line is not None and line.startswith("note: the best measured draft accepts little")
    assert f"acceptance length {best:.2f}" in line
    assert line.endswith(
        "autotune export --speculators-data tiny-replay --workload code "
        "--output speculators-tiny-replay-code --with-responses"
    )
    ngram_only = [r for r in rec.rows if r.method not in MODEL_DRAFTERS]
    args["rows"] = ngram_only
    assert render.training_suggestion(**args, catalog_has_draft=True) is None
    no_draft = render.training_suggestion(**args, catalog_has_draft=False)
    assert no_draft is not None and "the catalog has no draft for tiny" in no_draft


def key(r):
    return (r.method, r.draft, r.num_speculative_tokens)


def test_explain_prints_the_suggestion_on_stderr_only(autotune, replay: Store, tmp_path: Path):
    result = autotune("recommend", "--model", "tiny", "--workload", "code", "--explain")
    assert result.exit_code == 0
    assert "--speculators-data" not in result.stdout + result.stderr  # drafts accept well here
    # A model the catalog has no draft for, measured with n-gram only (a hand-written replay).
    from autotune.testing.landscapes import write_rows
    from autotune.testing.studies import replay_study

    land = write_rows(tmp_path / "ngram-only.csv")
    api.create_study(replay, data=replay_study(land))
    api.run_study(replay, "replayed")
    plain = autotune("recommend", "--model", "org/tiny", "--workload", "code")
    explained = autotune("recommend", "--model", "org/tiny", "--workload", "code", "--explain")
    assert explained.exit_code == plain.exit_code == 0
    assert explained.stdout == plain.stdout  # the config alone, unchanged
    lines = [x for x in explained.stderr.splitlines() if "--speculators-data" in x]
    assert lines == [
        "note: the catalog has no draft for org/tiny and the study measured none; train one on "
        "the study's prompts with vLLM Speculators: autotune export --speculators-data replayed "
        "--workload code --output speculators-replayed-code --with-responses"
    ]
    assert "--speculators-data" not in plain.stderr


def test_tiny_trainer_counts_only_supervised_targets():
    """The data entry point's loss and windows (no model is built or trained here)."""
    import torch

    from autotune.testing._tiny_build import POSITION_DECAY
    from autotune.testing.train_draft import masked_position_loss, row_windows

    gen = torch.Generator().manual_seed(0)
    b, t, n, v = 2, 5, 2, 7
    drafts = torch.randn(b, t, n, v, generator=gen)
    teacher = torch.randn(b, t + n + 1, v, generator=gen)
    mask = torch.zeros(b, t + n + 1, dtype=torch.long)
    mask[1, 4] = 1  # only the token at 4: draft 0 at anchor 2 and draft 1 at anchor 1
    ce0 = -(teacher[1, 3].softmax(-1) * drafts[1, 2, 0].log_softmax(-1)).sum()
    ce1 = -(teacher[1, 3].softmax(-1) * drafts[1, 1, 1].log_softmax(-1)).sum()
    expected = (ce0 + POSITION_DECAY * ce1) / n
    assert torch.allclose(masked_position_loss(drafts, teacher, mask), expected)
    # Windows reach into each row's supervised part.
    rows = [(torch.arange(40), torch.tensor([0] * 30 + [1] * 10))]
    batches = row_windows(rows, 12, 3, seed=1)
    for _ in range(5):
        ids, m = next(batches)
        assert ids.shape == (3, 12) and bool((m.sum(1) > 0).all())
