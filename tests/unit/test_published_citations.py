"""``autotune.spec.published``: every cited source is a URL or a file inside the repository."""

from __future__ import annotations

import re
from pathlib import Path

from autotune.spec.published import load_published

REPO = Path(__file__).resolve().parents[2]
PATH = re.compile(r"(?<![\w/.:])((?:[\w.-]+/)+[\w.-]+\.\w+)")
URL = re.compile(r"https?://\S+")


def _sources() -> list[str]:
    published = load_published()
    return [r.source for r in published.results] + [r.source for r in published.recipes]


def test_every_cited_file_exists_in_the_repository() -> None:
    cited_files = 0
    for source in _sources():
        without_urls = URL.sub("", source)
        paths = PATH.findall(without_urls)
        assert paths or URL.search(source), f"cites neither a URL nor a file: {source!r}"
        for path in paths:
            cited_files += 1
            assert (REPO / path).is_file(), f"{path} (cited by {source!r}) is not in the repository"
    assert cited_files >= 1  # the seed document's Gemma 4 results


def test_the_catalog_file_cites_its_repository_copies_only() -> None:
    # Every repository path the file names (comments included) exists; the seed document is
    # cited by its copy in docs/sources/, not by a folder outside the repository.
    text = (REPO / "autotune" / "catalog" / "published.yaml").read_text(encoding="utf-8")
    ours = [p for p in PATH.findall(URL.sub("", text)) if p.startswith(("docs/", "autotune/"))]
    assert ours and all((REPO / p).exists() for p in ours), ours
    assert "shared/seed" not in text
