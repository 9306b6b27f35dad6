"""Front-end tests of a server run's tokens in the StreamWidget view, with the fake
model of harness.html: tokens without ids (a server sends none) keyed by their position, the
popover showing the server's list without claiming what the server did not say (no ids, no
"cut"), Continue naming the alternative by its place, by mouse and by keyboard, and no
sampling panel (a server sends no logits). The tests play the kernel; its side is
tests/test_remote_branch_view.py, both together tests/browser/test_remote_branch_browser.py.
"""

from __future__ import annotations

from typing import Any

from frontend_helpers import change, emit, lp, mount, popover, sent, spans, tokens_msg, view
from playwright.sync_api import Page, expect


def server_alts(*items: tuple[str, float]) -> list[list[Any]]:
    """A server's alternatives: no id, and cut unknown (null)."""
    return [[None, text, "text", lp(p), None] for text, p in items]


# What the kernel's feed sends for a run on a server (nbstream/_tokens.py,
# server_token_entries): [null, text, kind, logprob, rank, alternatives].
GREEN = server_alts((" blue", 0.41), (" green", 0.3), (" white", 0.14))
SERVER_TOKENS = [
    [None, "Red", "text", lp(0.74), 1, server_alts(("Red", 0.74), ("Blue", 0.2), ("Green", 0.08))],
    [None, " and", "text", lp(0.9), 1, server_alts((" and", 0.9), (",", 0.09), (" or", 0.05))],
    # Sampled: the server's second choice.
    [None, " green", "text", lp(0.3), 2, GREEN],
    [None, ".", "text", lp(0.95), None, server_alts(("!", 0.04), (" and", 0.01))],  # not listed
]


def server_view(page: Page, **state: Any):
    mount(
        page,
        status="complete",
        run_id=1,
        show_alternatives=True,
        can_trace=True,
        can_explain=False,
        branch_unavailable="",
        **state,
    )
    root = view(page)
    emit(page, tokens_msg(1, 0, SERVER_TOKENS))
    expect(spans(root)).to_have_count(len(SERVER_TOKENS))
    return root


def test_a_server_runs_tokens_show_its_numbers_and_claim_nothing_it_did_not_say(
    fe_page: Page,
) -> None:
    page = fe_page
    root = server_view(page)
    assert spans(root).evaluate_all("(s) => s.map((e) => e.textContent)") == [
        "Red",
        " and",
        " green",
        ".",
    ]
    # Keyed by position: no made-up ids ("null") on the page.
    assert spans(root).evaluate_all("(s) => s.map((e) => e.dataset.index)") == ["0", "1", "2", "3"]
    expect(root.locator("[data-token-id]")).to_have_count(0)
    assert "null" not in (spans(root).nth(2).get_attribute("title") or "")
    spans(root).nth(2).click()
    pop = popover(root)
    expect(pop).to_be_visible()
    expect(pop.locator(".nbstream-alt-caption")).to_have_text("The server's top 3 at this step")
    expect(pop.locator(".nbstream-alt-id")).to_have_count(0)
    expect(pop).not_to_contain_text("null")
    # The chosen one is where its rank says; nothing is marked cut (the server did not say).
    expect(pop.locator(".nbstream-alt-chosen .nbstream-alt-token")).to_have_text(" green")
    expect(pop.locator(".nbstream-alt-chosen")).to_have_count(1)
    expect(pop.locator(".nbstream-alt-cut-label")).to_have_count(0)
    expect(pop.locator(".nbstream-alt-cut")).to_have_count(0)
    expect(pop.locator(".nbstream-alt-p")).to_have_text("30.0% \u00b7 rank 2")
    # No sampling panel: it needs the model's logits; the popover says so in a line.
    expect(pop.get_by_role("button", name="How was this picked?")).to_have_count(0)
    expect(pop.locator(".nbstream-alt-explain-note")).to_contain_text(
        "a server sends only its top few"
    )
    # A chosen token outside the server's list: every alternative can be continued.
    spans(root).nth(3).click()
    expect(pop.locator(".nbstream-alt-chosen")).to_have_count(0)
    expect(pop.locator(".nbstream-alt-outside")).to_contain_text("rank unknown")
    expect(pop.locator(".nbstream-branch-continue")).to_have_count(2)


def test_continue_names_the_alternative_by_its_place_by_mouse_and_keyboard(fe_page: Page) -> None:
    page = fe_page
    root = server_view(page)
    spans(root).nth(2).click()
    pop = popover(root)
    buttons = pop.locator(".nbstream-branch-continue")
    expect(buttons).to_have_count(2)  # not on the chosen ' green'
    names = buttons.evaluate_all("(b) => b.map((e) => e.getAttribute('aria-label'))")
    assert names == ["Continue with ' blue'", "Continue with ' white'"]
    pop.get_by_role("button", name="Continue with ' white'", exact=True).click()
    asked = [m for m in sent(page) if m["type"] == "branch"]
    assert asked == [{"type": "branch", "run_id": 1, "step": 2, "alternative": 2}]
    # By keyboard: the token's roving tab stop, the popover opens on focus, Tab into it.
    spans(root).nth(0).focus()
    page.keyboard.press("ArrowRight")
    expect(spans(root).nth(1)).to_be_focused()
    pop = root.get_by_role("dialog", name="Alternatives at step 2")
    expect(pop).to_be_visible()
    target = pop.get_by_role("button", name="Continue with ' or'", exact=True)
    page.keyboard.press("Tab")
    for _ in range(6):
        if target.evaluate("(b) => b === document.activeElement"):
            break
        page.keyboard.press("Tab")
    expect(target).to_be_focused()
    page.keyboard.press("Enter")
    asked = [m for m in sent(page) if m["type"] == "branch"]
    assert asked[-1] == {"type": "branch", "run_id": 1, "step": 1, "alternative": 2}

    # A server that cannot continue (llama-cpp-python without the tokenizer): the kernel
    # says why, the popover says it instead of offering Continue.
    page.keyboard.press("Escape")
    why = "llama-cpp-python needs the model's tokenizer to continue a given answer"
    change(page, "branch_unavailable", why)
    spans(root).nth(2).click()
    pop = popover(root)
    expect(pop.locator(".nbstream-branch-continue")).to_have_count(0)
    expect(pop.locator(".nbstream-branch-unavailable")).to_have_text(
        f"Continue with another token is not offered: {why}"
    )
