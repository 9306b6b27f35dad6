"""Front-end tests of the Thinking section (js/src/thinking.js, issue 17) in the StreamWidget
view, against the fake anywidget model of the static harness: the user's choice to open or
close it is respected, a gap is repaired by the reset, markup in the thinking stays text,
and an empty thinking or a model that does not think shows no section.
"""

from __future__ import annotations

from playwright.sync_api import Page, expect
from test_widget_frontend import change, delta, emit, frame, mount, sent, view, view_id


def thinking(run_id: int, offset: int, text: str, **extra) -> dict:
    base = {"tokens": None, "elapsed_s": None, "done": False}
    return {"type": "thinking", "run_id": run_id, "offset": offset, "text": text, **base, **extra}


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
