"""Branching in a real JupyterLab driven by Chromium: the alternatives popover's
"Continue" by mouse and by keyboard alone, the branch streaming into the view, the switcher
(the original and back), a chat's branch and its history, and an endpoint view saying why it
offers none. What the page shows is checked against the kernel (``nb.kernel_eval``). The
tiny model where the numbers do not matter; the kernel side alone is
tests/test_branch_widget.py.

test_the_readme_picture_of_branching takes the README's picture (the default model, the
popover's Continue and the switcher) into test-artifacts/branching.png; with
NBSTREAM_UPDATE_SCREENSHOT=1 it also writes docs/branching.png (left alone otherwise, so a
test run does not dirty the repo), as test_widget_browser.py does for docs/screenshot.png.
"""

from __future__ import annotations

import os
import shutil

import pytest
from axe_audit import assert_accessible
from browser_helpers import MS, REPO, SETUP, branch_ended, kval, view, wait_status, wait_until
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

ARTIFACTS = REPO / "test-artifacts"
SHOT = ARTIFACTS / "branching.png"
README_SHOT = REPO / "docs" / "branching.png"

TINY = (
    "model, tokenizer = tiny_model(one_line=True)\n"
    "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=10, alternatives=5,\n"
    "                          show_alternatives=True)\n"
    "w"
)
# Each alternative of a step as the views get it: (id, text, kind), from the kernel's code.
ALTS = (
    "[(a.id, *nbstream._tokens.TokenPieces(tokenizer)(a.id)) "
    "for a in {run}.trace[{step}].alternatives]"
)


def quote(text: str) -> str:
    """A token as the popover names it (js/src/branches.js, quote)."""
    for a, b in (("\\", "\\\\"), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t")):
        text = text.replace(a, b)
    return f"'{text}'"


def spans(v):
    return v.locator(".nbstream-tokens .nbstream-token")


def shown_ids(v) -> list[int]:
    return [int(x) for x in spans(v).evaluate_all("(s) => s.map((e) => e.dataset.tokenId)")]


def other_alternative(nb, run: str, step: int) -> tuple[int, str]:
    """An alternative at ``step`` that the run did not take, and its button's name."""
    chosen = kval(nb, f"{run}.token_ids[{step}]")
    for token_id, text, kind in kval(nb, ALTS.format(run=run, step=step)):
        if token_id != chosen:
            return token_id, f"Continue with {f'bytes {text}' if kind == 'bytes' else quote(text)}"
    raise AssertionError("no alternative other than the chosen token")


def test_continue_by_mouse_and_keyboard_and_switch_between_the_answers(lab):
    nb = lab.open_notebook([SETUP, TINY, 'w.generate("Hello"); w.wait()'])
    nb.run_cell(0)
    nb.run_cell(1)
    nb.run_cell(2)
    v = view(nb, 1)
    wait_status(v, "complete")
    original = kval(nb, "w.run.token_ids")
    wait_until(lambda: shown_ids(v) == original, 15, what="the answer's tokens shown")
    switcher = v.get_by_role("group", name="Answers of this prompt")
    expect(switcher).to_be_hidden()  # no branches yet

    # Mouse: the third token's popover, Continue with another of its alternatives.
    spans(v).nth(2).click()
    pop = v.get_by_role("dialog", name="Alternatives at step 3")
    expect(pop).to_be_visible()
    alt_id, name = other_alternative(nb, "w.run", 2)
    button = pop.get_by_role("button", name=name, exact=True)
    expect(button).to_be_visible()
    expect(pop.locator(f'tr[data-token-id="{original[2]}"] button')).to_have_count(0)  # chosen
    button.click()
    wait_until(lambda: kval(nb, "len(w.branches)") == 1, 30, what="a branch made")
    branch_ended(nb, v)
    branch = kval(nb, "w.branches[0].token_ids")
    assert branch[:3] == [*original[:2], alt_id]
    wait_until(lambda: shown_ids(v) == branch, 15, what="the branch's tokens shown")
    expect(switcher).to_be_visible()
    first = switcher.get_by_role("button", name="Branch 1", exact=False)
    expect(first).to_have_attribute("aria-pressed", "true")
    expect(first).to_contain_text("at token 3:")
    expect(first).to_be_focused()  # the focus follows the new branch, not the page body

    # Switch to the original and back: the view shows each answer's tokens and text.
    switcher.get_by_role("button", name="Original", exact=True).click()
    wait_until(lambda: kval(nb, "w.shown") == 0, 30, what="the original shown")
    wait_until(lambda: shown_ids(v) == original, 15, what="the original's tokens again")
    back = switcher.get_by_role("button", name="Original", exact=True)
    expect(back).to_have_attribute("aria-pressed", "true")
    expect(first).to_have_attribute("aria-pressed", "false")
    assert kval(nb, "w.result == w.branches[0].branch_info['parent'].result")
    first.click()
    wait_until(lambda: kval(nb, "w.shown") == 1, 30, what="the branch shown again")
    wait_until(lambda: shown_ids(v) == branch, 15, what="the branch's tokens again")

    # Keyboard alone: from the switcher, Tab to the answer's tokens, arrows to the fifth,
    # Tab into its popover, Enter on Continue: a branch of the branch.
    first.focus()
    v.page.keyboard.press("Tab")  # the output
    v.page.keyboard.press("Tab")  # its token (roving tab stop)
    expect(spans(v).first).to_be_focused()
    for _ in range(4):
        v.page.keyboard.press("ArrowRight")
    expect(spans(v).nth(4)).to_be_focused()
    pop = v.get_by_role("dialog", name="Alternatives at step 5")
    expect(pop).to_be_visible()
    alt_id, name = other_alternative(nb, "w.run", 4)
    v.page.keyboard.press("Tab")
    target = pop.get_by_role("button", name=name, exact=True)
    while not target.evaluate("(b) => b === document.activeElement"):
        assert pop.evaluate("(p) => p.contains(document.activeElement)"), "left the popover"
        v.page.keyboard.press("Tab")
    expect(target).to_be_focused()  # visibly: the focus ring of :focus-visible
    ring = target.evaluate("(b) => getComputedStyle(b).outlineStyle")
    assert ring not in ("", "none"), ring
    v.page.keyboard.press("Enter")
    wait_until(lambda: kval(nb, "len(w.branches)") == 2, 30, what="a second branch made")
    branch_ended(nb, v)
    second = kval(nb, "w.branches[1].token_ids")
    assert second[:5] == [*branch[:4], alt_id]
    assert kval(nb, "w.branches[1].branch_info['parent'] is w.branches[0]")
    two = switcher.get_by_role("button", name="Branch 2", exact=False)
    expect(two).to_contain_text("(from branch 1)")
    expect(two).to_be_focused()
    # Back to the original by keyboard: Shift+Tab along the switcher, Enter.
    v.page.keyboard.press("Shift+Tab")
    v.page.keyboard.press("Shift+Tab")
    original_button = switcher.get_by_role("button", name="Original", exact=True)
    expect(original_button).to_be_focused()
    v.page.keyboard.press("Enter")
    expect(original_button).to_have_attribute("aria-pressed", "true", timeout=30 * MS)
    wait_until(lambda: shown_ids(v) == original, 15, what="the original's tokens again")
    assert nb.console_errors() == []


CHAT = (
    "chat = nbstream.ChatWidget(*tiny_model(one_line=True), max_new_tokens=8, alternatives=5,\n"
    "                           show_alternatives=True)\n"
    "chat"
)
ENDPOINT = (
    'e = nbstream.StreamWidget(nbstream.Endpoint("http://127.0.0.1:9/v1", "some-model"),\n'
    "                          show_alternatives=True)\n"
    "e"
)


def test_a_chat_branch_and_its_history_and_an_endpoint_says_why_not(lab):
    nb = lab.open_notebook(
        [SETUP, CHAT, 'chat.generate("Hi"); chat.wait()', ENDPOINT, "tokenizer = chat._tokenizer"]
    )
    for i in range(5):
        nb.run_cell(i)
    v = nb.cell(1).locator(".nbstream-chat")
    wait_status(v, "complete")
    answer = v.locator('.nbstream-message[data-role="assistant"]').last
    original = kval(nb, "chat.run.token_ids")
    wait_until(lambda: shown_ids(answer) == original, 15, what="the answer's tokens shown")
    spans(answer).nth(1).click()
    pop = answer.get_by_role("dialog", name="Alternatives at step 2")
    alt_id, name = other_alternative(nb, "chat.run", 1)
    pop.get_by_role("button", name=name, exact=True).click()
    wait_until(lambda: kval(nb, "len(chat.branches)") == 1, 30, what="a chat branch made")
    branch_ended(nb, v, widget="chat")
    branch = kval(nb, "chat.branches[0].token_ids")
    assert branch[:2] == [original[0], alt_id]
    assert kval(nb, "chat.history[-1]['content'] == chat.branches[0].result")
    assert kval(nb, "len(chat.history)") == 2  # one turn: the branch replaced the answer
    answer = v.locator('.nbstream-message[data-role="assistant"]').last
    wait_until(lambda: shown_ids(answer) == branch, 15, what="the branch in the bubble")
    switcher = answer.get_by_role("group", name="Answers to the last message")
    expect(switcher.get_by_role("button", name="Branch 1", exact=False)).to_have_attribute(
        "aria-pressed", "true"
    )
    switcher.get_by_role("button", name="Original", exact=True).click()
    wait_until(lambda: kval(nb, "chat.shown") == 0, 30, what="the original shown")
    assert kval(nb, "chat.history[-1]['content'] == chat.branches[0].branch_info['parent'].result")
    answer = v.locator('.nbstream-message[data-role="assistant"]').last
    wait_until(lambda: shown_ids(answer) == original, 15, what="the original in the bubble")
    expect(v.locator(".nbstream-branches")).to_have_count(1)  # one switcher, in the last bubble

    # The endpoint's view: no popover to offer it in; the reason is said all the same.
    e = view(nb, 3)
    note = e.locator(".nbstream-branch-unavailable")
    expect(note).to_be_visible()
    expect(note).to_contain_text("remote endpoint")
    assert kval(nb, "e.branch_unavailable") in note.inner_text()
    assert nb.console_errors() == []


PICTURE = (
    "w = nbstream.StreamWidget(max_new_tokens=24, alternatives=5, show_alternatives=True,\n"
    "                          show_probabilities=True)\n"
    "w"
)


def test_the_readme_picture_of_branching(lab):
    """The default model: an answer, a branch from another token, its popover open."""
    nb = lab.open_notebook(
        [SETUP, PICTURE, 'w.generate("Name a color and say why you like it."); w.wait()']
    )
    nb.run_cell(0)
    nb.run_cell(1)
    nb.run_cell(2, timeout=300)
    v = view(nb, 1)
    wait_status(v, "complete", 300)
    ids = kval(nb, "w.run.token_ids")
    wait_until(lambda: shown_ids(v) == ids, 15, what="the answer's tokens shown")
    # Branch where the model was least sure (its top pick the least likely).
    step = kval(nb, "min(range(1, len(w.run.trace)), key=lambda i: w.run.trace[i].prob)")
    spans(v).nth(step).click()
    pop = v.get_by_role("dialog", name=f"Alternatives at step {step + 1}")
    pop.locator(".nbstream-branch-continue").first.click()
    wait_until(lambda: kval(nb, "len(w.branches)") == 1, 60, what="a branch made")
    branch_ended(nb, v, 300)
    ids = kval(nb, "w.run.token_ids")
    wait_until(lambda: shown_ids(v) == ids, 15, what="the branch's tokens shown")
    spans(v).nth(min(step + 2, len(ids) - 1)).click()
    expect(v.locator(".nbstream-branch-continue").first).to_be_visible()
    # WCAG 2.1 AA with the switcher shown and the popover's Continue buttons open.
    assert_accessible(nb.page, "a branch shown, its switcher and the popover's Continue")
    ARTIFACTS.mkdir(exist_ok=True)
    v.screenshot(path=str(SHOT))
    if os.environ.get("NBSTREAM_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(SHOT, README_SHOT)
    assert nb.console_errors() == []
