"""The quickstart notebook, run cell by cell in a real JupyterLab in Chromium.

tests/test_binder.py executes it headlessly; this runs it the way a reader does, so the
widget views it displays are rendered by the front end: each view must end in the state its
kernel object is in. It is not named test_*.py: pytest collects it only when named, and
tests/test_packaging.py names it, with nbstream installed from the wheel into a fresh
virtual environment and NBSTREAM_EXPECT_INSTALLED set to that environment's prefix (the
kernel must import nbstream from there, not from this source tree). Run from the source
tree (`pytest tests/browser/quickstart_in_jupyterlab.py`), the kernel must import it from here.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"
# One torch thread in the kernel, as in every browser test: on a busy 2-core machine,
# OpenMP threads spinning against other processes slow decoding many times over.
SETUP = "import torch\ntorch.set_num_threads(1)"


def test_quickstart_tour_in_jupyterlab(lab):
    code = [
        c.source for c in nbformat.read(QUICKSTART, as_version=4).cells if c.cell_type == "code"
    ]
    nb = lab.open_notebook([SETUP, *code], name="quickstart.ipynb")
    for i in range(len(code) + 1):
        nb.run_cell(i, timeout=300)
        text = "\n".join(nb.outputs(i))
        # An exception a cell does not catch shows IPython's traceback header.
        assert "Traceback (most recent call last)" not in text, f"cell {i} raised:\n{text}"

    expected = os.environ.get("NBSTREAM_EXPECT_INSTALLED")
    where = nb.kernel_eval("__import__('nbstream').__file__").strip("'\"")
    if expected:
        assert Path(where).resolve().is_relative_to(Path(expected).resolve()), where
    else:
        assert Path(where).resolve().is_relative_to(REPO), where

    # Every widget view shows what its kernel object says, and a finished run's view
    # carries the DOM contract (status, partial marking, error element).
    views = nb.page.locator(".nbstream")
    assert views.count() >= 1
    status = nb.kernel_eval("w.status").strip("'\"")
    deadline = time.monotonic() + 30
    while views.first.get_attribute("data-status") != status and time.monotonic() < deadline:
        time.sleep(0.1)
    first = views.first
    expect(first).to_have_attribute("data-status", status)
    assert status in {"complete", "failed", "cancelled"}
    partial = "false" if status == "complete" else "true"
    expect(first.locator(".nbstream-output")).to_have_attribute("data-partial", partial)
    expect(first.locator(".nbstream-error")).to_have_count(1 if status == "failed" else 0)
    expect(first.get_by_role("button", name="Run", exact=True)).to_be_enabled()
    expect(first.get_by_role("button", name="Stop", exact=True)).to_be_disabled()
    expect(first).to_have_attribute(
        "data-version", nb.kernel_eval("nbstream.__version__").strip("'\"")
    )
    # The Stop and the budget failure happen in widgets shown in their own cells, each
    # ending in its kernel object's state (not off-screen in the widget at the top).
    for name, state in (("story", "cancelled"), ("rainbow", "failed")):
        cell = 1 + next(i for i, source in enumerate(code) if f"{name} = " in source)
        own = nb.cell(cell).locator(".nbstream")
        expect(own).to_have_count(1)
        assert nb.kernel_eval(f"{name}.status").strip("'\"") == state
        expect(own).to_have_attribute("data-status", state)
    expect(nb.cell(cell).locator(".nbstream-error")).to_have_count(1)  # the failure, shown
    # The tour ends with the self-check, which the page completes: the front end loaded.
    deadline = time.monotonic() + 60
    found = "report.finding('front end').status"
    while nb.kernel_eval(found).strip("'\"") != "ok" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert nb.kernel_eval(found).strip("'\"") == "ok", nb.kernel_eval("str(report)")
