"""The context-length axis (issue #20.2): bucket names and picks (autotune.spec.context), the
bucket builder (autotune.datasets.context) on a whitespace tokenizer, and the study spec's
``context_lengths`` rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.datasets.context import build_bucket, grow_prompt, prepare_bucket, token_counter
from autotune.engine._base import Prompt
from autotune.errors import SpecError
from autotune.spec.context import bucket_name, buckets_of, pick_bucket, split_bucket
from autotune.spec.loader import resolve_study, validate
from autotune.spec.study import StudySpec
from autotune.spec.workload import WorkloadSpec


class WhitespaceTokenizer:
    """A real (if simple) tokenizer: one id per whitespace-separated word, plus a BOS id when
    special tokens are added, as vLLM adds them to a raw text prompt."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = [self.vocab.setdefault(w, len(self.vocab) + 1) for w in text.split()]
        return ([0] if add_special_tokens else []) + ids


def _words(tag: str, n: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def test_bucket_names_round_trip():
    assert bucket_name("code", 1024) == "code@ctx1024"
    assert split_bucket("code@ctx1024") == ("code", 1024)
    assert split_bucket("code") == ("code", None)
    assert split_bucket("code@ctx0") == ("code@ctx0", None)
    names = ["code@ctx512", "code@ctx128", "chat@ctx128", "code"]
    assert buckets_of("code", names) == {128: "code@ctx128", 512: "code@ctx512"}


@pytest.mark.parametrize(
    ("asked", "chosen", "how"),
    [
        (100, 128, "at or above"),
        (128, 128, "at or above"),
        (129, 512, "at or above"),
        (4000, 512, "largest"),
    ],
)
def test_pick_bucket_takes_the_smallest_at_or_above_else_the_largest(asked, chosen, how):
    pick = pick_bucket("code", asked, ["code@ctx512", "code@ctx128", "chat@ctx2048"])
    assert pick is not None and pick.context_length == chosen
    assert pick.workload == f"code@ctx{chosen}"
    assert how in pick.line() and "128, 512" in pick.line()
    assert pick_bucket("math", 100, ["code@ctx128"]) is None


def test_grow_prompt_fills_from_whole_documents_then_a_tail():
    tok = WhitespaceTokenizer()
    count = token_counter(tok, chat_template=False)

    def raw(s: str) -> int:
        return len(tok.encode(s, add_special_tokens=False))

    docs = [_words("a", 30), _words("b", 30), _words("c", 30)]
    text, n = grow_prompt(_words("p", 10), iter(docs), 50, count, raw)
    # 1 BOS + 10 prompt words + 30 of the nearest document + the tail of the next (9 words).
    assert n == 50 == count(text)
    assert text.endswith(_words("p", 10))
    assert _words("a", 30) in text and "b29" in text and "b0 " not in text
    assert "c0" not in text  # nothing past what fills the bucket
    # A prompt longer than the bucket keeps its end (what the model continues), cut at a word.
    long = _words("q", 80)
    cut, n = grow_prompt(long, iter(docs), 50, count, raw)
    assert n == 50 and cut == " ".join(f"q{i}" for i in range(31, 80))


def test_build_bucket_uses_other_documents_of_the_workload_only():
    tok = WhitespaceTokenizer()
    count = token_counter(tok, chat_template=False)

    def raw(s: str) -> int:
        return len(tok.encode(s, add_special_tokens=False))

    prompts = [Prompt(_words(t, 20), 7) for t in "xyz"]
    pool = [p.text for p in prompts]
    built, tokens = build_bucket(prompts, pool, 45, count, raw)
    assert tokens == [45, 45, 45] == [count(p.text) for p in built]
    assert [p.max_tokens for p in built] == [7, 7, 7]
    for own, grown in zip(prompts, built, strict=True):
        assert grown.text.endswith(own.text)
        assert grown.text.count(own.text) == 1  # the prompt never serves as its own context
    # The nearest documents are the ones after the prompt in the pool (wrapping round).
    assert built[0].text.split("\n\n")[-2] == prompts[1].text
    assert built[2].text.split("\n\n")[-2] == prompts[0].text


def _inline(prompts: list[str], **extra: Any) -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {
            "name": "docs",
            "source": {"kind": "inline", "prompts": prompts},
            "num_prompts": 2,
            "max_tokens": 16,
            "chat_template": False,
            **extra,
        }
    )


def test_prepare_bucket_draws_more_of_the_source_and_records_real_counts(tmp_path: Path):
    spec = _inline([_words(t, 40) for t in "abcdefgh"])
    prepared, stats = prepare_bucket(spec, tmp_path, 120, WhitespaceTokenizer())
    assert prepared.name == "docs@ctx120" and len(prepared.prompts) == 2
    assert stats.context_length == 120 and stats.num_prompts == 2
    assert 0.9 * 120 <= stats.prompt_tokens_min <= stats.prompt_tokens_max <= 120
    # Its own digest: the grown prompts never share one with the plain workload's.
    again, _ = prepare_bucket(spec, tmp_path, 120, WhitespaceTokenizer())
    assert again.digest == prepared.digest
    other, _ = prepare_bucket(spec, tmp_path, 100, WhitespaceTokenizer())
    assert other.digest != prepared.digest


def test_prepare_bucket_refuses_a_workload_too_short_for_it(tmp_path: Path):
    spec = _inline([_words("a", 10), _words("b", 10), _words("c", 10)])
    with pytest.raises(SpecError) as err:
        prepare_bucket(
            spec, tmp_path, 500, WhitespaceTokenizer(), origin="s.yaml", field="context_lengths.1"
        )
    assert err.value.source == "s.yaml" and err.value.field == "context_lengths.1"
    assert "too little text for a 500-token bucket" in err.value.reason
    assert "never pads" in err.value.reason


def _spec(**extra: Any) -> StudySpec:
    data = {
        "name": "c1",
        "model": {"name": "tiny"},
        "workloads": ["code", "math"],
        "methods": [{"method": "ngram", "num_speculative_tokens": {"min": 1, "max": 2}}],
        "measurement": {"max_tokens": 64},
        **extra,
    }
    return validate(StudySpec, data, "s.yaml")


def test_measured_names_are_one_variant_per_workload_and_bucket():
    resolved = resolve_study(_spec(context_lengths=[128, 512]), "s.yaml", platform="cpu")
    assert resolved.measured_names() == ["code@ctx128", "code@ctx512", "math@ctx128", "math@ctx512"]
    spec, _ = resolved.measured_workload("math@ctx512")
    assert spec.name == "math" and spec.max_tokens == 64
    plain = resolve_study(_spec(), "s.yaml", platform="cpu")
    assert plain.measured_names() == ["code", "math"]


@pytest.mark.parametrize(
    ("lengths", "field", "message"),
    [
        ([512, 128], "context_lengths", "strictly increasing"),
        ([128, 128], "context_lengths", "strictly increasing"),
        ([0], "context_lengths.0", "greater than or equal to 1"),
        ([True], "context_lengths.0", "valid integer"),
        ([128.0], "context_lengths.0", "valid integer"),
        ([], "context_lengths", "at least 1"),
    ],
)
def test_bad_context_lengths_name_the_field(lengths, field, message):
    with pytest.raises(SpecError) as err:
        _spec(context_lengths=lengths)
    assert err.value.source == "s.yaml" and err.value.field == field
    assert message in err.value.reason


def test_context_lengths_must_fit_max_model_len():
    # The tiny model's max_model_len is 1024 (catalog): 1000 prompt + 64 output tokens do not fit.
    with pytest.raises(SpecError) as err:
        resolve_study(_spec(context_lengths=[128, 1000]), "s.yaml", platform="cpu")
    assert err.value.field == "context_lengths.1"
    assert "exceed the model's max_model_len (1024)" in err.value.reason


# --- the axis through search -> recommend --context -> report -> check, on a replayed sweep ---

# Two buckets of the code workload whose answers differ: at 128 prompt tokens n-gram N=3 wins
# at concurrency 1 and nothing at 8; at 512, N=2 wins at 1 and N=1 at 8.
BUCKET_TOK_S = {
    ("code@ctx128", 1): {0: 100.0, 1: 130.0, 2: 150.0, 3: 170.0},
    ("code@ctx128", 8): {0: 600.0, 1: 560.0, 2: 540.0, 3: 500.0},
    ("code@ctx512", 1): {0: 80.0, 1: 110.0, 2: 130.0, 3: 120.0},
    ("code@ctx512", 8): {0: 400.0, 1: 450.0, 2: 420.0, 3: 380.0},
}
NGRAM_ACCEPTANCE = (0.7, 0.5, 0.3)


def _bucket_landscape(path: Path) -> Path:
    from autotune.engine.readers.landscape import LandscapePoint, write_landscape

    points = [
        LandscapePoint(
            model="tiny",
            workload=workload,
            method="ngram" if n else "none",
            draft=None,
            num_speculative_tokens=n,
            concurrency=c,
            repeat=r,
            output_throughput_tok_s=tput,
            mean_acceptance_length=1 + sum(NGRAM_ACCEPTANCE[:n]) if n else None,
            acceptance_per_pos=NGRAM_ACCEPTANCE[:n],
            engine_start_s=20.0,
            measure_s=3.0,
        )
        for (workload, c), by_n in BUCKET_TOK_S.items()
        for n, tput in by_n.items()
        for r in range(3)
    ]
    write_landscape(path, points)
    return path


def test_context_axis_through_search_recommend_report_and_check(tmp_path: Path, autotune):
    import json

    land = _bucket_landscape(tmp_path / "buckets.csv")
    made = autotune("study", "create", "--landscape", str(land), "--name", "ctx")
    assert made.exit_code == 0, made.stderr
    ran = autotune("study", "run", "ctx", "--no-progress")
    assert ran.exit_code == 0, ran.stderr

    # --context picks the bucket at or above L, else the largest, and says which.
    at_100 = autotune(
        "recommend",
        "--model",
        "tiny",
        "--workload",
        "code",
        "--context",
        "100",
        "--concurrency",
        "1",
    )
    assert at_100.exit_code == 0, at_100.stderr
    assert json.loads(at_100.stdout)["num_speculative_tokens"] == 3
    assert "bucket of 128 prompt tokens (code@ctx128)" in at_100.stderr
    at_300 = autotune(
        "recommend",
        "--model",
        "tiny",
        "--workload",
        "code",
        "--context",
        "300",
        "--concurrency",
        "1",
        "--explain",
    )
    assert json.loads(at_300.stdout)["num_speculative_tokens"] == 2
    assert "code@ctx512" in at_300.stderr and "context      bucket of 512" in at_300.stderr
    as_json = autotune(
        "recommend", "--model", "tiny", "--workload", "code", "--context", "300", "--json"
    )
    assert json.loads(as_json.stdout)["context_length"] == 512
    beyond = autotune(
        "recommend",
        "--model",
        "tiny",
        "--workload",
        "code",
        "--context",
        "9000",
        "--concurrency",
        "8",
    )
    assert json.loads(beyond.stdout)["num_speculative_tokens"] == 1
    assert "no measured bucket reaches it, so the largest one" in beyond.stderr

    # Without --context there is no single answer; --format dsd gives one table per bucket.
    plain = autotune("recommend", "--model", "tiny", "--workload", "code")
    assert plain.exit_code == 1 and "measured per context length only" in plain.stderr
    assert "128, 512" in plain.stderr
    dsd = autotune("recommend", "--model", "tiny", "--workload", "code", "--format", "dsd")
    assert dsd.exit_code == 0, dsd.stderr
    table = json.loads(dsd.stdout)
    assert [e["context_tokens"] for e in table] == [[1, 128], [129, None]]
    assert table[0]["speculative_config"]["num_speculative_tokens_per_batch_size"] == [
        [1, 1, 3],
        [2, 8, 0],
    ]
    assert table[1]["speculative_config"]["num_speculative_tokens_per_batch_size"] == [
        [1, 1, 2],
        [2, 8, 1],
    ]
    one = autotune(
        "recommend", "--model", "tiny", "--workload", "code", "--context", "512", "--format", "dsd"
    )
    assert json.loads(one.stdout)["num_speculative_tokens_per_batch_size"] == [[1, 1, 2], [2, 8, 1]]

    # The report has one section per bucket with its best config per level.
    rep = autotune("report", "ctx")
    assert rep.exit_code == 0, rep.stderr
    assert "code@ctx128: bucket of 128 prompt tokens" in rep.stdout
    assert "best: c=1 ngram N=3 (1.70x), c=8 off" in rep.stdout
    assert "best: c=1 ngram N=2 (1.62x), c=8 ngram N=1 (1.12x)" in rep.stdout
    rep_json = json.loads(autotune("report", "ctx", "--json").stdout)
    assert [b["context_length"] for b in rep_json["context_buckets"]] == [128, 512]

    # check judges at the bucket --context picks.
    n2 = (
        '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4, '
        '"prompt_lookup_min": 2}'
    )
    good = autotune(
        "check",
        "--model",
        "tiny",
        "--workload",
        "code",
        "--context",
        "400",
        "--concurrency",
        "1",
        "--config",
        n2,
    )
    assert good.exit_code == 0, good.stderr
    bad = autotune(
        "check",
        "--model",
        "tiny",
        "--workload",
        "code",
        "--context",
        "100",
        "--concurrency",
        "1",
        "--config",
        n2,
    )
    assert bad.exit_code == 1 and "code@ctx128" in bad.stderr

    # Bad input: a context the flag cannot take, and a workload without buckets.
    zero = autotune("recommend", "--model", "tiny", "--workload", "code", "--context", "0")
    assert zero.exit_code == 2 and "--context" in zero.stderr
    none = autotune("recommend", "--model", "tiny", "--workload", "chat", "--context", "64")
    assert none.exit_code == 1 and "no context-length bucket of workload 'chat'" in none.stderr
