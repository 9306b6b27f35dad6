"""Front-end tests of branching (js/src/branches.js) in the StreamWidget view, with the fake
model of harness.html: the popover's Continue buttons and what they send, the reason said
when the kernel offers no branch (``branch_unavailable``), and the switcher drawn from
``_branches`` / ``branch_shown``. The tests play the kernel; the kernel's side is
tests/test_branch_widget.py, both together tests/browser/test_branch_browser.py.
"""

from __future__ import annotations

from frontend_helpers import (
    BRANCH,
    TOKENS,
    change,
    emit,
    mount,
    popover,
    sent,
    spans,
    tokens_msg,
    view,
)
from playwright.sync_api import Page, expect


def ended(page: Page, **state):
    mount(page, status="complete", run_id=1, show_alternatives=True, **state)
    root = view(page)
    emit(page, tokens_msg(1, 0, TOKENS))
    expect(spans(root)).to_have_count(len(TOKENS))
    return root


def test_continue_on_each_alternative_but_the_chosen_sends_branch(fe_page: Page) -> None:
    page = fe_page
    root = ended(page, branch_unavailable="")
    spans(root).nth(2).click()  # chose " a" (rank 2); " the", " an", "\n" are the others
    pop = popover(root)
    buttons = pop.locator(".nbstream-branch-continue")
    expect(buttons).to_have_count(3)
    names = buttons.evaluate_all("(b) => b.map((e) => e.getAttribute('aria-label'))")
    assert names == ["Continue with ' the'", "Continue with ' an'", "Continue with '\\n'"]
    expect(pop.locator('tr[data-token-id="253"] button')).to_have_count(0)
    pop.get_by_role("button", name="Continue with ' the'", exact=True).click()
    asked = [m for m in sent(page) if m["type"] == "branch"]
    assert asked == [{"type": "branch", "run_id": 1, "step": 2, "token": 262}]


def test_no_continue_while_the_kernel_says_why_not(fe_page: Page) -> None:
    page = fe_page
    why = "The answer is still being generated: wait for it to end (or stop it)."
    root = ended(page, branch_unavailable=why)
    spans(root).nth(2).click()
    pop = popover(root)
    expect(pop.locator(".nbstream-branch-continue")).to_have_count(0)
    expect(pop.locator(".nbstream-branch-unavailable")).to_have_text(
        f"Continue with another token is not offered: {why}"
    )
    assert [m for m in sent(page) if m["type"] == "branch"] == []


def test_the_switcher_marks_the_answer_shown_and_asks_for_another(fe_page: Page) -> None:
    page = fe_page
    root = ended(page, branch_unavailable="")
    group = root.get_by_role("group", name="Answers of this prompt")
    expect(group).to_be_hidden()
    change(page, "_branches", [BRANCH, {**BRANCH, "step": 3, "parent": 1, "text": " day"}])
    change(page, "branch_shown", 2)
    expect(group).to_be_visible()
    buttons = group.get_by_role("button")
    expect(buttons).to_have_count(3)
    expect(buttons.nth(0)).to_have_text("Original")
    expect(buttons.nth(1)).to_have_text("Branch 1 at token 3: ' a' \u2192 ' the'")
    expect(buttons.nth(2)).to_contain_text("(from branch 1)")
    pressed = buttons.evaluate_all("(b) => b.map((e) => e.getAttribute('aria-pressed'))")
    assert pressed == ["false", "false", "true"]
    buttons.nth(0).click()
    assert [m for m in sent(page) if m["type"] == "show_branch"] == [
        {"type": "show_branch", "index": 0}
    ]
    # The kernel decides: nothing changes until it says the original is shown.
    expect(buttons.nth(2)).to_have_attribute("aria-pressed", "true")
    change(page, "branch_shown", 0)
    expect(buttons.nth(0)).to_have_attribute("aria-pressed", "true")
    expect(buttons.nth(0)).to_be_focused()
    # While a run goes on, switching waits.
    change(page, "status", "running")
    expect(buttons.nth(1)).to_be_disabled()


def test_the_new_branch_takes_the_focus_even_when_it_went_back_to_a_token(fe_page: Page) -> None:
    """Continue, then the popover closes and hands the focus back to its token before the
    kernel shows the branch (the order depends on how the kernel's messages fall): the
    focus is still the view's to move, so the new branch's button takes it."""
    page = fe_page
    root = ended(page, branch_unavailable="")
    spans(root).nth(2).click()
    pop = popover(root)
    pop.locator(".nbstream-branch-continue").first.click()
    assert [m["type"] for m in sent(page) if m["type"] == "branch"] == ["branch"]
    spans(root).nth(2).focus()  # the popover gave the focus back to its token
    # The kernel's launch: the branch shown (running) while the widget's status still says
    # the parent's "complete", then the status; at the end both say complete.
    change(page, "_branches", [{**BRANCH, "status": "running"}])
    change(page, "branch_shown", 1)
    change(page, "status", "running")
    change(page, "status", "complete")
    change(page, "_branches", [BRANCH])
    button = root.get_by_role("group", name="Answers of this prompt").get_by_role(
        "button", name="Branch 1", exact=False
    )
    expect(button).to_be_focused()


def test_a_refused_switch_does_not_pull_the_focus_later(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="complete", run_id=1, show_alternatives=True, branch_unavailable="")
    root = view(page)
    branch = dict(BRANCH)
    change(page, "_branches", [branch])
    change(page, "branch_shown", 1)
    buttons = root.get_by_role("group", name="Answers of this prompt").get_by_role("button")
    buttons.nth(0).click()  # asks for the original
    change(page, "input_error", "This answer is no longer the one shown.")  # the kernel refuses
    page.evaluate("() => document.activeElement.blur()")
    # Later, code (or another view) shows the original: the focus stays where it was.
    change(page, "input_error", "")
    change(page, "branch_shown", 0)
    expect(buttons.nth(0)).to_have_attribute("aria-pressed", "true")
    assert page.evaluate("document.activeElement === document.body")
