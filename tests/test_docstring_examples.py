"""The `Examples:` in the package's docstrings run and print what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import steadyloop


def _modules_with_examples() -> list[str]:
    names = ["steadyloop"]
    for info in pkgutil.walk_packages(steadyloop.__path__, "steadyloop."):
        if not info.name.endswith("__main__"):  # importing it would run the CLI
            names.append(info.name)
    finder = doctest.DocTestFinder()
    return [
        name
        for name in names
        if any(test.examples for test in finder.find(importlib.import_module(name)))
    ]


MODULES = _modules_with_examples()


def test_examples_were_found() -> None:
    """The finder sees the docstring examples (so the test below cannot pass vacuously)."""
    assert len(MODULES) >= 8


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    """Every docstring example in the module gives the output it shows."""
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
