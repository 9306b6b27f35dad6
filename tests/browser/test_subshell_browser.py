"""Stop while another cell keeps the kernel busy, in a real JupyterLab
and in Notebook 7.

JupyterLab 4.4+ sends widget messages on a kernel subshell; nbstream publishes its comm
messages under the page's parent, so ipykernel routes the Stop click to that subshell's
thread, which handles it while the main shell is blocked (see nbstream/widgets/route.py).

Timing-free: the blocking cell waits on an event that the test sets only after it has seen
the run cancelled, so "cancelled while the cell still runs" holds on any machine. How long
the Stop took is measured and kept as a figure, never asserted.

Notebook 7 (7.6) is built on the same JupyterLab packages: its kernel connection sends comm
messages on subshells too (`@jupyterlab/apputils-extension:subshell-settings`, the same
`commsOverSubshells` setting, default `perCommTarget`, is in its bundle), so every test here
runs in both front ends (the `jupyter` fixture).
"""

from __future__ import annotations

import re
import time

import pytest
from browser_helpers import MS, SETUP, SLOW, STREAM_TIMEOUT, kval, view, wait_status, wait_until
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

#: The name `nbstream.doctor()` gives each front end.
FRONT_END = {"lab": "JupyterLab", "notebook": "Notebook 7"}


@pytest.fixture(params=["lab", "notebook7"])
def jupyter(request):
    """JupyterLab, then Notebook 7 (the `lab` and `notebook7` fixtures)."""
    return request.getfixturevalue(request.param)


# Whether the kernel's main thread (where its shell runs cells) is in a cell's code and, from
# there, in a function of this name now. The page's kernel status is no sign that a cell
# started: the harness's own kernel_eval requests, on a subshell, make it read busy and idle.
_MAIN_THREAD_IN = (
    "(lambda frames: any(f.f_code.co_name == '<module>' and f.f_globals is"
    " get_ipython().user_ns for f in frames) and any(f.f_code.co_name == {name!r}"
    " for f in frames))([f for f, _ in __import__('traceback').walk_stack("
    "__import__('sys')._current_frames()[threading.main_thread().ident])])"
)


def wait_main_thread_in(nb, name: str) -> None:
    wait_until(
        lambda: kval(nb, _MAIN_THREAD_IN.format(name=name)),
        30,
        what=f"the kernel's main thread in {name}()",
    )


def _start_streaming(nb, v) -> None:
    v.get_by_role("button", name="Run", exact=True).click()
    wait_status(v, "running")
    wait_until(lambda: kval(nb, "len(w.run.partial_text)") > 0, STREAM_TIMEOUT, what="text")


# The blocking cell starts a thread of its own that prints once the run is over: its print
# must land in this cell although the Stop that ended the run was handled meanwhile (on a
# subshell), which resets where threads' prints go.
BLOCKING = (
    "def late():\n"
    "    while not w.run.done:\n"
    "        time.sleep(0.01)\n"
    "    print('printed by a thread after the stop')\n"
    "threading.Thread(target=late).start()\n"
    "block.wait(600)\n"
    "'unblocked'"
)


def test_stop_acts_while_another_cell_blocks_the_kernel(jupyter, figures):
    nb = jupyter.open_notebook([SETUP, SLOW, BLOCKING])
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    _start_streaming(nb, v)
    nb.run_cell(2, wait=False)
    wait_main_thread_in(nb, "wait")  # the cell is blocked in block.wait
    assert kval(nb, "block.is_set()") is False

    clicked = time.monotonic()
    v.get_by_role("button", name="Stop", exact=True).click()
    wait_status(v, "cancelled")
    key = "stop_during_a_busy_cell_s" + ("" if jupyter.server.app == "lab" else "_notebook7")
    figures[key] = round(time.monotonic() - clicked, 3)
    # The kernel agrees, and the blocking cell is still running: the Stop did not wait for it.
    assert kval(nb, "(w.status, w.run.status, block.is_set())") == ("cancelled", "cancelled", False)
    # (The page's kernel status may read idle here: the subshell that handled the click
    # reports its own busy/idle, which JupyterLab shows for the whole kernel.)
    assert nb.execution_count(2) is None
    # Generation really halted: the run's thread is gone, not streaming on unseen.
    running = "[t.name for t in threading.enumerate() if t.name.startswith('nbstream-run-')]"
    assert kval(nb, "w.run.done") is True and kval(nb, running) == []
    expect(v.locator(".nbstream-stop-waiting")).to_have_count(0)

    nb.kernel_eval("block.set()")
    nb.wait_cell(2)
    # The cell's own outputs went to the cell: its result, and its thread's print.
    assert "unblocked" in nb.output(2)
    assert "printed by a thread after the stop" in nb.output(2)
    # A run started after the blocking cell ended completes as usual.
    nb.kernel_eval("w.generate(max_new_tokens=4) and None")
    wait_status(v, "complete")
    assert nb.console_errors() == []


def test_stop_acts_while_a_cell_waits_for_the_run(jupyter):
    nb = jupyter.open_notebook([SETUP, SLOW, "w.wait()"])
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    _start_streaming(nb, v)
    nb.run_cell(2, wait=False)
    wait_main_thread_in(nb, "wait")  # the cell is in w.wait()
    v.get_by_role("button", name="Stop", exact=True).click()
    wait_status(v, "cancelled")
    nb.wait_cell(2)
    # wait() ended with the cancellation, in its own cell.
    assert "GenerationCancelled" in nb.output(2)
    assert kval(nb, "w.status") == "cancelled"
    expect(v).to_have_attribute("data-status", "cancelled", timeout=STREAM_TIMEOUT * MS)
    assert nb.console_errors() == []


# "Generate, then wait" in one cell: the run is started by the very cell that then blocks.
# The widget is shown by an earlier cell, or by that same cell (then the kernel has handled
# no message from its view before the cell blocks).
GENERATE_AND_WAIT = "w.generate('Hello')\nw.wait()"
SLOWED_MODEL = SLOW.replace("w = nbstream.StreamWidget", "shown = nbstream.StreamWidget")
SHOW_THEN_GENERATE_AND_WAIT = (
    "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=3000)\n"
    "display(w)\n" + GENERATE_AND_WAIT
)
_ENDED = re.compile("^(complete|failed|cancelled)$")


@pytest.mark.parametrize("shown_by", ["an earlier cell", "the same cell"])
def test_stop_acts_while_the_cell_that_started_the_run_waits_for_it(jupyter, shown_by, figures):
    if shown_by == "an earlier cell":
        nb = jupyter.open_notebook([SETUP, SLOW, GENERATE_AND_WAIT])
    else:
        nb = jupyter.open_notebook([SETUP, SLOWED_MODEL, SHOW_THEN_GENERATE_AND_WAIT])
    nb.run_cell(0)
    nb.run_cell(1)
    nb.run_cell(2, wait=False)
    # Watched from the page only until the run has ended: a request of the harness's own
    # (kernel_eval, on a subshell of its own) would become the parent that the widget's
    # background publications fall back on, and route the page's clicks to the harness's
    # idle subshell, which no user's page has.
    v = view(nb, 1 if shown_by == "an earlier cell" else 2)
    wait_status(v, "running")
    shown = v.locator(".nbstream-output")
    wait_until(lambda: shown.inner_text().strip(), STREAM_TIMEOUT, what="text in the view")
    assert nb.execution_count(2) is None  # the cell runs, in generate() or wait()

    clicked = time.monotonic()
    v.get_by_role("button", name="Stop", exact=True).click()
    # The slowed run needs minutes for its 3,000 tokens: cancelled only if the Stop acted.
    expect(v).to_have_attribute("data-status", _ENDED, timeout=600 * MS)
    key = "stop_in_the_cell_that_started_the_run_s" + ("" if shown_by[0] == "a" else "_shown_there")
    figures[key + ("" if jupyter.server.app == "lab" else "_notebook7")] = round(
        time.monotonic() - clicked, 3
    )
    assert v.get_attribute("data-status") == "cancelled"
    # The cell's own wait() ended with the cancellation: the Stop acted while it blocked.
    nb.wait_cell(2)
    assert "GenerationCancelled" in nb.output(2)
    assert kval(nb, "(w.run.status, w.run.metrics['tokens'] < 3000)") == ("cancelled", True)
    expect(v.locator(".nbstream-stop-waiting")).to_have_count(0)
    assert nb.console_errors() == []


def test_doctor_completes_its_report_from_the_page(jupyter):
    """The self-check's front-end lines come from the page: the probe widget loaded, in
    which front end, and its messages arrive on a subshell (what the Stop above relies on)."""
    host = FRONT_END[jupyter.server.app]
    nb = jupyter.open_notebook([SETUP, "checkup = nbstream.doctor()\ncheckup"])
    nb.run_cell(0)
    nb.run_cell(1)
    expect(nb.cell(1).locator("[data-nbstream-probe='loaded']")).to_have_count(1)
    wait_until(
        lambda: kval(nb, "checkup.finding('front end').status") == "ok", 60, what="the hello"
    )
    assert kval(nb, "checkup.finding('front end').detail") == f"widgets load ({host})"
    # The page says hello until the kernel has seen one on a subshell (or gives up).
    verdict = "checkup.finding('Stop while a cell runs').status"
    wait_until(lambda: kval(nb, verdict) in ("ok", "warning"), 60, what="the subshell check")
    assert kval(nb, f"({verdict}, checkup.ok)") == ("ok", True)
    # The table shown in the cell was rewritten with the page's answer.
    table = nb.cell(1).locator("table")
    expect(table).to_contain_text(f"widgets load ({host})")
    expect(table).to_contain_text("widget messages arrive on a kernel subshell")
    assert nb.console_errors() == []
