"""The pages drawn from the code and the committed data, checked in the built HTML."""

from __future__ import annotations

import re

import pytest
from docs_support import LANGUAGES, ROOT, BuiltSite, parse_html
from test_docs_hooks import kinds_in_source

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("lang", LANGUAGES)
def test_performance_page_draws_every_committed_result(built_site: BuiltSite, lang: str) -> None:
    """Each result file is listed as used and drawn; no marker or placeholder is left."""
    page = built_site.page(lang, "performance")
    text = page.read_text(encoding="utf-8")
    assert "benchmark-" not in text, "a benchmark marker was not replaced"
    results = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    assert results
    html = parse_html(page)
    listing = html.find_all("table")[0].text()
    for path in results:
        assert f"benchmarks/results/{path.name}" in listing, path.name
    charts = [svg for fig in html.find_all("figure", "steadyloop-chart") for svg in fig.iter()]
    charts = [svg for svg in charts if svg.tag == "svg"]
    assert len(charts) >= len(results), "a result file has no chart"
    for svg in charts:
        assert svg.attrs.get("role") == "img" and svg.attrs.get("aria-label")


@pytest.mark.parametrize("lang", LANGUAGES)
def test_record_kinds_page_lists_every_kind(built_site: BuiltSite, lang: str) -> None:
    """Every record kind in src/ has its own section on the page, with an ASCII id."""
    html = parse_html(built_site.page(lang, "reference/record-kinds"))
    ids = {n.attrs.get("id") for n in html.iter()}
    for kind in kinds_in_source():
        assert "kind-" + re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-") in ids, kind
