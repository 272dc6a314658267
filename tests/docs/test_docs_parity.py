"""English and Chinese say the same thing: same pages, headings, code and notebooks.

These checks read the sources only; they need no build.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from docs_support import DOCS, LANGUAGES, NOTEBOOKS, markdown_pages

EN, ZH = LANGUAGES

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^\n]*)$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*(?:\{#(?P<id>[\w-]+)\})?\s*$")
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
_DIRECTIVE = re.compile(r"^(?::::\s+\S+|<!--\s*[\w-]+\s+\S+.*-->)\s*$")


def parse(text: str) -> dict[str, list[object]]:
    """Headings, code blocks, diagrams, directives and local links of a Markdown page."""
    headings: list[object] = []
    code: list[object] = []
    diagrams: list[object] = []
    directives: list[object] = []
    links: list[object] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            marker, info = fence["fence"], fence["info"].strip()
            body = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(marker):
                body.append(lines[i])
                i += 1
            block = (info, "\n".join(body))
            (diagrams if info == "mermaid" else code).append(
                (info, len(body)) if info == "mermaid" else block
            )
        elif m := _HEADING.match(line):
            headings.append((len(m[1]), m["id"]))
        elif _DIRECTIVE.match(line):
            directives.append(line.strip())
        else:
            for link in _LINK.finditer(line):
                target = link["target"]
                if "://" not in target and not target.startswith("mailto:"):
                    links.append(target)
        i += 1
    return {
        "headings": headings,
        "code": code,
        "diagrams": diagrams,
        "directives": directives,
        "links": links,
    }


def test_both_languages_have_the_same_pages() -> None:
    """Every page exists in both languages."""
    assert markdown_pages(EN) == markdown_pages(ZH)
    assert markdown_pages(EN), "no pages found"


def test_both_languages_have_the_same_notebooks() -> None:
    """Every notebook exists in both languages, and docs link both the same way."""
    en = sorted(p.name for p in (NOTEBOOKS / EN).glob("*.ipynb"))
    zh = sorted(p.name for p in (NOTEBOOKS / ZH).glob("*.ipynb"))
    assert en == zh
    assert en, "no notebooks found"
    for lang in LANGUAGES:
        link = DOCS / lang / "tutorials" / "notebooks"
        assert link.is_symlink() and link.resolve() == (NOTEBOOKS / lang).resolve()


@pytest.mark.parametrize("page", markdown_pages(EN))
def test_page_structure_matches(page: str) -> None:
    """Same heading levels and ids, identical code, same diagrams, directives and links."""
    en = parse((DOCS / EN / page).read_text(encoding="utf-8"))
    zh = parse((DOCS / ZH / page).read_text(encoding="utf-8"))
    assert zh["headings"] == en["headings"], "heading structure differs"
    assert zh["code"] == en["code"], "code blocks differ"
    assert zh["diagrams"] == en["diagrams"], "diagrams differ in number or size"
    assert zh["directives"] == en["directives"], "generated sections differ"
    assert zh["links"] == en["links"], "local links differ"


@pytest.mark.parametrize("page", markdown_pages(EN))
def test_sections_have_ascii_ids(page: str) -> None:
    """Sections below the title carry explicit ASCII ids, so anchors match across languages."""
    for lang in LANGUAGES:
        for level, anchor in parse((DOCS / lang / page).read_text(encoding="utf-8"))["headings"]:  # type: ignore[misc]
            if level > 1:
                assert anchor and anchor.isascii(), (
                    f"{lang}/{page}: a level-{level} heading has no ASCII id"
                )


def test_chinese_pages_are_written_in_chinese() -> None:
    """A Chinese page is not an untranslated copy of the English one."""
    for page in markdown_pages(ZH):
        text = (DOCS / ZH / page).read_text(encoding="utf-8")
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        assert re.search(r"[\u4e00-\u9fff]{4}", prose), f"zh/{page} has no Chinese prose"
        assert text != (DOCS / EN / page).read_text(encoding="utf-8")


# -- notebooks ------------------------------------------------------------------------


def notebook_names() -> list[str]:
    return sorted(p.name for p in (NOTEBOOKS / EN).glob("*.ipynb"))


def load(lang: str, name: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((NOTEBOOKS / lang / name).read_text(encoding="utf-8"))
    return data


def source(cell: dict[str, object]) -> str:
    text = cell["source"]
    return "".join(text) if isinstance(text, list) else str(text)


@pytest.mark.parametrize("name", notebook_names())
def test_notebooks_have_identical_code_cells(name: str) -> None:
    """The two versions of a notebook run the same code; only prose differs."""
    en, zh = load(EN, name), load(ZH, name)
    en_cells, zh_cells = en["cells"], zh["cells"]
    assert isinstance(en_cells, list) and isinstance(zh_cells, list)
    assert [c["cell_type"] for c in en_cells] == [c["cell_type"] for c in zh_cells]
    en_code = [source(c) for c in en_cells if c["cell_type"] == "code"]
    zh_code = [source(c) for c in zh_cells if c["cell_type"] == "code"]
    assert en_code == zh_code
    en_heads = [
        len(m)
        for c in en_cells
        if c["cell_type"] == "markdown"
        for m in re.findall(r"^(#+) ", source(c), re.M)
    ]
    zh_heads = [
        len(m)
        for c in zh_cells
        if c["cell_type"] == "markdown"
        for m in re.findall(r"^(#+) ", source(c), re.M)
    ]
    assert en_heads == zh_heads, "heading structure differs"


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("name", notebook_names())
def test_notebooks_are_committed_without_outputs(lang: str, name: str) -> None:
    """No outputs and no execution counts: every figure comes from the current code."""
    nb = load(lang, name)
    cells = nb["cells"]
    assert isinstance(cells, list)
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"cell {i} has outputs"
            assert cell.get("execution_count") is None, f"cell {i} has an execution count"
    metadata = nb["metadata"]
    assert isinstance(metadata, dict)
    assert metadata["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("name", notebook_names())
def test_notebooks_are_valid(lang: str, name: str) -> None:
    """Each notebook validates against the nbformat schema."""
    import nbformat

    nbformat.validate(nbformat.read(Path(NOTEBOOKS / lang / name), as_version=4))
