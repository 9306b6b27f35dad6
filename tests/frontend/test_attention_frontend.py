"""Front-end tests of "Where it looked", the attention view in the popover's "Inside the model"
(js/src/attention.js), against the fake model of the static harness: the request it sends, the
picker and the shading it changes, the sharpest heads named (each picks itself), the keyboard
path, the table of the numbers, the attention sink labelled, the cap said, a refusal in words,
and token texts kept as text. The tests play the kernel.
"""

from __future__ import annotations

from typing import Any

from frontend_helpers import (
    FIRST,
    TOKENS,
    emit,
    frame,
    mount,
    popover,
    sent,
    spans,
    tokens_msg,
    view,
)
from playwright.sync_api import Locator, Page, expect

#: Step 2 (" a") read from position 4 (","): three prompt tokens, then the answer's two.
TEXTS = ["<|im_start|>", "Say", " hello", "Hello", ","]
#: weights[layer][head]: ten-thousandths over the five positions (3 layers x 2 heads).
WEIGHTS = [
    [[6000, 1000, 1000, 1000, 1000], [5000, 500, 500, 3500, 500]],
    [[7000, 500, 500, 1500, 500], [1000, 500, 2000, 6000, 500]],  # layer 2 head 2: previous
    [[8000, 500, 500, 500, 500], [500, 6500, 1000, 1000, 1000]],
]
ATTENTION: dict[str, Any] = {
    "step": 2,
    "token": " a",
    "layers": 3,
    "heads": 2,
    "positions": 5,
    "prompt_tokens": 3,
    "shown": [0, 1, 2, 3, 4],
    "tokens": TEXTS,
    "scale": 10000,
    "weights": WEIGHTS,
    "rest": [[0, 0], [0, 0], [0, 0]],
    "cap": 256,
    "sink": True,
    "sink_share": 0.4583,
    "sink_heads": 4,
    "strongest": [[2, 1, 1, 6500, "Say"], [1, 1, 3, 6000, "Hello"], [0, 1, 3, 3500, "Hello"]],
}
WORDS = "Attention sink: the first token ('<|im_start|>') is where 4 of 6 heads look most."


def capped() -> dict[str, Any]:
    """A long input: 1000 positions, the first and the last three sent (a cap of 4)."""
    return {
        **ATTENTION,
        "positions": 1000,
        "prompt_tokens": 990,
        "shown": [0, 997, 998, 999],
        "tokens": ["<|im_start|>", " the", " sea", "."],
        "weights": [[[4000, 1000, 2000, 1000], [3000, 3000, 1000, 1000]]] * 3,
        "rest": [[2000, 2000]] * 3,
        "cap": 4,
        "strongest": [[0, 1, 997, 3000, " the"]],
    }


def asks(page: Page) -> list[dict[str, Any]]:
    return [m for m in sent(page) if m["type"] == "attention"]


def answer(page: Page, ask: dict[str, Any], **fields: Any) -> None:
    base = {"type": "attention", "view": ask["view"], "request": ask["request"]}
    emit(page, {**base, "run_id": ask["run_id"], "step": ask["step"], "error": None, **fields})


def reply(page: Page, ask: dict[str, Any], attention: dict[str, Any] | None = None) -> None:
    answer(page, ask, attention=attention or ATTENTION, words=WORDS, elapsed_s=0.12)


def opened(page: Page, step: int = 2, **state: Any) -> Locator:
    """A view whose token `step` shows its popover with "Where it looked" expanded."""
    mount(page, status="complete", run_id=1, show_alternatives=True, can_lens=True, **state)
    root = view(page)
    emit(page, tokens_msg(1, 0, TOKENS))
    frame(page)
    spans(root).nth(step).click()
    popover(root).get_by_role("button", name="Inside the model").click()
    popover(root).get_by_role("button", name="Where it looked").click()
    return root


def section(root: Locator) -> Locator:
    return root.locator(".nbstream-attn")


def levels(root: Locator) -> list[str | None]:
    tokens = section(root).locator(".nbstream-attn-token")
    return [tokens.nth(k).get_attribute("data-attn-level") for k in range(tokens.count())]


def test_the_view_asks_for_the_step_and_the_picker_changes_the_shading(fe_page: Page):
    page = fe_page
    mount(page, status="complete", run_id=1, show_alternatives=True, can_lens=True)
    root = view(page)
    emit(page, tokens_msg(1, 0, TOKENS))
    frame(page)
    spans(root).nth(2).click()
    popover(root).get_by_role("button", name="Inside the model").click()
    toggle = popover(root).get_by_role("button", name="Where it looked")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    assert asks(page) == []  # nothing is computed until asked
    toggle.click()
    (ask,) = asks(page)
    assert (ask["run_id"], ask["step"]) == (1, 2)
    expect(section(root)).to_have_attribute("data-state", "loading")
    reply(page, ask)
    expect(section(root)).to_have_attribute("data-state", "ready")
    # First shown: the sharpest head (layer 3, head 2 here), its heaviest token numbered 1.
    layer = section(root).get_by_label("Layer", exact=True)
    head = section(root).get_by_label("Head", exact=True)
    expect(layer).to_have_value("2")
    expect(head).to_have_value("1")
    assert levels(root) == ["0", "4", "1", "1", "1"]
    expect(section(root).locator("[data-attn-place='1']")).to_have_attribute("data-position", "1")
    # Layer 2, head 2: the previous token.
    layer.select_option(label="2 of 3")
    expect(section(root)).to_have_attribute("data-layer", "1")
    assert levels(root) == ["1", "0", "2", "4", "0"]
    expect(section(root).locator("[data-attn-place='1']")).to_have_attribute("data-position", "3")
    expect(section(root).locator(".nbstream-attn-sentence")).to_have_text(
        'Layer 2, head 2 looks most at "Hello" (previous token, position 4, answer): 60.00%.'
    )
    # The layer's heads averaged.
    head.select_option(label="All (mean)")
    expect(section(root)).to_have_attribute("data-head", "-1")
    expect(section(root).locator(".nbstream-attn-sentence")).to_contain_text(
        "Layer 2, all heads look most at"
    )
    assert levels(root)[0] == "4"  # (7000 + 1000) / 2 on the first token
    expect(section(root).locator(".nbstream-attn-token[data-attn-role='query']")).to_have_text(",")


def test_the_sharpest_heads_are_named_and_each_picks_itself(fe_page: Page):
    page = fe_page
    root = opened(page)
    reply(page, asks(page)[-1])
    heads = section(root).get_by_role("list", name="The sharpest heads").get_by_role("button")
    expect(heads).to_have_count(3)
    expect(heads.nth(0)).to_have_text('Layer 3, head 2 \u2192 "Say" 65.00%')
    expect(heads.nth(1)).to_have_text('Layer 2, head 2 \u2192 "Hello" 60.00% (previous token)')
    heads.nth(1).click()
    expect(section(root).get_by_label("Layer", exact=True)).to_have_value("1")
    expect(section(root).get_by_label("Head", exact=True)).to_have_value("1")
    assert levels(root) == ["1", "0", "2", "4", "0"]
    expect(heads.nth(1)).to_be_focused()  # the list stays; the focus stays on the button


def test_the_keyboard_reaches_the_picker_and_the_heads(fe_page: Page):
    page = fe_page
    mount(page, status="complete", run_id=1, show_alternatives=True, can_lens=True)
    root = view(page)
    emit(page, tokens_msg(1, 0, TOKENS))
    frame(page)
    spans(root).nth(0).focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("i")  # "Inside the model", opened and focused (lens.js)
    page.keyboard.press("Tab")
    toggle = popover(root).get_by_role("button", name="Where it looked")
    expect(toggle).to_be_focused()
    page.keyboard.press("Enter")
    expect(toggle).to_have_attribute("aria-expanded", "true")
    reply(page, asks(page)[-1])
    page.keyboard.press("Tab")
    expect(section(root).get_by_label("Layer", exact=True)).to_be_focused()
    page.keyboard.press("ArrowUp")  # layer 3 -> layer 2
    expect(section(root)).to_have_attribute("data-layer", "1")
    page.keyboard.press("Tab")
    expect(section(root).get_by_label("Head", exact=True)).to_be_focused()
    page.keyboard.press("ArrowUp")  # head 2 -> head 1
    expect(section(root)).to_have_attribute("data-head", "0")
    page.keyboard.press("Tab")
    first = section(root).locator(".nbstream-attn-head").first
    expect(first).to_be_focused()
    page.keyboard.press("Enter")
    expect(section(root)).to_have_attribute("data-layer", "2")
    expect(section(root)).to_have_attribute("data-head", "1")
    page.keyboard.press("Escape")
    expect(popover(root)).to_be_hidden()
    expect(spans(root).nth(2)).to_be_focused()


def test_the_table_says_the_numbers_the_kernel_sent(fe_page: Page):
    page = fe_page
    root = opened(page)
    reply(page, asks(page)[-1])
    section(root).locator(".nbstream-attn-head").nth(1).click()  # layer 2, head 2
    section(root).get_by_text("Table of the weights").click()
    table = section(root).get_by_role("table")
    expect(table.locator("caption")).to_have_text(
        'Layer 2, head 2: the weight on each earlier position, from step 3\'s " a"'
    )
    rows = table.locator("tbody tr")
    expect(rows).to_have_count(5)
    for k, weight in enumerate(WEIGHTS[1][1]):
        cells = rows.nth(k).locator("td")
        expect(cells.nth(0)).to_have_text(str(k + 1))
        expect(cells.nth(1)).to_have_text(f'"{TEXTS[k]}"')
        expect(cells.nth(3)).to_have_text(f"{weight / 100:.2f}%")
    expect(rows.nth(0).locator("td").nth(4)).to_have_text("first token: attention sink")
    expect(rows.nth(3).locator("td").nth(4)).to_have_text("previous token")
    expect(rows.nth(4).locator("td").nth(4)).to_have_text("itself")
    expect(rows.nth(1).locator("td").nth(2)).to_have_text("prompt")
    expect(rows.nth(3).locator("td").nth(2)).to_have_text("answer")
    # A new pick keeps the table open, with the new numbers.
    section(root).get_by_label("Head", exact=True).select_option(label="1")
    expect(rows.nth(0).locator("td").nth(3)).to_have_text("70.00%")
    expect(table).to_be_visible()


def test_the_attention_sink_is_labelled_and_explained(fe_page: Page):
    page = fe_page
    root = opened(page)
    reply(page, asks(page)[-1])
    label = section(root).locator(".nbstream-attn-sink-label")
    expect(label).to_have_text("sink")
    sink = section(root).locator(".nbstream-attn-sink")
    expect(sink).to_contain_text(
        'Attention sink: the first token ("<|im_start|>") is where 4 of 6 heads look most'
    )
    expect(sink).to_contain_text("says where a head rests, not what it reads")
    # The first token is shown and shaded as it is, not hidden.
    first = section(root).locator(".nbstream-attn-token[data-position='0']")
    expect(first).to_have_text("<|im_start|>")
    section(root).get_by_label("Layer", exact=True).select_option(label="1 of 3")
    section(root).get_by_label("Head", exact=True).select_option(label="1")
    expect(first).to_have_attribute("data-attn-level", "4")
    expect(first).to_have_attribute(
        "title", '"<|im_start|>": position 1 (prompt, first token: attention sink), 60.00%'
    )
    section(root).get_by_text("In words").click()
    expect(section(root).locator(".nbstream-attn-words p")).to_have_text(WORDS)


def test_no_sink_no_label(fe_page: Page):
    page = fe_page
    root = opened(page)
    reply(page, asks(page)[-1], {**ATTENTION, "sink": False, "sink_heads": 1})
    expect(section(root)).to_have_attribute("data-state", "ready")
    expect(section(root).locator(".nbstream-attn-sink-label")).to_have_count(0)
    expect(section(root).locator(".nbstream-attn-sink")).to_have_count(0)


def test_a_long_input_is_capped_and_the_page_says_so(fe_page: Page):
    page = fe_page
    root = opened(page)
    reply(page, asks(page)[-1], capped())
    cap = section(root).locator(".nbstream-attn-cap")
    expect(cap).to_have_text(
        "A long input: the view shows the first token and the last 3 of the 1000 positions "
        "(a cap of 4 keeps the page quick). The 996 between (positions 2 to 997) are left out "
        "here; they hold 20.00% of this row's attention."
    )
    expect(section(root).locator(".nbstream-attn-token")).to_have_count(4)
    expect(section(root).locator(".nbstream-attn-gap")).to_contain_text("996 left out (20.00%)")
    section(root).get_by_text("Table of the weights").click()
    left_out = section(root).locator("tr[data-left-out='true'] td")
    expect(left_out.nth(0)).to_have_text("2\u2013997")
    expect(left_out.nth(3)).to_have_text("20.00%")
    # Five positions in a short run: nothing said.
    section(root).get_by_role("button", name="Where it looked").click()
    spans(root).nth(1).click()
    section(root).get_by_role("button", name="Where it looked").click()
    reply(page, asks(page)[-1], {**ATTENTION, "step": 1})
    expect(section(root)).to_have_attribute("data-state", "ready")
    expect(section(root).locator(".nbstream-attn-cap")).to_have_count(0)


def test_a_refusal_is_shown_in_its_words(fe_page: Page):
    page = fe_page
    root = opened(page, step=1)
    why = "a replayed recording has no model: it keeps the tokens it recorded, not the attention"
    answer(page, asks(page)[-1], error=why)
    expect(section(root)).to_have_attribute("data-state", "error")
    expect(section(root).get_by_role("status")).to_have_text(
        f"Could not show where it looked: {why}"
    )


def test_an_open_view_follows_the_token_and_redraws_a_kept_step(fe_page: Page):
    page = fe_page
    root = opened(page)
    first = asks(page)[-1]
    reply(page, first)
    spans(root).nth(3).click()  # the view stays open: the new step is asked for
    ask3 = asks(page)[-1]
    assert ask3["step"] == 3 and ask3["request"] > first["request"]
    reply(page, first)  # a late reply to the old request is dropped
    expect(section(root)).to_have_attribute("data-state", "loading")
    spans(root).nth(2).click()  # kept: drawn at once, nothing asked
    expect(section(root)).to_have_attribute("data-state", "ready")
    assert asks(page)[-1] == ask3


def test_token_texts_stay_text(fe_page: Page):
    page = fe_page
    root = opened(page)
    evil = '<img src=x onerror="window.__owned=1">'
    hostile = {**ATTENTION, "tokens": [evil, *TEXTS[1:]], "strongest": [[0, 0, 1, 1000, evil]]}
    reply(page, asks(page)[-1], hostile)
    expect(section(root).locator(".nbstream-attn-token[data-position='0']")).to_have_text(evil)
    expect(section(root).locator(".nbstream-attn-head")).to_contain_text("<img src=x onerror=")
    assert section(root).locator("img").count() == 0
    assert page.evaluate("window.__owned") is None


def test_a_chat_answer_s_view_asks_for_its_run(chat_harness_page: Page):
    page = chat_harness_page
    state = {"_messages": FIRST, "status": "complete", "run_id": 1, "show_alternatives": True}
    page.evaluate("([s]) => window.mount(s, null)", [{**state, "can_lens": True}])
    root = page.locator(".host .nbstream").first
    emit(page, tokens_msg(1, 0, TOKENS))
    bubble = root.locator('.nbstream-message[data-role="assistant"]').first
    expect(spans(bubble)).to_have_count(len(TOKENS))
    spans(bubble).nth(2).click()
    bubble.get_by_role("button", name="Inside the model").click()
    bubble.get_by_role("button", name="Where it looked").click()
    ask = asks(page)[-1]
    assert (ask["run_id"], ask["step"]) == (1, 2)
    reply(page, ask)
    expect(bubble.locator(".nbstream-attn")).to_have_attribute("data-state", "ready")
    expect(bubble.locator(".nbstream-attn-sink-label")).to_have_text("sink")
