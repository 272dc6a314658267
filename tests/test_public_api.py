"""The curated public API: every package lists exactly what it exports."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import steadyloop


def _public_modules() -> list[str]:
    names = ["steadyloop"]
    for info in pkgutil.walk_packages(steadyloop.__path__, "steadyloop."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return sorted(names)


def _defined_under(owner: str, module_name: str) -> bool:
    """Whether ``owner`` is the module itself or one of its private submodules."""
    if owner == module_name:
        return True
    rest = owner.removeprefix(module_name + ".")
    return rest != owner and rest.split(".")[0].startswith("_")


@pytest.mark.parametrize("module_name", _public_modules())
def test_all_is_complete_and_importable(module_name: str) -> None:
    """Each public module's __all__ names exist, and every public name it defines is listed."""
    module = importlib.import_module(module_name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{module_name} has no __all__"
    for name in exported:
        assert hasattr(module, name), f"{module_name}.__all__ lists missing {name!r}"
    # Classes and functions of ours that a public module holds must be listed, so a
    # new public helper cannot slip out undocumented and unexported.
    ours = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and _defined_under(getattr(value, "__module__", "") or "", module_name)
    }
    missing = sorted(ours - set(exported))
    assert not missing, f"{module_name} defines public names missing from __all__: {missing}"


@pytest.mark.parametrize("module_name", _public_modules())
def test_every_export_is_documented(module_name: str) -> None:
    """Every exported class and function has a docstring (the API reference is built from them)."""
    module = importlib.import_module(module_name)
    undocumented = [
        name
        for name in getattr(module, "__all__", [])
        if (inspect.isclass(getattr(module, name)) or inspect.isfunction(getattr(module, name)))
        and not inspect.getdoc(getattr(module, name))
    ]
    assert not undocumented, f"{module_name}: no docstring on {undocumented}"


def test_every_error_is_exported_at_the_top() -> None:
    """Every class of the one error hierarchy can be imported from steadyloop itself."""
    from steadyloop import _errors

    assert sorted(set(_errors.__all__) - set(steadyloop.__all__)) == []
