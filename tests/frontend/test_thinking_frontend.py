"""Front-end tests of the Thinking section (js/src/thinking.js) in the StreamWidget view
and a chat answer's bubble, against the fake anywidget model of the static harness: the
user's choice to open or close it is respected, a gap is repaired by the reset, markup in
the thinking stays text, an empty thinking or a model that does not think shows no section,
the branch switcher sits above it, and the metrics line counts the thinking while the model
thinks (the ``thinking`` messages are handled once, in onRunMessages of js/src/live_text.js).
"""

from __future__ import annotations

from frontend_helpers import (
    BRANCH,
    answer,
    change,
    delta,
    emit,
    frame,
    mount,
    sent,
    thinking,
    user,
    view,
    view_id,
)
from playwright.sync_api import Page, expect


def start(page: Page) -> None:
    mount(page)
    change(page, "run_id", 1)
    change(page, "status", "running")


def box(page: Page):
    return view(page).locator(".nbstream-thinking")


def is_open(page: Page) -> bool:
    return box(page).evaluate("e => e.open")


def test_a_user_who_closes_it_while_thinking_keeps_it_closed(fe_page: Page) -> None:
    page = fe_page
    start(page)
    emit(page, thinking(1, 0, "Let me see.", tokens=4, elapsed_s=0.3))
    frame(page)
    expect(box(page)).to_be_visible()
    assert is_open(page)
    expect(box(page).locator(".nbstream-thinking-label")).to_have_text("Thinking… 4 tokens")
    box(page).locator("summary").click()  # the user folds it
    expect(box(page)).to_have_js_property("open", False)
    emit(page, thinking(1, 11, " More.", tokens=6, elapsed_s=0.5))
    emit(page, thinking(1, 17, "", tokens=7, elapsed_s=0.6, done=True))
    emit(page, delta(1, 0, "Answer."))
    change(page, "status", "complete")
    frame(page)
    expect(box(page)).to_have_attribute("data-state", "done")
    assert not is_open(page)
    # Opened again after the answer came: it stays open through what follows.
    box(page).locator("summary").click()
    expect(box(page)).to_have_js_property("open", True)
    change(page, "metrics", {"tokens": 9, "thinking_tokens": 7, "first_answer_s": 0.6})
    frame(page)
    assert is_open(page)
    label = box(page).locator(".nbstream-thinking-label")
    expect(label).to_have_text("Thought for 0.6 s · 7 tokens")
    expect(view(page).locator(".nbstream-output")).to_have_text("Answer.")


def test_a_gap_in_the_thinking_is_repaired_by_the_reset(fe_page: Page) -> None:
    page = fe_page
    start(page)
    emit(page, thinking(1, 0, "abc"))
    before = len([m for m in sent(page) if m["type"] == "sync"])
    emit(page, thinking(1, 10, "xyz"))  # seven characters missed
    syncs = [m for m in sent(page) if m["type"] == "sync"]
    assert len(syncs) == before + 1
    emit(
        page,
        {
            "type": "reset",
            "run_id": 1,
            "view": view_id(page),
            "text": "",
            "thinking": {"text": "abcdefghijxyz", "tokens": 8, "elapsed_s": 1.0, "done": False},
        },
    )
    frame(page)
    expect(box(page).locator(".nbstream-thinking-text")).to_have_text("abcdefghijxyz")


def test_markup_in_the_thinking_is_text(fe_page: Page) -> None:
    page = fe_page
    start(page)
    emit(page, thinking(1, 0, '<img src=x onerror="window.pwned=1"> **not bold**'))
    frame(page)
    text = box(page).locator(".nbstream-thinking-text")
    expect(text).to_have_text('<img src=x onerror="window.pwned=1"> **not bold**')
    expect(text.locator("img, strong")).to_have_count(0)
    assert page.evaluate("window.pwned") is None


def test_no_section_without_thinking(fe_page: Page) -> None:
    page = fe_page
    start(page)
    emit(page, delta(1, 0, "Just an answer."))
    change(page, "status", "complete")
    frame(page)
    expect(box(page)).to_be_hidden()
    # An empty thinking (`<think>\n\n</think>`, as some models write) shows none either.
    change(page, "run_id", 2)
    change(page, "status", "running")
    emit(page, thinking(2, 0, "\n\n", tokens=3, elapsed_s=0.1, done=True))
    emit(page, delta(2, 0, "Hi."))
    frame(page)
    expect(box(page)).to_be_hidden()


THOUGHT = {"text": "Colours first.", "tokens": 6, "elapsed_s": 0.4, "done": True}


def above(first, second) -> bool:
    """`first` comes before `second` in the page and is drawn above it."""
    before = first.evaluate(
        "(a, b) => !!(a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING)",
        second.element_handle(),
    )
    return before and first.bounding_box()["y"] < second.bounding_box()["y"]


def test_the_switcher_is_above_the_thinking_in_both_widgets(fe_page: Page, chat_page: Page) -> None:
    # The StreamWidget: an answer that thought, and a branch of it shown.
    page = fe_page
    mount(page)
    change(page, "run_id", 1)
    change(page, "status", "running")
    emit(page, {"type": "thinking", "run_id": 1, "offset": 0, "text": THOUGHT["text"],
                "tokens": 6, "elapsed_s": 0.4, "done": True})  # fmt: skip
    emit(page, delta(1, 0, "Red and blue."))
    change(page, "status", "complete")
    change(page, "_branches", [BRANCH])
    change(page, "branch_shown", 1)
    switcher = view(page).get_by_role("group", name="Answers of this prompt")
    thinking = view(page).locator(".nbstream-thinking")
    expect(switcher).to_be_visible()
    expect(thinking).to_be_visible()
    assert above(switcher, thinking)

    # The chat: the same in the last answer's bubble.
    page = chat_page
    state = {
        "_messages": [user(0, "Name two colors."),
                      answer(0, "Red and blue.", "complete", 1, thinking=THOUGHT)],
        "status": "complete",
        "run_id": 1,
        "_branches": [BRANCH],
        "branch_shown": 1,
    }  # fmt: skip
    page.evaluate("([s]) => window.mount(s, null)", [state])
    bubble = page.locator(".nbstream-message[data-role='assistant']").last
    switcher = bubble.get_by_role("group", name="Answers to the last message")
    thinking = bubble.locator(".nbstream-thinking")
    expect(switcher).to_be_visible()
    expect(thinking).to_be_visible()
    assert above(switcher, thinking)
    # And it stays there when a new answer's bubble takes it (a regenerate: a new run).
    regenerated = answer(0, "Green.", "complete", 2, thinking=THOUGHT)
    page.evaluate(
        "([s]) => window.views[0].model.changeMany(s)",
        [{"_messages": [user(0, "Name two colors."), regenerated], "run_id": 2,
          "_branches": [BRANCH], "branch_shown": 0}],
    )  # fmt: skip
    bubble = page.locator(".nbstream-message[data-role='assistant']").last
    expect(bubble.locator(".nbstream-output")).to_have_text("Green.")
    assert above(bubble.get_by_role("group", name="Answers to the last message"),
                 bubble.locator(".nbstream-thinking"))  # fmt: skip


def test_the_metrics_line_counts_the_thinking_in_both_widgets(
    fe_page: Page, chat_page: Page
) -> None:
    think = {"type": "thinking", "run_id": 1, "offset": 0, "text": "Hmm.", "tokens": 4,
             "elapsed_s": 0.5, "done": False}  # fmt: skip
    page = fe_page
    mount(page)
    change(page, "run_id", 1)
    change(page, "status", "running")
    emit(page, think)
    expect(view(page).locator(".nbstream-metrics")).to_contain_text("4 tokens")

    page = chat_page
    state = {
        "_messages": [user(0, "Hi"), answer(0, "", "running", 1)],
        "status": "running",
        "run_id": 1,
    }
    page.evaluate("([s]) => window.mount(s, null)", [state])
    page.evaluate("([m]) => window.views[0].model.msg(m)", [think])
    expect(page.locator(".nbstream-metrics").first).to_contain_text("4 tokens")
    expect(page.locator(".nbstream-thinking").first).to_contain_text("Thinking… 4 tokens")
