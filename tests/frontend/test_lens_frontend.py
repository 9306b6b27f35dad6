"""Front-end tests of the popover's "Inside the model" (js/src/lens.js), against the fake model
of the static harness: the request a token's section sends, the chart, the changed layers and
the table drawn from the kernel's first reply, the shading of the earlier tokens (answer and
Prompt view) from its second, the keyboard path, an error in words, and no section where the
model's layers cannot be read. The tests play the kernel.
"""

from __future__ import annotations

from typing import Any

from frontend_helpers import (
    FIRST,
    TOKENS,
    change_many,
    emit,
    frame,
    mount,
    popover,
    sent,
    spans,
    tokens_msg,
    view,
)
from playwright.sync_api import Page, expect

#: The lens of step 2 (" a") on a model of four layers: " a" is the favourite at layer 3 only
#: (ranks count from 1, as ``Lens.ranks`` and the trace's).
LENS = {
    "step": 2,
    "token": " a",
    "layers": 4,
    "probs": [0.01, 0.05, 0.4, 0.25],
    "ranks": [40, 7, 1, 2],
    "top": [
        [[" the", 0.2], [" an", 0.1]],
        [[" my", 0.3], [" the", 0.1]],
        [[" a", 0.4], [" the", 0.2]],
        [[" the", 0.6], [" a", 0.25]],
    ],
    "changed": [1, 2, 3],
}
#: Three prompt tokens, then the answer's two before the step; signed shares (negative: away).
ATTRIBUTION = {
    "step": 2,
    "token": " a",
    "tokens": ["Say", " hello", ".", "Hello", ","],
    "shares": [0.1, 0.5, -0.02, 0.3, -0.08],
    "prompt_tokens": 3,
    "method": "gradient \u00b7 input on the embeddings",
}


def lens_asks(page: Page) -> list[dict[str, Any]]:
    return [m for m in sent(page) if m["type"] == "lens"]


def answer(page: Page, ask: dict[str, Any], **fields: Any) -> None:
    base = {"type": "lens", "view": ask["view"], "request": ask["request"], "run_id": ask["run_id"]}
    emit(page, {**base, "step": ask["step"], "error": None, **fields})


def first_reply(page: Page, ask: dict[str, Any]) -> None:
    answer(page, ask, lens=LENS, attribution=None, words="", elapsed_s=0.2, pending=True)


def last_reply(page: Page, ask: dict[str, Any]) -> None:
    answer(
        page, ask, lens=LENS, attribution=ATTRIBUTION, attribution_error=None, words="",
        elapsed_s=0.5, pending=False,
    )  # fmt: skip


def shown(page: Page, **state: Any):
    mount(
        page,
        **{"status": "complete", "run_id": 1, "show_alternatives": True, "can_lens": True, **state},
    )
    root = view(page)
    emit(page, tokens_msg(1, 0, TOKENS))
    frame(page)
    return root


def test_a_token_s_section_draws_the_layers_then_shades_the_tokens_that_pushed(fe_page: Page):
    page = fe_page
    root = shown(page)
    spans(root).nth(2).click()
    toggle = popover(root).get_by_role("button", name="Inside the model")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    assert lens_asks(page) == []  # nothing is computed until asked
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    (ask,) = lens_asks(page)
    assert (ask["run_id"], ask["step"]) == (1, 2)
    section = root.locator(".nbstream-lens")
    expect(section).to_have_attribute("data-state", "loading")
    first_reply(page, ask)
    expect(section).to_have_attribute("data-state", "lens")
    points = section.locator("polyline").get_attribute("points") or ""
    assert len(points.split()) == 4
    expect(section.locator(".nbstream-lens-dot-changed")).to_have_count(3)
    expect(section.locator(".nbstream-lens-changes li")).to_have_count(3)
    expect(section.locator(".nbstream-lens-sentence")).to_contain_text(
        "never the layers' favourite (at the output: rank 2, 25%)"
    )
    expect(section.locator(".nbstream-lens-pending")).to_be_visible()
    # The table says the same numbers (the chart is hidden from screen readers).
    expect(section.locator("svg")).to_have_attribute("aria-hidden", "true")
    section.get_by_text("Table of the numbers").click()
    rows = section.locator(".nbstream-lens-table tbody tr")
    expect(rows).to_have_count(4)
    expect(rows.nth(2)).to_contain_text("40%")
    expect(rows.nth(3)).to_contain_text("4 (output)")
    last_reply(page, ask)
    expect(section).to_have_attribute("data-state", "ready")
    expect(section.locator(".nbstream-lens-pushers-list li").first).to_contain_text(
        '" hello" toward 50% (prompt)'
    )
    expect(section.locator(".nbstream-lens-pushers-list li[data-index='4']")).to_contain_text(
        '"," away 8.0% (answer)'
    )
    # The answer's tokens before the step: shaded, numbered, their share in words.
    expect(spans(root).nth(0)).to_have_attribute("data-attr-place", "2")
    expect(spans(root).nth(0)).to_have_attribute("data-attr-level", "2")
    expect(spans(root).nth(1)).to_have_attribute("data-attr-level", "1")
    title = spans(root).nth(0).get_attribute("title") or ""
    assert "30% of the push, toward this step's token" in title
    # Away from the token: said in words and drawn dashed, not by colour alone.
    expect(spans(root).nth(1)).to_have_attribute("data-attr-sign", "negative")
    expect(spans(root).nth(0)).to_have_attribute("data-attr-sign", "positive")
    title = spans(root).nth(1).get_attribute("title") or ""
    assert "8.0% of the push, away from this step's token" in title
    expect(spans(root).nth(2)).to_have_attribute("data-attr-target", "true")
    # The Prompt view: the prompt's tokens, shaded the same way.
    strip = root.locator(".nbstream-prompt-view .nbstream-lens-prompt-token")
    expect(strip).to_have_count(3)
    expect(strip.nth(1)).to_have_attribute("data-attr-place", "1")
    # Collapsed: the shading goes.
    toggle.click()
    expect(spans(root).nth(0)).not_to_have_attribute("data-attr-level", "2")
    expect(root.locator(".nbstream-lens-prompt")).to_have_count(0)


def test_an_expanded_section_asks_for_the_next_token_and_redraws_a_kept_one(fe_page: Page):
    page = fe_page
    root = shown(page)
    spans(root).nth(2).click()
    popover(root).get_by_role("button", name="Inside the model").click()
    ask = lens_asks(page)[-1]
    last_reply(page, ask)
    spans(root).nth(3).click()  # the section stays open: the new step is asked for
    ask3 = lens_asks(page)[-1]
    assert ask3["step"] == 3 and ask3["request"] > ask["request"]
    last_reply(page, ask)  # a late reply to the old request is dropped
    expect(root.locator(".nbstream-lens")).to_have_attribute("data-state", "loading")
    expect(spans(root).nth(0)).not_to_have_attribute("data-attr-level", "2")
    spans(root).nth(2).click()  # kept: drawn at once, nothing asked
    expect(root.locator(".nbstream-lens")).to_have_attribute("data-state", "ready")
    assert lens_asks(page)[-1] == ask3
    # Rank instead of probability.
    root.get_by_role("button", name="Show rank").click()
    expect(root.locator(".nbstream-lens")).to_have_attribute("data-mode", "rank")


def test_the_keyboard_reaches_the_section_and_escape_goes_back_to_the_token(fe_page: Page):
    page = fe_page
    root = shown(page)
    spans(root).nth(0).focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("i")  # straight to "Inside the model", opened
    toggle = popover(root).get_by_role("button", name="Inside the model")
    expect(toggle).to_be_focused()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    first_reply(page, lens_asks(page)[-1])
    page.keyboard.press("Tab")
    expect(root.get_by_role("button", name="Show rank")).to_be_focused()
    page.keyboard.press("Enter")
    expect(root.locator(".nbstream-lens")).to_have_attribute("data-mode", "rank")
    expect(root.get_by_role("button", name="Show probability")).to_be_focused()
    page.keyboard.press("Escape")
    expect(popover(root)).to_be_hidden()
    expect(spans(root).nth(2)).to_be_focused()


def test_a_refusal_is_shown_in_words(fe_page: Page):
    page = fe_page
    root = shown(page)
    spans(root).nth(1).click()
    popover(root).get_by_role("button", name="Inside the model").click()
    why = "the lens does not know this model's architecture (MambaForCausalLM)"
    answer(page, lens_asks(page)[-1], error=why)
    section = root.locator(".nbstream-lens")
    expect(section).to_have_attribute("data-state", "error")
    expect(section.get_by_role("status")).to_have_text(f"Could not look inside the model: {why}")


def test_no_section_where_the_layers_cannot_be_read(fe_page: Page):
    page = fe_page
    root = shown(page, can_lens=False)
    spans(root).nth(1).click()
    expect(popover(root)).to_be_visible()
    expect(root.locator(".nbstream-lens")).to_have_count(0)


def test_a_chat_answer_s_section_asks_for_its_run_and_shades_that_answer(chat_harness_page: Page):
    page = chat_harness_page
    state = {"_messages": FIRST, "status": "complete", "run_id": 1, "show_alternatives": True}
    page.evaluate("([s]) => window.mount(s, null)", [{**state, "can_lens": True}])
    root = page.locator(".host .nbstream").first
    emit(page, tokens_msg(1, 0, TOKENS))
    bubble = root.locator('.nbstream-message[data-role="assistant"]').first
    expect(spans(bubble)).to_have_count(len(TOKENS))
    spans(bubble).nth(2).click()
    bubble.get_by_role("button", name="Inside the model").click()
    ask = lens_asks(page)[-1]
    assert (ask["run_id"], ask["step"]) == (1, 2)
    last_reply(page, ask)
    expect(bubble.locator(".nbstream-lens")).to_have_attribute("data-state", "ready")
    expect(spans(bubble).nth(0)).to_have_attribute("data-attr-place", "2")
    # The chat is cleared: the answer and its shading go, and nothing is left behind.
    change_many(page, {"_messages": [], "status": "idle", "run_id": 3})
    expect(root.locator(".nbstream-message")).to_have_count(0)
    expect(root.locator("[data-attr-level]")).to_have_count(0)
