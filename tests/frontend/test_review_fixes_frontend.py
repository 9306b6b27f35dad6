"""Front-end tests of defects a review of the page found (js/src), against the fake model of
the static harness: a compare column's parting mark drawn whatever order the messages come
in, the end said by a view that is shown (not by a collapsed one), a switch to another answer
that neither flashes the Thinking section open nor announces an end, the sampling panel
keeping the focus when its first request fails, and a disconnected view's popover offering
nothing that needs the kernel.
"""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Page, expect
from test_branch_frontend import BRANCH
from test_thinking_frontend import thinking
from test_tokens_frontend import TOKENS, spans, tokens_msg
from test_widget_frontend import change, delta, emit, frame, mount, sent, view

MARK = {"step": 2, "words": "Columns part at token 3: ' a' / ' the'"}


def change_many(page: Page, values: dict[str, Any], i: int = 0) -> None:
    page.evaluate("([i, v]) => window.views[i].model.changeMany(v)", [i, values])


def announcer(page: Page, i: int = 0):
    return view(page, i).locator(".nbstream-announcer")


def test_the_parting_mark_is_drawn_when_the_tokens_come_after_it(fe_page: Page) -> None:
    """Tokens turned on after the run, a second view, a reload: the tokens come after
    compare_mark, and the token it names is marked all the same."""
    page = fe_page
    mount(page, status="complete", run_id=1, show_prompt=False, compare_mark=MARK, show_tokens=True)
    root = view(page)
    expect(root.locator(".nbstream-parted")).to_have_text(MARK["words"])
    emit(page, tokens_msg(1, 0, TOKENS))
    frame(page)
    expect(spans(root)).to_have_count(len(TOKENS))
    expect(root.locator(".nbstream-token-parted")).to_have_count(1)
    expect(spans(root).nth(2)).to_have_class(re.compile(r"nbstream-token-parted"))
    # A second view of the same widget, made now: the same mark.
    mount(page, share_with=0)
    emit(page, tokens_msg(1, 0, TOKENS))
    frame(page)
    expect(spans(view(page, 1))).to_have_count(len(TOKENS))
    expect(view(page, 1).locator(".nbstream-token-parted")).to_have_count(1)


def test_a_collapsed_view_leaves_the_end_to_the_view_that_is_shown(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="idle", run_id=0)
    mount(page, share_with=0)
    # The first view's output collapsed: JupyterLab takes it out of the document.
    page.evaluate("() => window.views[0].el.remove()")
    change_many(page, {"run_id": 1, "status": "running"})
    emit(page, delta(1, 0, "Hi there."))
    change_many(page, {"status": "complete", "metrics": {"tokens": 3}})
    # The second view, the only one left in the document.
    expect(page.locator(".host")).to_have_count(1)
    expect(announcer(page, 0)).to_have_text("Answer complete, 3 tokens")


RECORD = """(root) => {
  window.__rec = [];
  const box = root.querySelector('.nbstream-thinking');
  const ann = root.querySelector('.nbstream-announcer');
  new MutationObserver(() => window.__rec.push(['box', box.open, box.getAttribute('data-state')]))
    .observe(box, {attributes: true, attributeFilter: ['open', 'data-state']});
  new MutationObserver(() => window.__rec.push(['said', ann.textContent]))
    .observe(ann, {childList: true, characterData: true, subtree: true});
}"""


def test_switching_answers_neither_opens_the_thinking_nor_announces_an_end(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="idle", run_id=0)
    root = view(page)
    # Run 1 thinks, answers and ends, seen by this view.
    change_many(page, {"run_id": 1, "status": "running"})
    emit(page, thinking(1, 0, "Two and two.", tokens=5, elapsed_s=0.2))
    emit(page, thinking(1, 12, "", tokens=6, elapsed_s=0.3, done=True))
    emit(page, delta(1, 0, "Four."))
    change_many(
        page,
        {
            "status": "complete",
            "metrics": {"tokens": 8, "thinking_tokens": 6, "first_answer_s": 0.3},
        },
    )
    expect(announcer(page)).to_have_text("Answer complete, 8 tokens")
    expect(root.locator(".nbstream-thinking")).to_have_js_property("open", False)
    page.wait_for_timeout(150)  # past the announcer's clearing pause
    root.evaluate(RECORD)
    # The kernel shows another (ended) answer, as the switcher or w.show do (_replay): its
    # run_id, status and metrics in one state message, then its thinking, then its text.
    metrics = {"tokens": 7, "thinking_tokens": 5, "first_answer_s": 0.2}
    change_many(page, {"run_id": 2, "status": "cancelled", "metrics": metrics})
    emit(page, thinking(2, 0, "Two and two.", tokens=5, elapsed_s=0.2, done=True))
    frame(page)
    emit(page, delta(2, 0, "Four, I"))
    frame(page)
    page.wait_for_timeout(150)
    rec = page.evaluate("window.__rec")
    assert [r for r in rec if r[0] == "box" and r[1]] == [], rec  # never open
    assert [r for r in rec if r[0] == "box" and r[2] == "stopped"] == [], rec
    assert [r for r in rec if r[0] == "said" and r[1]] == [], rec  # nothing announced
    expect(root.locator(".nbstream-thinking")).to_have_attribute("data-state", "done")
    # A run this view sees start is still announced.
    change_many(page, {"run_id": 3, "status": "running", "metrics": {}})
    change_many(page, {"status": "cancelled", "metrics": {"tokens": 2}})
    expect(announcer(page)).to_have_text("Stopped after 2 tokens")


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


def test_a_disconnected_view_offers_nothing_that_needs_the_kernel(fe_page: Page) -> None:
    page = fe_page
    mount(page, status="complete", run_id=1, show_alternatives=True)
    root = view(page)
    emit(page, tokens_msg(1, 0, TOKENS))
    frame(page)
    page.evaluate("() => window.views[0].model.fire('comm_live_update')")
    expect(root).to_have_attribute("data-connection", "lost")
    spans(root).nth(2).click()
    pop = root.locator(".nbstream-alternatives")
    expect(pop).to_be_visible()
    expect(pop.get_by_role("button", name="How was this picked?")).to_have_count(0)
    expect(pop.locator(".nbstream-branch-continue")).to_have_count(0)
    expect(pop).to_contain_text("Disconnected")
    enabled = pop.locator("button:enabled")
    expect(enabled).to_have_count(0)


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
    from test_chat_frontend import FIRST, answer, user

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
