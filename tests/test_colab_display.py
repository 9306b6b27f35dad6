"""What Colab needs from a widget library, emulated: its custom widget manager and metadata.

Colab draws widgets outside ipywidgets' own package only through its custom widget manager,
loaded from a CDN: a library must call ``google.colab.output.enable_custom_widget_manager()``
and put that manager's URL in the display message's metadata
(``{"application/vnd.jupyter.widget-view+json": {"colab": {"custom_widget_manager":
{"url": ...}}}}``; googlecolab/colabtools #498, anywidget PR #52 and issue #63). anywidget
does both for a widget shown through its own ``_repr_mimebundle_``; nbstream shows its widgets
itself (a view and a text copy), so these tests check the view it publishes still carries
them. Colab cannot run here: a stand-in ``google.colab.output`` module records the calls.
"""

from __future__ import annotations

import sys
import types

import IPython.display
import pytest

import nbstream
from nbstream.widgets.display import WIDGET_VIEW

MANAGER_URL = "https://ssl.gstatic.com/colaboratory-static/widgets/colab-cdn-widget-manager/abc/manager.min.js"


@pytest.fixture
def colab(monkeypatch):
    """A stand-in for Colab's ``google.colab.output``: counts the enable calls."""
    calls = []
    output = types.ModuleType("google.colab.output")
    output.enable_custom_widget_manager = lambda: calls.append("enable")
    output._widgets = types.SimpleNamespace(_installed_url=MANAGER_URL)
    google = types.ModuleType("google")
    colab_module = types.ModuleType("google.colab")
    colab_module.output = output
    google.colab = colab_module
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setitem(sys.modules, "google.colab", colab_module)
    monkeypatch.setitem(sys.modules, "google.colab.output", output)
    # anywidget enables the manager once per process (functools.cache): start afresh.
    from anywidget import _util

    _util.enable_custom_widget_manager_once.cache_clear()
    yield calls
    _util.enable_custom_widget_manager_once.cache_clear()


@pytest.fixture
def shown(monkeypatch):
    """Every display and update the widgets publish, as (data, metadata)."""
    published: list[tuple[dict, dict]] = []
    monkeypatch.setattr(nbstream.widgets.display, "in_kernel", lambda: True)

    def record(data, **kwargs):
        published.append((data, kwargs.get("metadata") or {}))

    monkeypatch.setattr(IPython.display, "display", record)
    monkeypatch.setattr(IPython.display, "update_display", record)
    return published


@pytest.mark.parametrize("kind", ["stream", "chat"])
def test_in_colab_the_view_enables_and_names_the_custom_widget_manager(tiny, colab, shown, kind):
    widget = (
        nbstream.StreamWidget(*tiny, max_new_tokens=4)
        if kind == "stream"
        else nbstream.ChatWidget(*tiny, max_new_tokens=4)
    )
    widget._ipython_display_()
    assert colab == ["enable"]
    views = [(data, meta) for data, meta in shown if data.get(WIDGET_VIEW, {}).get("model_id")]
    assert views, shown
    for _data, metadata in views:
        assert metadata[WIDGET_VIEW]["colab"]["custom_widget_manager"]["url"] == MANAGER_URL
    widget.close()


def test_in_colab_a_compare_enables_the_manager_and_names_it(tiny, colab, shown):
    cw = nbstream.CompareWidget(*tiny, settings=[{"temperature": 0}, {"temperature": 0.7}])
    cw._ipython_display_()
    assert colab == ["enable"]
    views = [(data, meta) for data, meta in shown if data.get(WIDGET_VIEW, {}).get("model_id")]
    assert views, shown
    for _data, metadata in views:
        assert metadata[WIDGET_VIEW]["colab"]["custom_widget_manager"]["url"] == MANAGER_URL
    cw.close()


def test_outside_colab_the_view_carries_no_colab_metadata(tiny, shown):
    w = nbstream.StreamWidget(*tiny, max_new_tokens=4)
    w._ipython_display_()
    for _data, metadata in shown:
        assert "colab" not in metadata.get(WIDGET_VIEW, {})
    w.close()
