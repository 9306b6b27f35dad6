"""`import nbstream` imports the engine only; the widgets, the endpoint and the doctor load
on first use, under the same names as always."""

from __future__ import annotations

import subprocess
import sys

import pytest

WIDGET_STACK = ("nbstream.widgets", "nbstream.doctor", "nbstream.backends.remote")
WIDGET_STACK += ("anywidget", "ipywidgets", "IPython", "httpx")


def run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_import_nbstream_leaves_the_widgets_and_the_endpoint_unimported():
    out = run_python(
        "import sys, nbstream\n"
        f"print(sorted(m for m in sys.modules if m.startswith({WIDGET_STACK!r})))\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    assert out.splitlines() == ["[]", "False False"]


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("StreamWidget", "nbstream.widgets.stream"),
        ("ChatWidget", "nbstream.widgets.chat"),
        ("CompareWidget", "nbstream.widgets.compare"),
        ("Endpoint", "nbstream.backends.remote"),
        ("EndpointError", "nbstream.backends.remote"),
        ("doctor", "nbstream.doctor"),
    ],
)
def test_a_lazy_name_is_the_defining_module_s_object_every_way(name, module):
    out = run_python(
        "import importlib, nbstream\n"
        f"first = getattr(nbstream, {name!r})\n"
        f"from nbstream import {name} as imported\n"
        f"defined = getattr(importlib.import_module({module!r}), {name!r})\n"
        f"print(first is imported is defined is getattr(nbstream, {name!r}))\n"
        f"print({name!r} in dir(nbstream))"
    )
    assert out.splitlines() == ["True", "True"]


def test_importing_the_doctor_module_leaves_nbstream_doctor_the_function():
    # The command line imports the module; `nbstream.doctor()` must still be the call.
    out = run_python(
        "import nbstream.doctor, nbstream\n"
        "from nbstream.doctor import doctor\n"
        "print(nbstream.doctor is doctor, callable(nbstream.doctor))"
    )
    assert out.split() == ["True", "True"]


def test_the_widgets_package_is_reachable_as_an_attribute():
    out = run_python("import nbstream\nprint(nbstream.widgets.stream.StreamWidget.__name__)")
    assert out.strip() == "StreamWidget"


def test_an_unknown_name_is_an_attribute_error():
    import nbstream

    with pytest.raises(AttributeError, match="no_such_name"):
        nbstream.no_such_name  # noqa: B018
    assert not hasattr(nbstream, "magic_words")


def test_in_a_kernel_a_run_is_shown_by_the_widgets_display_before_they_are_imported(
    monkeypatch,
):
    import types

    import nbstream
    import nbstream.widgets.display as display

    registered = {}
    formatter = types.SimpleNamespace(for_type=lambda kind, show: registered.update({kind: show}))
    shell = types.SimpleNamespace(
        kernel=object(),
        display_formatter=types.SimpleNamespace(ipython_display_formatter=formatter),
    )
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    nbstream._register_run_display()
    assert list(registered) == [nbstream.Generation]
    shown = []
    monkeypatch.setattr(display, "show_run", shown.append)
    registered[nbstream.Generation]("a run")
    assert shown == ["a run"]


def test_outside_a_kernel_nothing_is_registered(monkeypatch):
    import types

    import nbstream

    shell = types.SimpleNamespace(kernel=None)
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    nbstream._register_run_display()  # no display_formatter to reach: would raise
    monkeypatch.setitem(sys.modules, "IPython", None)
    nbstream._register_run_display()
