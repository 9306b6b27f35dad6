"""The module paths that moved into ``nbstream.widgets`` still import, with a warning."""

from __future__ import annotations

import importlib
import sys

import pytest

import nbstream
from nbstream.widgets import compare as widgets_compare

OLD = {
    "nbstream.widget": ["StreamWidget"],
    "nbstream.chat": ["ChatWidget"],
    "nbstream.compare": [
        "CompareWidget",
        "DEFAULT_SETTINGS",
        "Runs",
        "describe_settings",
        "divergence_words",
    ],
}


@pytest.mark.parametrize("path", sorted(OLD))
def test_an_old_path_warns_and_gives_the_same_names(path):
    sys.modules.pop(path, None)
    with pytest.warns(DeprecationWarning, match=path.replace(".", r"\.") + " is deprecated"):
        module = importlib.import_module(path)
    for name in OLD[path]:
        new = getattr(nbstream, name, None) or getattr(widgets_compare, name)
        assert getattr(module, name) is new
