"""Accessibility in a real JupyterLab: axe-core (WCAG 2.x A and AA, see
axe_audit.py) over each widget in each state, and what a screen reader is told.

One notebook for the module (its kernel serves every test, in order): a StreamWidget on the
tiny model shown twice (cells 1 and 2: two views of one widget), a StreamWidget on a forced
model that ends on its own (cell 3), a ChatWidget (cell 4) and a CompareWidget of two
columns (cell 5), all on one tiny model held at a decode step by a `Gate`
(browser_helpers.SETUP) where a run must be seen running, so no check depends on how fast
the machine is.

Colour contrast is left to test_themes_browser.py, which audits it in
every theme; every other WCAG A / AA rule is audited here.

What is announced (js/src/announce.js) is read from the page: a MutationObserver records
every text the views' live regions (.nbstream-announcer) take, per cell.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from browser_helpers import (
    MS,
    SETUP,
    STREAM_TIMEOUT,
    assert_accessible_but_contrast,
    kval,
    wait_until,
)
from jupyter_harness import Jupyter
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

MODELS = """\
model, tokenizer = tiny_model(one_line=True)
boom = threading.Event()
def fail(module, args, output):
    if boom.is_set():
        boom.clear()
        raise RuntimeError('injected failure')
model.register_forward_hook(fail)
gate = None
def hold(at=4):
    global gate
    if gate is not None:
        gate.opened.set()
        gate.handle.remove()
    gate = Gate(model, at)
    return True
def release():
    gate.opened.set()
    return True
w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=12)
w"""
SECOND_VIEW = "w"
FORCED = """\
fm, ft = forced_model("Hello there, friend.")
done = nbstream.StreamWidget(fm, ft, max_new_tokens=40)
done"""
CHAT = "chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens=6)\nchat"
COMPARE = """\
cw = nbstream.CompareWidget(model, tokenizer, "Hello", settings=[{"temperature": 0},
                            {"temperature": 0.7}], max_new_tokens=6, seed=1)
cw"""
CELLS = [SETUP, MODELS, SECOND_VIEW, FORCED, CHAT, COMPARE]

# Every text the live regions take (empty ones, the clearing before new words, left out),
# with the index of the cell the region is in.
_LISTEN = """() => {
  if (window.__nbsSaid) return;
  window.__nbsSaid = [];
  const cells = () => [...document.querySelectorAll('.jp-Notebook .jp-Cell')];
  new MutationObserver((records) => {
    for (const r of records) {
      const node = r.target.nodeType === 1 ? r.target : r.target.parentElement;
      const region = node && node.closest('.nbstream-announcer');
      if (!region || !region.textContent) continue;
      window.__nbsSaid.push({cell: cells().indexOf(region.closest('.jp-Cell')),
                             header: region.parentElement.matches('.nbstream-compare'),
                             text: region.textContent});
    }
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


@pytest.fixture(scope="module")
def nb(lab_server, browser) -> Iterator:
    harness = Jupyter(lab_server, browser)
    try:
        notebook = harness.open_notebook(CELLS, name="a11y.ipynb")
        for i in range(len(CELLS)):
            notebook.run_cell(i)
        notebook.page.evaluate(_LISTEN)
        yield notebook
    finally:
        harness.close()


def said(nb, *cells: int, header: bool | None = None) -> list[str]:
    """What the live regions in these cells said, in order (only the compare header's, or
    only the views', with `header`)."""
    return [
        s["text"]
        for s in nb.page.evaluate("() => window.__nbsSaid")
        if s["cell"] in cells and header in (None, s["header"])
    ]


def forget(nb) -> None:
    nb.page.evaluate("() => { window.__nbsSaid.length = 0; }")


def stream(nb, cell: int = 1):
    return nb.cell(cell).locator(".nbstream").first


def button(v, name: str):
    return v.get_by_role("button", name=name, exact=True)


def wait_status(v, status: str) -> None:
    expect(v).to_have_attribute("data-status", status, timeout=STREAM_TIMEOUT * MS)


def held(nb) -> None:
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="the run held")


def wait_said(nb, n: int, *cells: int) -> list[str]:
    """What the cells' views said, once they said at least n things (and a moment for more)."""
    wait_until(lambda: len(said(nb, *cells)) >= n, 30, what=f"{n} announcements in {cells}")
    nb.page.wait_for_timeout(500)  # an extra (wrong) announcement would come within this
    return said(nb, *cells)


def assert_one_end(texts: list[str], end: str) -> None:
    """`end` said once, after "Running" said at most once: a run that ends within a moment
    can reach the page as one change (its running state never shown, so never said)."""
    assert texts in ([end], ["Running", end]), texts


def test_stream_widget_in_each_state_and_one_announcement_per_run(nb):
    """Up to 50 s, most of it the module's notebook (its cells run once, for every test of
    the module) and an axe audit of the view in each state it passes through."""
    v, second = stream(nb, 1), stream(nb, 2)
    out = v.locator(".nbstream-output")
    assert_accessible_but_contrast(nb.page, "an idle StreamWidget")
    expect(out).to_have_attribute("role", "log")
    expect(out).to_have_attribute("aria-live", "off")  # no fragment is announced

    # Running (held at a step): the log is busy; axe finds nothing.
    forget(nb)
    assert kval(nb, "hold(4)")
    v.get_by_role("textbox", name="Prompt", exact=True).fill("Hello")
    button(v, "Run").click()
    held(nb)
    wait_status(v, "running")
    expect(out).to_have_attribute("aria-busy", "true")
    assert_accessible_but_contrast(nb.page, "a running StreamWidget")
    button(v, "Stop").click()
    wait_until(lambda: kval(nb, "w.run._control.cancel_event.is_set()"), 30, what="Stop reached")
    assert kval(nb, "release()")
    wait_status(v, "cancelled")
    expect(out).to_have_attribute("aria-busy", "false")
    tokens = kval(nb, "w.metrics['tokens']")
    # Two views of the widget, one announcement of each state between them.
    assert wait_said(nb, 2, 1, 2) == ["Running", f"Stopped after {tokens} tokens"]
    wait_status(second, "cancelled")
    assert_accessible_but_contrast(nb.page, "a cancelled StreamWidget (two views)")

    # Run to max_new_tokens: said so, once; re-renders (Raw text, a toggle) say nothing.
    forget(nb)
    button(v, "Run").click()
    wait_status(v, "complete")
    assert kval(nb, "w.metrics['finish_reason']") == "length"
    button(v, "Raw text").click()
    button(v, "Raw text").click()
    assert_one_end(wait_said(nb, 1, 1, 2), "Stopped at max_new_tokens, 12 tokens")
    assert_accessible_but_contrast(nb.page, "a StreamWidget stopped at max_new_tokens")

    # Failed.
    forget(nb)
    assert kval(nb, "boom.set() or True")
    button(v, "Run").click()
    wait_status(v, "failed")
    assert_one_end(wait_said(nb, 1, 1, 2), "Failed: injected failure")
    assert_accessible_but_contrast(nb.page, "a failed StreamWidget")

    # Complete on its own (end of sequence).
    d = stream(nb, 3)
    forget(nb)
    d.get_by_role("textbox", name="Prompt", exact=True).fill("Hi")
    button(d, "Run").click()
    wait_status(d, "complete")
    n = kval(nb, "done.metrics['tokens']")
    assert_one_end(wait_said(nb, 1, 3), f"Answer complete, {n} tokens")
    assert_accessible_but_contrast(nb.page, "a complete StreamWidget")


def test_token_views_with_a_popover_open_and_the_settings_panel_with_an_error(nb):
    v = stream(nb, 3)
    for name in ("Tokens", "Probabilities", "Alternatives"):
        button(v, name).click()
        expect(button(v, name)).to_have_attribute("aria-pressed", "true")
    tokens = v.locator(".nbstream-tokens .nbstream-token")
    expect(tokens.first).to_be_visible()
    tokens.nth(1).click()
    expect(v.locator(".nbstream-alternatives")).to_be_visible()
    assert_accessible_but_contrast(nb.page, "the token views, a popover open")
    assert_accessible_but_contrast(nb.page, "the popover", ".nbstream-alternatives:not([hidden])")

    button(v, "Settings").click()
    field = v.get_by_role("textbox", name="Temperature", exact=True)
    field.fill("hot")
    expect(field).to_have_attribute("aria-invalid", "true")
    assert_accessible_but_contrast(nb.page, "the settings panel with an invalid field")
    field.fill("")
    button(v, "Settings").click()
    for name in ("Tokens", "Probabilities", "Alternatives"):
        button(v, name).click()


def test_chat_turns_editing_clear_question_and_a_stopped_answer(nb):
    c = nb.cell(4).locator(".nbstream-chat").first
    box = c.get_by_role("textbox", name="Message", exact=True)
    for n, text in enumerate(("Hello", "And then?"), 1):
        forget(nb)
        box.fill(text)
        button(c, "Send").click()
        expect(c.locator(".nbstream-message")).to_have_count(2 * n)
        # The new answer's own status (the chat's still says the last turn's "complete"
        # until this run's first state reaches the page), after the kernel's.
        wait_until(
            lambda n=n: kval(nb, "(chat.run_id, chat.status)") == (n, "complete"),
            STREAM_TIMEOUT,
            what=f"answer {n} complete in the kernel",
        )
        wait_status(c.locator(".nbstream-message[data-role='assistant']").nth(n - 1), "complete")
        wait_status(c, "complete")
        assert_one_end(wait_said(nb, 1, 4), "Stopped at max_new_tokens, 6 tokens")
    assert_accessible_but_contrast(nb.page, "a ChatWidget with two turns")

    button(c, "Edit").click()
    expect(button(c, "Resend")).to_be_visible()
    assert_accessible_but_contrast(nb.page, "a ChatWidget editing its last message")
    button(c, "Cancel edit").click()

    button(c, "Clear chat").click()
    expect(button(c, "Keep it")).to_be_focused()
    assert_accessible_but_contrast(nb.page, "a ChatWidget asking whether to clear")
    button(c, "Keep it").click()

    # A stopped answer: one announcement, the answer's log busy while it ran.
    forget(nb)
    assert kval(nb, "hold(3)")
    box.fill("Tell me more")
    button(c, "Send").click()
    held(nb)
    answer = c.locator(".nbstream-message[data-role='assistant'] .nbstream-output").last
    expect(answer).to_have_attribute("aria-busy", "true")
    button(c, "Stop").click()
    wait_until(lambda: kval(nb, "chat.run._control.cancel_event.is_set()"), 30, what="Stop")
    assert kval(nb, "release()")
    wait_status(c, "cancelled")
    expect(answer).to_have_attribute("aria-busy", "false")
    tokens = kval(nb, "chat.metrics['tokens']")
    assert wait_said(nb, 2, 4) == ["Running", f"Stopped after {tokens} tokens"]
    assert_accessible_but_contrast(nb.page, "a ChatWidget with a stopped answer")


def test_compare_running_and_ended_says_so_once(nb):
    header = nb.cell(5).locator(".nbstream-compare")
    columns = nb.cell(5).locator(".nbstream-column .nbstream")
    forget(nb)
    assert kval(nb, "hold(3)")
    button(header, "Run all").click()
    held(nb)
    expect(header).to_have_attribute("data-status", "running")
    assert_accessible_but_contrast(
        nb.page, "a CompareWidget running", ".nbstream, .nbstream-compare"
    )
    assert kval(nb, "release()")
    for i in range(2):
        wait_status(columns.nth(i), "complete")
    expect(header).to_have_attribute("data-status", "done")
    assert wait_said(nb, 2, 5) == ["Running 2 columns", "All 2 columns complete"]
    assert said(nb, 5, header=True) == ["Running 2 columns", "All 2 columns complete"]
    assert said(nb, 5, header=False) == []  # the columns a Run all started stay quiet
    assert_accessible_but_contrast(nb.page, "a CompareWidget ended", ".nbstream, .nbstream-compare")
