"""What nbstream exports: `nbstream.__all__` is its public top level, and every public module
says its own public names in `__all__`."""

from __future__ import annotations

import importlib
import pkgutil
import types
import warnings

import pytest

import nbstream


def public_modules() -> list[str]:
    """Every module of the package whose dotted name has no part starting with `_`."""
    names = [
        info.name
        for info in pkgutil.walk_packages(nbstream.__path__, prefix="nbstream.")
        if not any(part.startswith("_") for part in info.name.split("."))
    ]
    return sorted(names)


def import_quietly(name: str) -> types.ModuleType:
    # A moved module's thin re-export warns that it moved; its names still count.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return importlib.import_module(name)


@pytest.mark.parametrize("name", nbstream.__all__)
def test_every_exported_name_is_importable_and_documented(name: str) -> None:
    member = getattr(nbstream, name)
    if name.startswith("__"):
        return  # __version__: a string
    assert member.__doc__ and member.__doc__.strip(), f"nbstream.{name} has no docstring"


def test_all_lists_exactly_the_public_top_level_names() -> None:
    public = {
        name
        # dir(), not vars(): the widgets and the endpoint are imported on first use.
        for name, value in ((name, getattr(nbstream, name)) for name in dir(nbstream))
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and getattr(value, "__module__", "").startswith("nbstream")
    }
    assert sorted(nbstream.__all__) == sorted(public | {"__version__"})
    assert len(set(nbstream.__all__)) == len(nbstream.__all__)


def test_endpoint_error_is_importable_from_the_top() -> None:
    from nbstream import EndpointError
    from nbstream.backends.remote import EndpointError as where_defined

    assert EndpointError is where_defined


def test_the_public_modules_are_found() -> None:
    found = public_modules()
    for name in ("nbstream.generation", "nbstream.widgets.stream", "nbstream.backends.remote"):
        assert name in found
    assert "nbstream.widgets" in found and "nbstream.testing" in found
    assert not [name for name in found if "._" in name]


@pytest.mark.parametrize("name", public_modules())
def test_every_public_module_has_all_and_its_names_exist(name: str) -> None:
    module = import_quietly(name)
    exported = getattr(module, "__all__", None)
    assert isinstance(exported, list) and exported, f"{name} has no __all__"
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"
    missing = [member for member in exported if not hasattr(module, member)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"
