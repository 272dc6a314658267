"""The pages drawn from the code and the committed data, checked in the built HTML."""

from __future__ import annotations

import re

import pytest
from docs_support import LANGUAGES, ROOT, BuiltSite, Node, parse_html
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
    for figure in html.find_all("figure", "steadyloop-chart"):
        caption = figure.text()
        assert re.search(r"benchmarks/results/\w+\.json", caption), "a chart names no result"
        assert re.search(r"\d{4}-\d\d-\d\d", caption), "a chart names no date"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_record_kinds_page_lists_every_kind(built_site: BuiltSite, lang: str) -> None:
    """Every record kind in src/ has its own section on the page, with an ASCII id."""
    html = parse_html(built_site.page(lang, "reference/record-kinds"))
    ids = {n.attrs.get("id") for n in html.iter()}
    for kind in kinds_in_source():
        assert "kind-" + re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-") in ids, kind


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize(
    ("page", "prefix", "path"),
    [
        ("reference/case-language", "case", "schemas/case.schema.json"),
        ("reference/report-schema", "report", "schemas/report.schema.json"),
    ],
)
def test_schema_pages_show_every_object_and_field(
    built_site: BuiltSite, lang: str, page: str, prefix: str, path: str
) -> None:
    """The case-language and report pages hold a section per schema object, listing its fields."""
    from test_docs_hooks import schema_anchors

    html = parse_html(built_site.page(lang, page))
    text = built_site.page(lang, page).read_text(encoding="utf-8")
    assert "json-schema" not in text, "a schema marker was not replaced"
    by_id = {n.attrs["id"]: n for n in html.iter() if "id" in n.attrs}
    for anchor, fields in schema_anchors(prefix, path).items():
        assert anchor in by_id, anchor
        heading = by_id[anchor]
        table = _next_table(heading)
        assert table is not None, f"{anchor}: no table"
        cells = {td.text().strip() for td in table.find_all("td")}
        for name in fields:
            assert name in cells, f"{anchor}: {name}"


def _next_table(heading: Node) -> Node | None:
    """The first table after a heading, before the next heading of the same level."""
    parent = heading.parent
    assert parent is not None
    siblings = [c for c in parent.children if isinstance(c, Node)]
    for node in siblings[siblings.index(heading) + 1 :]:
        if node.tag == heading.tag:
            return None
        if node.tag == "table":
            return node
        tables = node.find_all("table")
        if tables:
            return tables[0]
    return None
