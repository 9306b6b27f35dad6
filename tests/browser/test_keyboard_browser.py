"""Every widget driven by the keyboard alone in a real JupyterLab: Tab,
Shift+Tab, Enter, Space, the arrows and Esc, no click. Each element the focus lands on in a
widget must show it (a computed outline or box shadow: the :focus-visible rules of
stream.css / compare.css / tokens.css).

One notebook for the module: a StreamWidget (cell 1), a ChatWidget (cell 2) and a
CompareWidget of two columns (cell 3) on one tiny model, held at a decode step by a `Gate`
(browser_helpers.SETUP) where a run must be seen running. The kernel is read through
`nb.kernel_eval` (a subshell: it answers while a run streams). The first focus is put in a
prompt box (where a user's first Tab or click would put it); everything after is keys.
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
CHAT = "chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens=6)\nchat"
COMPARE = """\
cw = nbstream.CompareWidget(model, tokenizer, "", settings=[{"temperature": 0},
                            {"temperature": 0.7}], max_new_tokens=6, seed=1)
cw"""
CELLS = [SETUP, MODELS, CHAT, COMPARE]
STOP_ALL = "button[aria-label='Stop all']"

# The focused element: in a widget or not, what it is, and whether its focus shows.
_FOCUS = """() => {
  const e = document.activeElement;
  if (!e || e === document.body) return {inWidget: false, what: 'body'};
  const st = getComputedStyle(e);
  return {
    inWidget: !!e.closest('.nbstream, .nbstream-compare'),
    what: e.tagName + ' ' + (e.getAttribute('aria-label') || e.className || ''),
    shows: (st.outlineStyle !== 'none' && parseFloat(st.outlineWidth) > 0)
      || st.boxShadow !== 'none',
  };
}"""


@pytest.fixture(scope="module")
def nb(lab_server, browser) -> Iterator:
    harness = Jupyter(lab_server, browser)
    try:
        notebook = harness.open_notebook(CELLS, name="keyboard.ipynb")
        for i in range(len(CELLS)):
            notebook.run_cell(i)
        yield notebook
    finally:
        harness.close()


def focus_shows(nb) -> dict:
    """The focused element, which must be in a widget and show its focus."""
    f = nb.page.evaluate(_FOCUS)
    assert f["inWidget"], f"the focus left the widget: {f['what']}"
    assert f["shows"], f"the focus does not show on {f['what']}"
    return f


def key(nb, name: str) -> None:
    nb.page.keyboard.press(name)


def tab_to(nb, selector: str, back: bool = False, limit: int = 40) -> None:
    """Tab (Shift+Tab if `back`) until the focus is on `selector`; each stop on the way must
    be in the widget and show the focus."""
    for _ in range(limit):
        key(nb, "Shift+Tab" if back else "Tab")
        focus_shows(nb)
        if nb.page.evaluate("(s) => document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"Tab never reached {selector}")


def is_focused(nb, selector: str) -> bool:
    return nb.page.evaluate("(s) => !!document.activeElement?.matches(s)", selector)


def held(nb) -> None:
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="the run held")


def wait_status(v, status: str) -> None:
    expect(v).to_have_attribute("data-status", status, timeout=STREAM_TIMEOUT * MS)


def test_stream_widget_by_keyboard(nb):
    v = nb.cell(1).locator(".nbstream").first
    v.get_by_role("textbox", name="Prompt", exact=True).focus()
    nb.page.keyboard.type("Hello")
    focus_shows(nb)

    # Run with Enter; the focus moves to Stop.
    assert kval(nb, "hold(4)")
    tab_to(nb, "button[aria-label='Run']")
    key(nb, "Enter")
    held(nb)
    wait_status(v, "running")
    assert is_focused(nb, "button[aria-label='Stop']")
    focus_shows(nb)

    # The settings panel open: Esc closes it, and the run goes on.
    tab_to(nb, "button[aria-label='Settings']")
    key(nb, "Enter")
    expect(v.get_by_role("button", name="Settings", exact=True)).to_have_attribute(
        "aria-expanded", "true"
    )
    tab_to(nb, ".nbstream-settings input")
    key(nb, "Escape")
    expect(v.locator(".nbstream-settings")).to_be_hidden()
    assert is_focused(nb, "button[aria-label='Settings']")
    assert kval(nb, "w.run._control.cancel_event.is_set()") is False
    # The next Esc, focus anywhere in the view (here the prompt box), stops the run.
    tab_to(nb, "textarea", back=True)
    key(nb, "Escape")
    wait_until(lambda: kval(nb, "w.run._control.cancel_event.is_set()"), 30, what="Esc stopped")
    assert kval(nb, "release()")
    wait_status(v, "cancelled")
    assert kval(nb, "w.status") == "cancelled"

    # A setting changed from the keyboard reaches the kernel.
    tab_to(nb, "button[aria-label='Settings']")
    key(nb, "Space")
    tab_to(nb, "input[data-field='max_new_tokens']")
    nb.page.keyboard.type("10")
    key(nb, "Tab")
    wait_until(lambda: kval(nb, "w.max_new_tokens") == 10, 30, what="max_new_tokens = 10")
    tab_to(nb, "button[aria-label='Settings']", back=True)
    key(nb, "Enter")
    expect(v.locator(".nbstream-settings")).to_be_hidden()

    # A run to its end, then its tokens' alternatives, one token after another by arrows.
    tab_to(nb, "button[aria-label='Run']", back=True)
    key(nb, "Enter")
    wait_status(v, "complete")
    assert kval(nb, "len(w.run.token_ids)") == 10
    tab_to(nb, "button[aria-label='Tokens']")
    key(nb, "Space")
    tab_to(nb, "button[aria-label='Alternatives']")
    key(nb, "Enter")
    expect(v.get_by_role("button", name="Alternatives", exact=True)).to_have_attribute(
        "aria-pressed", "true"
    )
    # The tokens arrive from the kernel once the view asks: one of them takes the focus.
    expect(v.locator(".nbstream-token[tabindex='0']")).to_have_count(1)
    tab_to(nb, ".nbstream-token")
    pop = v.locator(".nbstream-alternatives")
    expect(pop).to_be_visible()
    expect(pop).to_have_attribute("aria-label", "Alternatives at step 1")
    key(nb, "ArrowRight")
    focus_shows(nb)
    expect(pop).to_have_attribute("aria-label", "Alternatives at step 2")
    expect(v.locator(".nbstream-token").nth(1)).to_be_focused()
    key(nb, "Escape")
    expect(pop).to_be_hidden()
    expect(v.locator(".nbstream-token").nth(1)).to_be_focused()
    assert kval(nb, "w.status") == "complete"  # that Esc closed the popover, nothing more
    for name in ("Alternatives", "Tokens"):  # back along the bar: off again
        tab_to(nb, f"button[aria-label='{name}']", back=True)
        key(nb, "Enter")


def test_chat_by_keyboard(nb):
    c = nb.cell(2).locator(".nbstream-chat").first
    c.get_by_role("textbox", name="Message", exact=True).focus()
    nb.page.keyboard.type("Hello")
    tab_to(nb, "button[aria-label='Send']")
    key(nb, "Enter")
    expect(c.locator(".nbstream-message")).to_have_count(2)
    wait_status(c, "complete")
    first = kval(nb, "chat.run_id")

    tab_to(nb, "button[data-action='regenerate']", back=True)
    key(nb, "Enter")
    # The regenerated answer's end in the kernel first: the page's "complete" may still be
    # the first answer's until the new run's first state reaches it.
    wait_until(
        lambda: kval(nb, f"(chat.run_id > {first}, chat.status)") == (True, "complete"),
        STREAM_TIMEOUT,
        what="regenerated and complete",
    )
    wait_status(c, "complete")
    expect(c.locator(".nbstream-message")).to_have_count(2)

    # Clear chat asks; Esc keeps the conversation; Yes, clear clears it.
    tab_to(nb, "button[aria-label='Clear chat']", back=True)
    key(nb, "Enter")
    assert is_focused(nb, "button[aria-label='Keep it']")
    focus_shows(nb)
    key(nb, "Escape")
    expect(c.locator(".nbstream-clear-confirm")).to_have_count(0)
    assert is_focused(nb, "button[aria-label='Clear chat']")
    key(nb, "Enter")
    tab_to(nb, "button[aria-label='Yes, clear']", back=True)
    key(nb, "Enter")
    expect(c.locator(".nbstream-message")).to_have_count(0)
    assert kval(nb, "chat.history") == []
    assert is_focused(nb, "textarea")
    focus_shows(nb)

    # Shift+Enter sends; Esc in the message box stops the answer.
    assert kval(nb, "hold(3)")
    nb.page.keyboard.type("Tell me more")
    key(nb, "Shift+Enter")
    held(nb)
    wait_status(c, "running")  # the page knows: its Stop is live
    key(nb, "Escape")
    wait_until(lambda: kval(nb, "chat.run._control.cancel_event.is_set()"), 30, what="Esc")
    assert kval(nb, "release()")
    wait_status(c, "cancelled")
    assert kval(nb, "chat.status") == "cancelled"


def test_compare_by_keyboard(nb):
    header = nb.cell(3).locator(".nbstream-compare")
    header.get_by_role("textbox", name="Shared prompt", exact=True).focus()
    nb.page.keyboard.type("Hello")
    # Run all, then Stop all with Enter (the focus moves from one to the other).
    assert kval(nb, "hold(3)")
    tab_to(nb, "button[aria-label='Run all']")
    key(nb, "Enter")
    held(nb)
    wait_until(lambda: is_focused(nb, "button[aria-label='Stop all']"), 30, what="on Stop all")
    focus_shows(nb)
    key(nb, "Enter")
    wait_until(lambda: kval(nb, "cw.columns[0].run._control.cancel_event.is_set()"), 30)
    assert kval(nb, "release()")
    expect(header).to_have_attribute("data-status", "done", timeout=STREAM_TIMEOUT * MS)
    assert kval(nb, "cw.statuses")[0] == "cancelled"
    assert is_focused(nb, "button[aria-label='Run all']")

    # Run all again, and Esc in the header stops all: on a button (where JupyterLab's own
    # shortcuts would see the key), then in the prompt box.
    for where in (STOP_ALL, "textarea"):
        assert kval(nb, "hold(3)")
        key(nb, "Enter")
        held(nb)
        wait_until(lambda: is_focused(nb, STOP_ALL), 30, what="on Stop all")
        if where == "textarea":
            tab_to(nb, where, back=True)
        key(nb, "Escape")
        wait_until(lambda: kval(nb, "cw.columns[0].run._control.cancel_event.is_set()"), 30)
        assert kval(nb, "release()")
        expect(header).to_have_attribute("data-status", "done", timeout=STREAM_TIMEOUT * MS)
        assert kval(nb, "cw.statuses")[0] == "cancelled"
        if where != "textarea":  # Stop all handed the focus back to Run all
            assert is_focused(nb, "button[aria-label='Run all']")


def test_notebook7_stream_widget_by_keyboard_and_announced(notebook7):
    """Notebook 7 has its own page and shortcuts: Run by Enter, Esc on the Stop button stops
    the run, the end is said once, and axe finds nothing (colour contrast aside: the
    theme tests')."""
    nb = notebook7.open_notebook([SETUP, MODELS], name="keyboard7.ipynb")
    nb.run_cell(0)
    nb.run_cell(1)
    v = nb.cell(1).locator(".nbstream").first
    v.get_by_role("textbox", name="Prompt", exact=True).focus()
    nb.page.keyboard.type("Hello")
    assert kval(nb, "hold(4)")
    tab_to(nb, "button[aria-label='Run']")
    key(nb, "Enter")
    held(nb)
    wait_status(v, "running")
    assert is_focused(nb, "button[aria-label='Stop']")
    expect(v.locator(".nbstream-output")).to_have_attribute("aria-busy", "true")
    key(nb, "Escape")
    wait_until(lambda: kval(nb, "w.run._control.cancel_event.is_set()"), 30, what="Esc stopped")
    assert kval(nb, "release()")
    wait_status(v, "cancelled")
    tokens = kval(nb, "w.metrics['tokens']")
    expect(v.locator(".nbstream-announcer")).to_have_text(f"Stopped after {tokens} tokens")
    expect(v.locator(".nbstream-output")).to_have_attribute("aria-busy", "false")
    assert_accessible_but_contrast(nb.page, "a cancelled StreamWidget in Notebook 7")
