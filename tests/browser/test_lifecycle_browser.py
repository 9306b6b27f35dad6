"""A widget whose output is cleared mid-stream is closed: its run stops, no thread is left.

Clearing a cell's output (or deleting the cell) removes the widget's view from a notebook
that stays open; with no view of it left on the page, nobody can see the run or press Stop,
so the front end tells the kernel and the widget closes. A second view keeps it alive.
"""

from __future__ import annotations

import ast
import time

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

SETUP = """\
import threading
import torch
torch.set_num_threads(1)
import nbstream
from nbstream.testing import tiny_model
model, tokenizer = tiny_model(one_line=True)
RUN_THREADS = "sorted(t.name for t in threading.enumerate() if t.name.startswith('nbstream-run-'))"
"""


def kval(nb, expr: str):
    return ast.literal_eval(nb.kernel_eval(expr))


def wait_until(predicate, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def clear_output(nb, cell: int) -> None:
    """Select the cell and run JupyterLab's "Clear Cell Output" command, as a user does."""
    nb.cell(cell).locator(".jp-InputPrompt").first.click()
    nb.page.evaluate("window.jupyterapp.commands.execute('notebook:clear-cell-output')")
    expect(nb.cell(cell).locator(".nbstream")).to_have_count(0)


def test_clearing_the_output_mid_stream_closes_the_widget_and_stops_its_run(lab):
    nb = lab.open_notebook(
        [
            SETUP,
            "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=8000)\nw",
            "run = w.generate('hello')",
        ]
    )
    for i in range(3):
        nb.run_cell(i)
    out = nb.cell(1).locator(".nbstream-output")
    wait_until(lambda: out.inner_text().strip() != "", "text in the view")
    assert kval(nb, "run.status") == "running"

    clear_output(nb, 1)
    wait_until(lambda: kval(nb, "run.done"), "the run to end")
    assert kval(nb, "run.status") == "cancelled"
    assert kval(nb, "run.metrics['tokens'] < 8000")
    assert kval(nb, "w.comm is None")  # closed
    wait_until(lambda: kval(nb, "eval(RUN_THREADS)") == [], "no run thread left")
    assert nb.console_errors() == []


def test_a_second_view_keeps_the_widget_until_it_is_cleared_too(lab):
    nb = lab.open_notebook(
        [
            SETUP,
            "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=8000)\nw",
            "display(w)\nrun = w.generate('hello')",
        ]
    )
    for i in range(3):
        nb.run_cell(i)
    second = nb.cell(2).locator(".nbstream-output")
    wait_until(lambda: second.inner_text().strip() != "", "text in the second view")

    clear_output(nb, 1)
    # The other view still shows the run: it goes on, and keeps growing there.
    shown = len(second.inner_text())
    wait_until(lambda: len(second.inner_text()) > shown, "the second view to keep growing")
    assert kval(nb, "run.status") == "running" and kval(nb, "w.comm is not None")

    clear_output(nb, 2)
    wait_until(lambda: kval(nb, "run.done"), "the run to end")
    assert kval(nb, "run.status") == "cancelled"
    assert kval(nb, "w.comm is None")
    assert nb.console_errors() == []
