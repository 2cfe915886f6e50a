"""docs/catalog.md is what autotune.spec.catalog_reference renders from the model catalog."""

from __future__ import annotations

import json
from pathlib import Path

from autotune.spec.catalog_reference import main, render

REPO = Path(__file__).resolve().parents[2]
CHECKED_IN = REPO / "docs" / "catalog.md"


def test_checked_in_catalog_page_is_what_the_catalog_renders():
    assert CHECKED_IN.read_text(encoding="utf-8") == render(), (
        "docs/catalog.md is out of date: run `make docs` "
        "(python -m autotune.spec.catalog_reference docs/catalog.md)"
    )


def test_every_model_method_and_draft_of_models_json_is_on_the_page(autotune):
    result = autotune("models", "--json", db=False)
    assert result.exit_code == 0, result.stderr
    text = render()
    for alias, entry in json.loads(result.stdout).items():
        assert f"## `{alias}`" in text
        assert f"`{entry['model']}`" in text
        for method in entry["methods"].values():
            if method["draft"]:
                assert f"`{method['draft']}`" in text


def test_main_writes_the_page(tmp_path: Path):
    out = tmp_path / "catalog.md"
    assert main([str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render()
