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
    # The closed widget agrees with its run (it said "running" for good), and says why.
    wait_until(lambda: kval(nb, "w.status") == "cancelled", "w.status to follow the run")
    assert kval(nb, "w.metrics['finish_reason']") == "cancelled"
    assert kval(nb, "w.metrics == run.metrics")
    nb.kernel_eval(
        "exec('try:\\n    run.wait()\\nexcept nbstream.GenerationCancelled as e:\\n"
        "    message = str(e)')"
    )
    assert kval(nb, "message") == (
        "the run was cancelled because the widget was closed (its output was cleared)"
    )
    assert kval(nb, "run.record['cancel_reason']") == (
        "the widget was closed (its output was cleared)"
    )
    # A run started on it from code later: its end shows in the traits too.
    nb.kernel_eval("w.generate('again', max_new_tokens=3)")
    wait_until(lambda: kval(nb, "w.status") == "complete", "the later run's end in w.status")
    assert nb.console_errors() == []


def test_after_a_kernel_restart_the_old_view_shows_disconnected(lab):
    """The kernel restarts: the widget's view stays on the page, but nothing answers it any
    more. It says so, its controls are disabled, and a click throws nothing."""
    nb = lab.open_notebook(
        [
            SETUP,
            "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=8000)\nw",
            "run = w.generate('hello')",
        ]
    )
    for i in range(3):
        nb.run_cell(i)
    v = nb.cell(1).locator(".nbstream")
    out = v.locator(".nbstream-output")
    wait_until(lambda: out.inner_text().strip() != "", "text in the view")
    run_btn = v.get_by_role("button", name="Run", exact=True)
    expect(v.get_by_role("button", name="Stop", exact=True)).to_be_enabled()

    # As the toolbar's Restart does once confirmed (without the dialog).
    nb.page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()"
    )
    nb.wait_kernel_idle()
    expect(v).to_have_attribute("data-connection", "lost", timeout=30_000)
    expect(v.locator(".nbstream-disconnected")).to_have_text(
        "Disconnected: the kernel restarted: run the cell again"
    )
    expect(v.locator(".nbstream-badge")).to_contain_text("disconnected")
    for control in (
        run_btn,
        v.get_by_role("button", name="Stop", exact=True),
        v.get_by_role("textbox", name="Prompt", exact=True),
    ):
        expect(control).to_be_disabled()
    # A click that reaches Run anyway sends nothing and throws nothing.
    run_btn.dispatch_event("click")
    nb.page.wait_for_timeout(500)
    assert nb.console_errors() == []
    # Running the cells again in the new kernel gives a live widget (the old view is
    # disposed: its "removed" goes nowhere, and throws nothing). The execution counts start
    # again from 1, so run_cell's wait (a new count) cannot tell when each has finished.
    nb.run_cell(0, wait=False)
    wait_until(lambda: kval(nb, "'RUN_THREADS' in globals()"), "the setup cell again")
    nb.run_cell(1, wait=False)
    wait_until(lambda: kval(nb, "'w' in globals()"), "the widget cell again")
    fresh = nb.cell(1).locator(".nbstream")
    expect(fresh).to_have_count(1)
    expect(fresh).not_to_have_attribute("data-connection", "lost")
    expect(fresh.get_by_role("button", name="Run", exact=True)).to_be_enabled()
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
