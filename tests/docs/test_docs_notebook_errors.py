"""The check for error outputs on notebook pages tells an error from quoted evidence.

The site test rejects a notebook page that shows an error output. A notebook may print
a traceback on purpose (the audit-loop notebook prints a verify command's captured
output as evidence), so the check must tell a cell that raised from a cell that prints.
Here a small notebook is rendered by mkdocs-jupyter itself, the renderer of the site,
so the check is proven on the HTML the build really produces.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import nbformat
import pytest
from docs_support import error_outputs, parse_html

pytestmark = pytest.mark.slow

EVIDENCE = 'print("Traceback (most recent call last):\\n  File \\"check.py\\", line 6")'
RAISES = "1 / 0"


def _notebook(folder: Path, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Probe")]
    nb.cells += [nbformat.v4.new_code_cell(source) for source in sources]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = folder / "probe.ipynb"
    nbformat.write(nb, path)
    return path


def _render(path: Path, *, allow_errors: bool) -> str:
    from mkdocs_jupyter.nbconvert2 import nb2html

    html: str = nb2html(str(path), execute=True, kernel_name="python3", allow_errors=allow_errors)
    return html


def _errors(html: str, folder: Path) -> list[str]:
    page = folder / "page.html"
    page.write_text(html, encoding="utf-8")
    return error_outputs(parse_html(page))


def test_printed_traceback_is_not_an_error_but_a_raising_cell_is() -> None:
    """Quoted evidence passes; an exception's output is caught, with its name."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        html = _render(_notebook(folder, EVIDENCE, RAISES), allow_errors=True)
        assert "Traceback (most recent call last)" in html  # the evidence is on the page
        errors = _errors(html, folder)
        assert len(errors) == 1
        assert "ZeroDivisionError" in errors[0]

        clean = _render(_notebook(folder, EVIDENCE), allow_errors=True)
        assert _errors(clean, folder) == []


def test_stderr_output_is_an_error() -> None:
    """Text written to stderr counts as an error output, as it did before."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        html = _render(
            _notebook(folder, 'import sys\nprint("warning", file=sys.stderr)'), allow_errors=True
        )
        assert len(_errors(html, folder)) == 1


def test_a_raising_cell_fails_the_render_as_the_site_is_configured() -> None:
    """With allow_errors false, as mkdocs.yml sets it, a raising cell stops the build."""
    from nbclient.exceptions import CellExecutionError

    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        with pytest.raises(CellExecutionError):
            _render(_notebook(folder, EVIDENCE, RAISES), allow_errors=False)
