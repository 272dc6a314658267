"""The MkDocs hooks, tested on their own."""

from __future__ import annotations

import importlib.util
import sys
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
