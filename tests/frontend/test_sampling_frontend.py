"""Front-end tests of the sampling panel (js/src/sampling.js), "How was this picked?",
against the fake model of the static harness: the focus kept in the panel when its first
request fails, a slider widened by a run's settings back to its range on the next panel, a
chat answer's panel closed with its answer, and a token cut by the model's own ban named.
The tests play the kernel.
"""

from __future__ import annotations

from frontend_helpers import (
    FIRST,
    TOKENS,
    answer,
    change_many,
    emit,
    frame,
    mount,
    sent,
    spans,
    tokens_msg,
    user,
    view,
)
from playwright.sync_api import Page, expect


def open_panel(page: Page):
    mount(page, status="complete", run_id=1, show_alternatives=True)
    root = view(page)
    emit(page, tokens_msg(1, 0, TOKENS))
    frame(page)
    spans(root).nth(2).click()
    root.get_by_role("button", name="How was this picked?").click()
    panel = root.locator(".nbstream-dist")
    expect(panel).to_be_visible()
    return root, panel


def test_a_failed_first_reply_keeps_the_focus_in_the_panel(fe_page: Page) -> None:
    page = fe_page
    root, panel = open_panel(page)
    slider = panel.locator("input").first
    expect(slider).to_be_focused()
    ask = [m for m in sent(page) if m["type"] == "distribution"][-1]
    emit(
        page,
        {"type": "distribution", "view": ask["view"], "request": ask["request"], "error": "boom"},
    )
    expect(panel).to_have_attribute("data-state", "error")
    frame(page)  # the browser moves the focus off a control disabled under it by then
    expect(slider).to_be_focused()
    # Esc still reaches the panel: it closes, and the token it explained has the focus.
    page.keyboard.press("Escape")
    expect(panel).to_be_hidden()
    expect(spans(root).nth(2)).to_be_focused()
    # The slider said it is off (a move is ignored until the run's settings are known).
    expect(slider).to_have_attribute("aria-disabled", "true")


def reply(page: Page, run_settings: dict[str, float]) -> None:
    """The kernel's first answer to the panel's last request, with the run's settings."""
    ask = [m for m in sent(page) if m["type"] == "distribution"][-1]
    emit(
        page,
        {
            "type": "distribution",
            "view": ask["view"],
            "request": ask["request"],
            "run_settings": run_settings,
            "settings": run_settings,
            "stages": ["model"],
            "top": [],
            "rest": [1.0],
            "kept": [10],
            "size": 10,
        },
    )


def test_a_widened_slider_is_back_to_its_range_on_the_next_panel(fe_page: Page) -> None:
    page = fe_page
    root, panel = open_panel(page)
    temperature = panel.locator("input").first
    reply(page, {"temperature": 3.0, "top_k": 50, "top_p": 1.0})
    expect(temperature).to_have_attribute("max", "3")
    expect(temperature).to_have_value("3")
    page.keyboard.press("Escape")
    expect(panel).to_be_hidden()
    # Another run's panel (temperature 0.7): the slider's own range, 0 to 2.
    spans(root).nth(1).click()
    root.get_by_role("button", name="How was this picked?").click()
    reply(page, {"temperature": 0.7, "top_k": 50, "top_p": 1.0})
    expect(panel).to_have_attribute("data-state", "ready")
    expect(temperature).to_have_attribute("max", "2")
    expect(temperature).to_have_value("0.7")


def test_a_chat_answers_panel_closes_with_its_answer(chat_harness_page: Page) -> None:

    page = chat_harness_page
    page.evaluate(
        "([s]) => window.mount(s, null)",
        [{"_messages": FIRST, "status": "complete", "run_id": 1, "show_alternatives": True}],
    )
    root = page.locator(".host .nbstream").first
    emit(page, tokens_msg(1, 0, TOKENS))
    bubble = root.locator('.nbstream-message[data-role="assistant"]').first
    expect(spans(bubble)).to_have_count(len(TOKENS))
    spans(bubble).nth(2).click()
    bubble.get_by_role("button", name="How was this picked?").click()
    panel = root.locator(".nbstream-dist")
    expect(panel).to_be_visible()
    page.evaluate("() => { window.__panel = document.querySelector('.nbstream-dist') }")
    # A new answer starts below: the panel on the older answer closes.
    second = [*FIRST, user(1, "More?"), answer(1, "", "queued", 2)]
    change_many(page, {"_messages": second, "status": "queued", "run_id": 2})
    # (waited for, not read at once: the view may redraw in its next frame)
    page.wait_for_function("() => window.__panel.hidden === true", timeout=10_000)
    # Open again, on the first answer, then the chat is cleared: it closes with it.
    spans(bubble).nth(1).click()
    bubble.get_by_role("button", name="How was this picked?").click()
    expect(panel).to_be_visible()
    change_many(page, {"_messages": [], "status": "idle", "run_id": 3})
    expect(root.locator(".nbstream-message")).to_have_count(0)
    page.wait_for_function("() => window.__panel.hidden === true", timeout=10_000)


def test_a_token_cut_by_the_models_own_ban_names_it(fe_page: Page) -> None:
    page = fe_page
    _root, panel = open_panel(page)
    ask = [m for m in sent(page) if m["type"] == "distribution"][-1]
    run = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
    stages = ["model", "sequence_bias", "temperature", "top_k", "top_p"]
    emit(
        page,
        {
            "type": "distribution",
            "view": ask["view"],
            "request": ask["request"],
            "run_settings": run,
            "settings": run,
            "chosen": [5, " red", "text"],
            "stages": stages,
            "top": [
                [7, " blue", "text", [0.6, 0.0, 0.0, 0.0, 0.0], "sequence_bias"],
                [5, " red", "text", [0.4, 1.0, 1.0, 1.0, 1.0], None],
            ],
            "rest": [0.0] * len(stages),
            "kept": [2, 1, 1, 1, 1],
            "size": 2,
        },
    )
    cut = panel.locator(".nbstream-dist-cut")
    expect(cut).to_have_count(1)
    expect(cut).to_have_attribute("data-removed-by", "sequence_bias")
    expect(cut).to_contain_text("cut by the model's sequence bias (a ban)")
    # The bars draw the last stage: the banned token has no chance, the other all of it.
    chosen = panel.locator(".nbstream-dist-bar[data-chosen='true']")
    expect(chosen).to_have_attribute("data-p", "1")


def test_a_recordings_tokens_say_why_the_panel_needs_the_live_model(fe_page: Page) -> None:
    """A replayed recording (tokens with ids, no logits) is not a server: its own reason."""
    page = fe_page
    mount(
        page,
        status="complete",
        run_id=1,
        label="replay",
        show_alternatives=True,
        can_trace=True,
        can_explain=False,
    )
    root = view(page)
    emit(page, tokens_msg(1, 0, TOKENS))
    frame(page)
    spans(root).nth(2).click()
    note = root.locator(".nbstream-alt-explain-note")
    expect(note).to_contain_text("a recording keeps just the top few alternatives it saved")
    expect(note).to_contain_text("only the live model has")
    expect(note).not_to_contain_text("server")
    expect(root.get_by_role("button", name="How was this picked?")).to_have_count(0)
