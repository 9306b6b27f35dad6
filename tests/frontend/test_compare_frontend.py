"""Front-end tests of the CompareWidget header (nbstream/static/compare.js) against a fake
model: the shared prompt kept in step both ways, Run all / Stop all, and a cleanup that
leaves nothing running. The columns are StreamWidget views (test_widget_frontend.py); the
header in JupyterLab is covered by tests/browser/test_compare_browser.py. The page is
conftest.py's `compare_page` (harness.html?bundle=compare).
"""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Page, expect

STATE = {"prompt": "", "same_seed": False, "statuses": ["idle", "idle"], "summary": ""}


def mount(page: Page, **state: Any) -> None:
    page.evaluate("([s]) => window.mount(s, null)", [{**STATE, **state}])


def change(page: Page, **values: Any) -> None:
    page.evaluate("([v]) => window.views[0].model.changeMany(v)", [values])


def sent(page: Page) -> list[dict]:
    """What the view sent, but its first ``sync`` (the fake kernel answers it)."""
    return [m for m in page.evaluate("window.views[0].model.sent") if m["type"] != "sync"]


def prompt_sets(page: Page) -> list[str]:
    log = page.evaluate("window.views[0].model.log")
    return [entry[2] for entry in log if entry[0] == "set" and entry[1] == "prompt"]


def test_prompt_both_ways_run_all_and_stop_all(compare_page: Page) -> None:
    page = compare_page
    mount(page, prompt="from Python")
    box = page.get_by_role("textbox", name="Shared prompt")
    expect(box).to_have_value("from Python")
    expect(box).to_have_attribute("data-lm-suppress-shortcuts", "true")
    # Typing is saved once the user pauses; the kernel's value does not overwrite it meanwhile.
    box.fill("")
    box.press_sequentially("Hello")
    change(page, prompt="kernel meanwhile")
    expect(box).to_have_value("Hello")
    page.wait_for_timeout(600)  # past the debounce
    assert prompt_sets(page)[-1] == "Hello"
    change(page, prompt="kernel later")
    expect(box).to_have_value("kernel later")

    # Shift+Enter is Run all: the prompt travels with the click.
    box.fill("Compare this")
    box.press("Shift+Enter")
    assert sent(page) == [{"type": "run", "prompt": "Compare this", "same_seed": False}]
    assert prompt_sets(page)[-1] == "Compare this"
    run_all = page.get_by_role("button", name="Run all")
    stop_all = page.get_by_role("button", name="Stop all")
    expect(stop_all).to_be_disabled()
    change(page, statuses=["running", "queued"], summary="1 running, 1 queued")
    expect(run_all).to_be_disabled()
    expect(page.locator(".nbstream-compare-summary")).to_have_text("1 running, 1 queued")
    stop_all.click()
    assert sent(page)[-1] == {"type": "stop"}


def test_cleanup_removes_everything(compare_page: Page) -> None:
    page = compare_page
    mount(page)
    assert page.evaluate("window.views[0].model.listenerCount()") > 0
    box = page.get_by_role("textbox", name="Shared prompt")
    box.press_sequentially("typing")  # a debounced save is pending
    page.evaluate("window.views[0].cleanup()")
    assert page.evaluate("window.views[0].model.listenerCount()") == 0
    n_log = len(page.evaluate("window.views[0].model.log"))
    page.wait_for_timeout(600)  # longer than the debounce: the pending save never comes
    change(page, prompt="after", statuses=["running", "idle"])
    expect(box).to_have_value("typing")
    page.get_by_role("button", name="Run all").click()
    box.press("Shift+Enter")
    assert sent(page) == []
    assert len(page.evaluate("window.views[0].model.log")) == n_log


def test_with_no_kernel_the_header_turns_its_controls_off_until_one_answers(
    compare_page: Page,
) -> None:
    page = compare_page
    page.evaluate("window.noKernel = true")
    mount(page, prompt="saved prompt", voting=True, labels=["A", "B"], can_vote=True)
    assert page.evaluate("window.views[0].model.sent") == [{"type": "sync"}]
    run_all = page.get_by_role("button", name="Run all")
    vote_a = page.get_by_role("button", name="Vote for A (0 votes)")
    # A saved notebook: nothing answers the sync, and every control that asks the kernel
    # for something turns off, saying why.
    expect(run_all).to_be_disabled(timeout=10_000)
    for control in (run_all, vote_a, page.get_by_role("checkbox", name="Blind")):
        expect(control).to_be_disabled()
        expect(control).to_have_attribute("title", re.compile("No running kernel"))
    box = page.get_by_role("textbox", name="Shared prompt")
    expect(box).to_have_js_property("readOnly", True)
    box.press("Shift+Enter")
    assert page.evaluate("window.views[0].model.sent") == [{"type": "sync"}]
    # A kernel that was only busy answers later: the controls are back, as they were.
    page.evaluate("window.views[0].model.msg({type: 'synced'})")
    expect(run_all).to_be_enabled()
    expect(run_all).to_have_attribute("title", re.compile("Run every column"))
    expect(vote_a).to_be_enabled()
    expect(page.get_by_role("checkbox", name="Blind")).to_be_enabled()
    expect(box).to_have_js_property("readOnly", False)


def test_a_busy_kernel_s_column_states_keep_the_header_live(compare_page: Page) -> None:
    page = compare_page
    page.evaluate("window.noKernel = true")  # the sync waits behind a busy cell
    mount(page)
    run_all = page.get_by_role("button", name="Run all")
    expect(run_all).to_be_disabled(timeout=10_000)
    # The columns start: only a kernel sends their states, so the header is live again, and
    # Stop all is there for the running column.
    change(page, statuses=["running", "queued"], summary="1 running, 1 queued")
    stop_all = page.get_by_role("button", name="Stop all")
    expect(stop_all).to_be_enabled()
    expect(stop_all).not_to_have_attribute("title", re.compile("No running kernel"))
    expect(page.get_by_role("checkbox", name="Same seed")).to_be_enabled()
    change(page, statuses=["complete", "complete"], summary="2 complete")
    expect(run_all).to_be_enabled()


def test_a_tie_button_beside_the_letters_votes_for_neither_by_keyboard(compare_page: Page) -> None:
    page = compare_page
    mount(
        page,
        voting=True,
        blind=True,
        labels=["A", "B"],
        votes={"A": 1, "B": 0, "tie": 2},
        statuses=["complete", "complete"],
        can_vote=True,
    )
    group = page.get_by_role("group", name="Vote for the better answer")
    tie = group.get_by_role("button", name="Vote a tie (2 votes)")
    expect(tie).to_have_text("Tie · 2")
    expect(tie).to_be_enabled()
    names = group.get_by_role("button").all_inner_texts()
    assert names[:3] == ["A · 1", "B · 0", "Tie · 2"]  # after the letters, before Reveal
    # Keyboard: Tab from B's button reaches Tie; Enter votes.
    group.get_by_role("button", name="Vote for B (0 votes)").focus()
    page.keyboard.press("Tab")
    expect(tie).to_be_focused()
    page.keyboard.press("Enter")
    assert sent(page)[-1] == {"type": "vote", "label": "tie"}
    # Closed as a letter is: after Reveal (or before every answer ended).
    change(page, can_vote=False, revealed={"A": "m1", "B": "m2"})
    expect(tie).to_be_disabled()
    expect(tie).to_have_attribute("title", re.compile("Votes open once every answer has ended"))
