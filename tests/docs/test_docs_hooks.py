"""The MkDocs hooks, tested on their own."""

from __future__ import annotations

import html
import importlib
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from docs_support import ROOT


def load_hook(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"docs_hook_{name}", ROOT / "hooks" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cli_hook() -> ModuleType:
    return load_hook("cli_reference")


@pytest.fixture(scope="module")
def demo_app_module() -> ModuleType:
    import typer

    app = typer.Typer(help="Demo [bold]tool[/bold].", rich_markup_mode="rich", add_completion=False)
    group = typer.Typer(help="Things about stores.")
    app.add_typer(group, name="store")

    @app.command()
    def run(
        url: str = typer.Argument(..., help="Where | to run."),
        count: int = typer.Option(3, "--count", "-c", help="How many [dim]rounds[/dim]."),
        secret: str = typer.Option("", hidden=True),
    ) -> None:
        """Run the thing."""

    @group.command("check")
    def check(verbose: bool = typer.Option(False, help="Say more.")) -> None:
        """Check a store."""

    module = ModuleType("docs_demo_cli")
    module.app = app  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    return module


def test_cli_reference_covers_nested_commands(
    cli_hook: ModuleType, demo_app_module: ModuleType
) -> None:
    """Every command and group gets a section with an ASCII id, usage and its parameters."""
    text = cli_hook.generate("docs_demo_cli:app", "demo")
    assert "## `demo` {#cli-demo}" in text
    assert "### `demo run` {#cli-demo-run}" in text
    assert "### `demo store` {#cli-demo-store}" in text
    assert "#### `demo store check` {#cli-demo-store-check}" in text
    assert "$ demo run [OPTIONS]" in text
    assert "Demo tool." in text and "[bold]" not in text, "rich markup is stripped"
    assert "How many rounds." in text and "[default: 3]" in text, "help keeps its content"
    assert "Where \\| to run." in text, "pipes are escaped"
    assert "secret" not in text, "hidden options stay hidden"
    assert "--help" not in text


def test_cli_marker_is_replaced(cli_hook: ModuleType, demo_app_module: ModuleType) -> None:
    """The marker line in a page becomes the generated reference."""
    page = type("P", (), {"file": type("F", (), {"src_uri": "en/reference/cli.md"})()})()
    out = cli_hook.on_page_markdown(
        "# CLI\n\n<!-- cli-reference docs_demo_cli:app prog=demo -->\n", page
    )
    assert "cli-reference" not in out and "{#cli-demo-store-check}" in out


def test_cli_failure_is_a_warning(cli_hook: ModuleType, caplog: pytest.LogCaptureFixture) -> None:
    """A missing app logs a warning, which fails a strict build, and shows on the page."""
    page = type("P", (), {"file": type("F", (), {"src_uri": "en/reference/cli.md"})()})()
    out = cli_hook.on_page_markdown("<!-- cli-reference no_such_module_xyz:app -->\n", page)
    assert "could not be loaded" in out
    assert any(r.levelname == "WARNING" for r in caplog.records)


def test_error_hierarchy_lists_every_error() -> None:
    """The drawn tree names every exception class the module exports, under its parent."""
    from steadyloop import _errors

    text = load_hook("error_reference").hierarchy("steadyloop._errors")
    lines = text.splitlines()
    assert lines[0] == "```text" and lines[1] == "SteadyloopError"
    for name in _errors.__all__:
        assert any(
            line.rstrip().split("── ")[-1].split("  ")[0] == name or line == name for line in lines
        ), name
    assert "IdempotencyKeyReused" in text.split("ConflictError", 1)[1]


def test_notebook_headings_get_ids() -> None:
    """Headings nbconvert leaves without an id get a unique, non-empty one."""
    hook = load_hook("notebooks")
    html = (
        '<h1 id="">快速上手<a class="anchor-link" href="#">¶</a></h1>'
        '<h2 id="">打开日志<a class="anchor-link" href="#">¶</a></h2>'
        '<h2 id="">打开日志<a class="anchor-link" href="#">¶</a></h2>'
        '<h2 id="">！！<a class="anchor-link" href="#">¶</a></h2>'
    )
    out = hook._fill_empty_ids(html)
    ids = [a for _, a, _ in hook._headings(out)]
    assert ids == ["快速上手", "打开日志", "打开日志_2", "section"]
    assert 'href="#打开日志_2"' in out and 'id=""' not in out


def test_notebook_headings_take_the_english_ids(tmp_path: Path) -> None:
    """A notebook's n-th heading takes the id of the English notebook's n-th heading."""
    from mkdocs.exceptions import PluginError

    hook = load_hook("notebooks")
    english = tmp_path / "x.ipynb"
    cells = [
        {"cell_type": "markdown", "source": ["# Five minutes\n", "```sh\n# not a heading\n```\n"]},
        {"cell_type": "markdown", "source": "## Decide, with `steadyloop runs resolve`\n"},
        {"cell_type": "markdown", "source": "## State `RESUME_STATE_UNKNOWN` and *more*"},
        {"cell_type": "markdown", "source": "## Resume"},
    ]
    english.write_text(json.dumps({"cells": cells}), encoding="utf-8")
    texts = [t for _, t in hook.markdown_headings(english)]
    assert texts == [
        "Five minutes",
        "Decide, with steadyloop runs resolve",
        "State RESUME_STATE_UNKNOWN and more",
        "Resume",
    ]
    ids = hook.shared_ids(texts)
    assert ids[1:] == [
        "decide-with-steadyloop-runs-resolve",
        "state-resume_state_unknown-and-more",
        "resume",
    ]
    zh = (
        '<h1 id="五分钟">五分钟<a class="anchor-link" href="#五分钟">¶</a></h1>'
        '<h2 id="">用 <code>steadyloop runs resolve</code> 做出裁定'
        '<a class="anchor-link" href="#">¶</a></h2>'
        '<h2 id="状态">状态</h2><h2 id="恢复">恢复</h2>'
    )
    out = hook.give_shared_ids(zh, ids, "zh/x.ipynb")
    assert [a for _, a, _ in hook._headings(out)] == ids
    assert 'href="#decide-with-steadyloop-runs-resolve"' in out
    with pytest.raises(PluginError, match="3 headings, its English notebook 4"):
        hook.give_shared_ids(zh.replace('<h2 id="状态">状态</h2>', ""), ids, "zh/x.ipynb")


def test_notebooks_count_as_pages() -> None:
    """After startup, a notebook source is a documentation page, for every File made later."""
    from mkdocs.structure.files import File

    hook = load_hook("notebooks")
    original = File.is_documentation_page
    try:
        hook.on_startup(command="build", dirty=False)
        nb = File("en/x.ipynb", "/docs", "/site", use_directory_urls=True)
        md = File("en/y.md", "/docs", "/site", use_directory_urls=True)
        png = File("en/z.png", "/docs", "/site", use_directory_urls=True)
        assert nb.is_documentation_page() and nb.dest_uri == "en/x/index.html"
        assert md.is_documentation_page()
        assert not png.is_documentation_page()
    finally:
        File.is_documentation_page = original  # type: ignore[method-assign]


# -- benchmark charts -------------------------------------------------------------------


def _page(src_uri: str) -> object:
    return type("P", (), {"file": type("F", (), {"src_uri": src_uri})()})()


BENCH_PAGE = """# Performance

<!-- benchmark-sources benchmarks/results -->

<!-- benchmark-if journal.json -->
## Journal {#journal}

<!-- benchmark-chart journal.json -->
<!-- benchmark-end journal.json -->

<!-- benchmark-if never.json -->
## Not measured yet {#never}

<!-- benchmark-chart never.json -->
<!-- benchmark-end never.json -->

<!-- benchmark-others -->
"""


def test_benchmark_sections_render_only_what_exists(tmp_path: Path) -> None:
    """A block for a missing result file vanishes; a file no block names gets a section."""
    hook = load_hook("benchmarks")
    journal = ROOT / "benchmarks" / "results" / "journal.json"
    (tmp_path / "journal.json").write_bytes(journal.read_bytes())
    (tmp_path / "extra.json").write_text(
        json.dumps(
            {
                "what": "an extra one",
                "rows": {"a": {"median_us": 5}, "b": {"median_us": 7}},
                "measured": {
                    "date": "2026-12-03T10:00:00Z",
                    "load_average_at_start": [0.5, 0.4, 0.3],
                    "load_average_at_end": [0.6, 0.4, 0.3],
                },
            }
        ),
        encoding="utf-8",
    )
    text, used = hook.render_page(BENCH_PAGE, "en", tmp_path)
    assert used == ["extra.json", "journal.json"]
    assert "never" not in text and "Not measured yet" not in text
    assert "benchmark-" not in text, "every marker is replaced"
    assert text.count("<svg") == 2 and "## `extra.json` {#bench-extra}" in text
    assert "`floor fsync`" in text and "an extra one" not in text.split("## `extra.json`")[0]
    sources = text.split("## Journal")[0]
    assert "journal.json" in sources and "extra.json" in sources


def test_generic_results_are_named_not_dumped() -> None:
    """A list of results shows each entry under its own name, never as ``backends.0.kills``."""
    hook = load_hook("benchmarks")
    data = {
        "ok": True,
        "machine": {"python": "3.11"},
        "backends": [
            {"backend": "sqlite", "kills": 5, "stop_reasons": {"completed": 3}, "failures": []},
            {"backend": "jsonl", "kills": 7, "stop_reasons": {"completed": 1}, "failures": []},
        ],
        "settings": {"seed": "soak", "steps_per_run": 200},
        "notebook_seconds": {"notebooks/en/a.ipynb": 1.5},
    }
    text = hook.render_generic("soak.json", data, "en")
    assert "backends.0" not in text and ".0." not in text
    assert "`sqlite`" in text and "`jsonl`" in text and "stop_reasons.completed" in text
    assert "| `seed` | soak |" in text and "| `notebooks/en/a.ipynb` | 1.50 |" in text
    assert "3.11" not in text, "the machine is named in the result-file table, not here"


def test_server_settings_are_one_per_line() -> None:
    """The durability column lists one setting per line, so it stays narrow and whole."""
    hook = load_hook("benchmarks")
    data = json.loads((ROOT / "benchmarks" / "results" / "backends.json").read_text("utf-8"))
    text = hook.render_backends(hook.Fields(data, "backends.json"), "en")
    assert "`fsync=on`<br>`" in text or "`appendfsync=everysec`<br>`" in text


def test_benchmark_labels_follow_the_language() -> None:
    """The Chinese page gets Chinese labels; the language comes from the source path."""
    hook = load_hook("benchmarks")
    assert hook.language(_page("zh/performance.md")) == "zh"
    assert hook.language(_page("en/performance.md")) == "en"
    text, _ = hook.render_page("<!-- benchmark-chart journal.json -->\n", "zh")
    assert "中位数" in text and "median" not in text.replace("median_us", "")


def test_every_committed_result_file_is_drawn() -> None:
    """Each result file in benchmarks/results renders, with its own renderer if it has one."""
    hook = load_hook("benchmarks")
    files = hook.result_files()
    assert files, "no committed benchmark results"
    for path in files:
        for lang in ("en", "zh"):
            data = hook.load(path)
            drawn = hook.render_known(path.name, data, lang)
            assert "<svg" in drawn or "|---|" in drawn, path.name
            renderer = hook.RENDERERS.get(path.name)
            if renderer is not None:
                renderer(hook.Fields(data, path.name), lang)  # the layout still fits the file


def test_bar_chart_is_accessible_svg() -> None:
    """A chart is inline SVG with a title, an aria label, and a bar per value."""
    hook = load_hook("benchmarks")
    svg = hook.bar_chart("T <x>", ["a", "b"], [hook.Series("s", [1.0, None])], reference=("f", 2.0))
    assert svg.startswith("<figure") and 'role="img"' in svg and "<title>T &lt;x&gt;</title>" in svg
    assert svg.count("<rect") == 1
    assert "\n\n" not in svg, "a blank line would end the raw HTML block in Markdown"


def test_chart_labels_fit_left_of_the_bars() -> None:
    """Every category label of the loop charts, in both languages, starts inside the chart."""
    hook = load_hook("benchmarks")
    data = json.loads((ROOT / "benchmarks" / "results" / "loop.json").read_text(encoding="utf-8"))
    for lang in ("en", "zh"):
        for svg in hook.render_loop(hook.Fields(data, "loop.json"), lang).split("<figure")[1:]:
            for m in re.finditer(
                r'<text x="([\d.]+)" y="[\d.]+" text-anchor="end"[^>]*>([^<]+)<', svg
            ):
                label = html.unescape(m[2])
                assert float(m[1]) - hook._text_width(label) >= 0, (lang, label)


# -- record kinds -------------------------------------------------------------------------

_KIND_CONSTANT = re.compile(
    r"^(?P<name>KIND_\w+|\w+_KIND)\s*(?::[^=]+)?=\s*[\"'](?P<value>[^\"']+)[\"']", re.M
)
_REGISTRY = re.compile(r"^(?P<name>\w*RECORD_KINDS)\b", re.M)


_KIND_ENUM = re.compile(
    r"^class (?P<name>\w+)\(enum\.StrEnum\):\n    \"\"\"[^\n]*record kinds?\b", re.M | re.I
)


def kinds_in_source() -> set[str]:
    """Every kind value in src/, found without the hook's code.

    That is: *_KIND / KIND_* constants, *RECORD_KINDS members, and the members of
    string enums whose docstring says they are record kinds.
    """
    src = ROOT / "src" / "steadyloop"
    found: set[str] = set()
    for path in src.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        found |= {m["value"] for m in _KIND_CONSTANT.finditer(text)}
        registries = {m["name"] for m in _REGISTRY.finditer(text)}
        enums = {m["name"] for m in _KIND_ENUM.finditer(text)}
        if registries or enums:
            module = ".".join(path.relative_to(ROOT / "src").with_suffix("").parts)
            loaded = importlib.import_module(module)
            for name in registries:
                found |= set(getattr(loaded, name))
            for name in enums:
                found |= {str(member.value) for member in getattr(loaded, name)}
    return found


def test_record_kinds_hook_finds_every_kind_in_the_code() -> None:
    """Every *_KIND or KIND_* constant and every registry member of src/ is listed."""
    hook = load_hook("record_kinds")
    groups = hook.collect("steadyloop")
    listed = {k.value for kinds in groups.values() for k in kinds}
    expected = kinds_in_source()
    assert {"effect.intent", "effect.result", "session.event", "task.claimed"} <= expected
    assert expected - listed == set()
    text = hook.render(groups)
    for value in expected:
        assert f"#### `{value}`" in text, value


def test_record_kinds_are_described_from_docstrings() -> None:
    """Docstring entries give each kind its payload fields and a description."""
    hook = load_hook("record_kinds")
    entries = hook.docstring_entries(
        "Kinds:\n\n``a.b`` (``x``, ``y`` and\n    ``z``)\n    Says :class:`~m.Thing` happened.\n"
    )
    assert entries == {"a.b": ("`x`, `y` and `z`", "Says `Thing` happened.")}
    kinds = {k.value: k for ks in hook.collect("steadyloop").values() for k in ks}
    intent = kinds["effect.intent"]
    assert "steadyloop.records.INTENT_KIND" in intent.constants
    assert "`intent_id`" in intent.fields and intent.description
    assert kinds["session.event"].constants == ["steadyloop.sessions.KIND_EVENT"]
    assert all(k.description for k in kinds.values()), "a kind without a description"


# -- JSON Schema reference ----------------------------------------------------------------

SCHEMAS = [("case", "schemas/case.schema.json"), ("report", "schemas/report.schema.json")]
_CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def schema_hook() -> ModuleType:
    # MkDocs puts a hook's folder on sys.path while it loads it; so does this fixture.
    sys.path.insert(0, str(ROOT / "hooks"))
    try:
        return load_hook("json_schema")
    finally:
        sys.path.remove(str(ROOT / "hooks"))


@pytest.mark.parametrize(("prefix", "path"), SCHEMAS)
def test_schema_reference_lists_every_object_and_field(
    schema_hook: ModuleType, prefix: str, path: str
) -> None:
    """Each object of the shipped schema gets a section, and each field a table row."""
    schema = json.loads((ROOT / "src" / "steadyloop" / "replay" / path).read_text(encoding="utf-8"))
    text = schema_hook.generate("steadyloop.replay", path, prefix, "en")
    anchors = schema_hook.schema_anchors("steadyloop.replay", path, prefix)
    for anchor, fields in anchors.items():
        assert f"{{#{anchor}}}" in text, anchor
        section = text.split(f"{{#{anchor}}}", 1)[1].split("\n### ", 1)[0]
        for name in fields:
            assert f"| `{name}` |" in section, f"{anchor}: {name}"
    for name, node in schema.get("$defs", {}).items():
        op = node.get("properties", {}).get("op", {}).get("const")
        slug = re.sub(r"[^a-z0-9]+", "-", (op or name).lower()).strip("-")
        assert f"{prefix}-{'op' if op else 'def'}-{slug}" in anchors, name


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(("prefix", "path"), SCHEMAS)
def test_every_schema_field_is_explained(
    schema_hook: ModuleType, prefix: str, path: str, lang: str
) -> None:
    """No field reaches the reference without a meaning, in either language.

    A field added to a schema without a description fails here until it is described,
    in its docstring (English) and in hooks/schema_notes.py.
    """
    meanings = schema_hook.field_meanings("steadyloop.replay", path, prefix, lang)
    assert meanings
    missing = [key for key, text in meanings.items() if not text.strip()]
    assert missing == []
    if lang == "zh":
        english = [key for key, text in meanings.items() if not _CJK.search(text)]
        assert english == [], "fields explained only in English on the Chinese page"


def test_schema_marker_is_replaced_in_the_page_language(schema_hook: ModuleType) -> None:
    """The marker becomes the reference; the Chinese page gets Chinese labels."""
    marker = "<!-- json-schema steadyloop.replay/schemas/case.schema.json prefix=case -->\n"
    page = type("P", (), {"file": type("F", (), {"src_uri": "zh/reference/x.md"})()})()
    out = schema_hook.on_page_markdown("# X\n\n" + marker, page)
    assert "json-schema" not in out and "{#case-op-append-event}" in out
    assert "| 字段 | 类型 | 必填 |" in out


def test_schema_failure_is_a_warning(
    schema_hook: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    """A schema that cannot be read logs a warning, which fails a strict build."""
    page = type("P", (), {"file": type("F", (), {"src_uri": "en/reference/x.md"})()})()
    out = schema_hook.on_page_markdown(
        "<!-- json-schema steadyloop.replay/schemas/missing.schema.json -->\n", page
    )
    assert "could not be read" in out
    assert any(r.levelname == "WARNING" for r in caplog.records)


def schema_anchors(prefix: str, path: str) -> dict[str, list[str]]:
    """Section ids and field names the schema hook gives a schema (for the built-page test)."""
    sys.path.insert(0, str(ROOT / "hooks"))
    try:
        hook = load_hook("json_schema")
    finally:
        sys.path.remove(str(ROOT / "hooks"))
    anchors: dict[str, list[str]] = hook.schema_anchors("steadyloop.replay", path, prefix)
    return anchors


def test_long_inline_code_wraps_at_separators_only() -> None:
    """Inline identifiers get break chances after dots and underscores; code blocks are untouched."""
    hook = load_hook("layout")
    html = (
        "<td><code>effect.intent</code></td><td><code>short</code></td>"
        '<div class="highlight"><pre><span></span><code>import a.b.c.d.e.f</code></pre></div>'
    )
    out = hook.soft_breaks(html)
    assert "<code>effect.<wbr>intent</code>" in out
    assert "<code>short</code>" in out
    assert "<code>import a.b.c.d.e.f</code>" in out
    assert re.sub(r"<wbr>", "", out) == html, "only break chances are added"


def test_mermaid_is_the_pinned_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """The build serves the checked Mermaid file and refuses any other."""
    from mkdocs.exceptions import PluginError

    hook = load_hook("offline_assets")
    path = hook.mermaid_source()
    assert path.is_file() and hook.MERMAID_VERSION.encode() in path.read_bytes()
    monkeypatch.setattr(hook, "MERMAID_SHA256", "0" * 64)
    with pytest.raises(PluginError, match="SHA-256"):
        hook.mermaid_source()


def test_notebook_pages_lose_their_cdn_scripts() -> None:
    """The notebook template's CDN import and empty MathJax loader are removed, nothing else."""
    hook = load_hook("offline_assets")
    html = (
        '<p>keep</p><script src=""> </script>'
        '<script type="module">\n const m = (await import("https://cdn.example/m.mjs")).default;\n</script>'
        "<script>var local = 1;</script>"
    )
    assert hook.strip_remote_scripts(html) == "<p>keep</p><script>var local = 1;</script>"


def test_search_worker_is_patched_once_or_the_build_fails(tmp_path: Path) -> None:
    """The worker's Han segmentation is replaced exactly once; a worker without it fails."""
    from mkdocs.exceptions import PluginError

    hook = load_hook("search_per_language")
    workers = tmp_path / "assets" / "javascripts" / "workers"
    workers.mkdir(parents=True)
    line = 'e=e.replace(new RegExp("\\\\p{sc=Han}+","gu"),s=>[...fe(s,this.index.invertedIndex)].join("* "))'
    (workers / "search.1.min.js").write_text(f"a;{line};b", encoding="utf-8")
    hook.patch_worker(tmp_path)
    hook.patch_worker(tmp_path)  # again: nothing changes
    code = (workers / "search.1.min.js").read_text(encoding="utf-8")
    assert code.count("steadyloopSegment(e)") == 1 and "invertedIndex" not in code
    (workers / "search.1.min.js").write_text("a;b", encoding="utf-8")
    with pytest.raises(PluginError, match="0 query-segmenting lines"):
        hook.patch_worker(tmp_path)


def test_index_terms_are_the_han_words_of_the_entries() -> None:
    """The terms shipped with an index are the Han runs of its tokens, markup left out."""
    hook = load_hook("search_per_language")
    entries = [{"title": "幂等键", "text": "<p>回放\u200b比对 API对象 <code>x</code></p>"}]
    assert hook.index_terms(entries, r"[\s\u200b]+") == ["回放", "对象", "幂等键", "比对"]
