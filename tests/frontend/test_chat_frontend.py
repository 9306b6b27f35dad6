"""Front-end tests of the ChatWidget view (nbstream/static/chat.js) against a fake model.

The harness page (harness.html?bundle=chat) loads the chat bundle; the tests play the
kernel: they set the synced traits (``_messages``, ``status``, ``run_id``...) and send the
``delta`` / ``reset`` messages a ChatWidget sends, and read what the view sent back.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from frontend_helpers import FIRST, answer, user
from playwright.sync_api import Page, expect


def without_settings(message: dict) -> dict:
    """A Run / Send message less the panel's values it carries (checked on their own)."""
    assert isinstance(message.get("settings"), dict), message
    return {k: v for k, v in message.items() if k != "settings"}


def mount(page: Page, **state: Any) -> int:
    return page.evaluate("([s]) => window.mount(s, null)", [state])


def root(page: Page, i: int = 0):
    return page.locator(".host").nth(i).locator(".nbstream")


def change(page: Page, i: int = 0, **values: Any) -> None:
    page.evaluate("([i, v]) => window.views[i].model.changeMany(v)", [i, values])


def emit(page: Page, msg: dict, i: int = 0) -> None:
    page.evaluate("([i, m]) => window.views[i].model.msg(m)", [i, msg])


def sent(page: Page, i: int = 0) -> list[dict]:
    return page.evaluate("(i) => window.views[i].model.sent", i)


def frame(page: Page) -> None:
    page.evaluate("window.nextFrame()")


def stream(page: Page, text: str, run_id: int, chunk: int = 5, i: int = 0) -> None:
    page.evaluate(
        "([i, t, o]) => window.stream(i, t, o)", [i, text, {"runId": run_id, "chunk": chunk}]
    )


def messages(page: Page, i: int = 0):
    return root(page, i).locator(".nbstream-message")


# ---------------------------------------------------------------------------------------------
def test_dom_hooks_when_idle(chat_page: Page) -> None:
    page = chat_page
    mount(page)
    r = root(page)
    expect(r).to_have_attribute("data-status", "idle")
    expect(r).to_have_class(re.compile(r"\bnbstream\b"))
    expect(page.get_by_role("textbox", name="Message", exact=True)).to_have_count(1)
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_enabled()
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_disabled()
    expect(page.get_by_role("button", name="Clear chat", exact=True)).to_be_disabled()
    expect(messages(page)).to_have_count(0)
    assert [m["type"] for m in sent(page)] == ["sync"]


def test_two_turns_the_newest_answer_streams_into_its_own_message(chat_page: Page) -> None:
    page = chat_page
    mount(page, _messages=FIRST, status="complete", run_id=1)
    expect(messages(page)).to_have_count(2)
    expect(messages(page).nth(1).locator("strong")).to_have_text("Red")  # Markdown
    # Turn 2 starts: its user message and an empty answer, in one state update.
    second = [*FIRST, user(1, "Two more?"), answer(1, "", "queued", 2)]
    change(page, _messages=second, status="queued", run_id=2)
    change(page, status="running")
    stream(page, "Green and *yellow*.", run_id=2)
    msgs = messages(page)
    expect(msgs).to_have_count(4)
    for k, role in enumerate(["user", "assistant", "user", "assistant"]):
        expect(msgs.nth(k)).to_have_attribute("data-role", role)
    expect(msgs.nth(1)).to_have_attribute("data-status", "complete")
    newest = msgs.nth(3)
    expect(newest).to_have_attribute("data-status", "running")
    expect(newest.locator(".nbstream-output")).to_have_attribute("data-partial", "true")
    expect(newest.locator("em")).to_have_text("yellow")
    expect(msgs.nth(1).locator(".nbstream-output")).to_have_attribute("data-partial", "false")
    expect(msgs.nth(1).locator(".nbstream-output")).to_have_text("Red and blue.")
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_disabled()
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_enabled()
    # The turn ends: the final transcript and state arrive together.
    done = [*FIRST, user(1, "Two more?"), answer(1, "Green and *yellow*.", "complete", 2)]
    change(page, _messages=done, status="complete")
    frame(page)
    expect(newest).to_have_attribute("data-status", "complete")
    expect(newest.locator(".nbstream-output")).to_have_attribute("data-partial", "false")
    expect(root(page)).to_have_attribute("data-status", "complete")
    assert newest.locator(".nbstream-tail").count() == 0  # no caret left
    # The user's messages are plain text, never markup.
    expect(msgs.nth(2).locator(".nbstream-message-text")).to_have_text("Two more?")
    assert [m["type"] for m in sent(page)] == ["sync"]


def test_cancelled_answer_is_marked_and_can_be_kept(chat_page: Page) -> None:
    page = chat_page
    stopped = [*FIRST, user(1, "A story", False), answer(1, "Once upon", "cancelled", 2)]
    mount(page, _messages=stopped, status="cancelled", run_id=2)
    newest = messages(page).nth(3)
    expect(newest).to_have_attribute("data-status", "cancelled")
    expect(newest).to_have_attribute("data-in-history", "false")
    expect(messages(page).nth(2)).to_have_attribute("data-in-history", "false")
    expect(newest.locator(".nbstream-output")).to_have_attribute("data-partial", "true")
    expect(newest.locator(".nbstream-partial-label")).to_have_text(
        "Partial output — stopped before its end"
    )
    newest.get_by_role("button", name="Keep partial", exact=True).click()
    assert sent(page)[-1] == {"type": "keep", "turn": 1}
    kept = [*FIRST, user(1, "A story"), answer(1, "Once upon", "cancelled", 2, kept=True)]
    change(page, _messages=kept)
    expect(newest.get_by_role("button", name="Keep partial", exact=True)).to_have_count(0)
    expect(newest).to_have_attribute("data-in-history", "true")
    expect(newest.locator(".nbstream-partial-label")).to_contain_text("kept")
    # The first answer, complete, has no such button.
    expect(messages(page).nth(1).get_by_role("button", name="Keep partial")).to_have_count(0)


def test_failed_answer_shows_its_error(chat_page: Page) -> None:
    page = chat_page
    info = {"type": "RuntimeError", "message": "injected fault"}
    failed = [*FIRST, user(1, "Hi", False), answer(1, "Par", "failed", 2, error=info)]
    mount(page, _messages=failed, status="failed", run_id=2, error_info=info)
    newest = messages(page).nth(3)
    expect(newest.locator(".nbstream-error")).to_have_text("RuntimeError: injected fault")
    expect(newest.locator(".nbstream-output")).to_have_attribute("data-partial", "true")
    expect(messages(page).nth(1).locator(".nbstream-error")).to_have_count(0)


def test_composer_and_message_buttons_send_requests(chat_page: Page) -> None:
    page = chat_page
    mount(page, _messages=FIRST, status="complete", run_id=1)
    box = page.get_by_role("textbox", name="Message", exact=True)
    box.fill("Two more?")
    box.press("Shift+Enter")
    assert without_settings(sent(page)[-1]) == {"type": "send", "text": "Two more?"}
    # The kernel starts the turn: the box is emptied.
    change(page, _messages=[*FIRST, user(1, "Two more?"), answer(1, "", "queued", 2)],
           status="queued", run_id=2)  # fmt: skip
    expect(box).to_have_value("")
    page.get_by_role("button", name="Stop", exact=True).click()
    assert sent(page)[-1] == {"type": "stop"}
    done = [*FIRST, user(1, "Two more?"), answer(1, "Green.", "complete", 2)]
    change(page, _messages=done, status="complete")
    # Only the last user message can be edited, only the last answer regenerated.
    msgs = messages(page)
    expect(msgs.nth(0).get_by_role("button", name="Edit")).to_have_count(0)
    expect(msgs.nth(1).get_by_role("button", name="Regenerate")).to_have_count(0)
    msgs.nth(3).get_by_role("button", name="Regenerate", exact=True).click()
    assert without_settings(sent(page)[-1]) == {"type": "regenerate"}
    msgs.nth(2).get_by_role("button", name="Edit", exact=True).click()
    expect(box).to_have_value("Two more?")
    expect(root(page).locator(".nbstream-edit-note")).to_be_visible()
    box.fill("Three more?")
    page.get_by_role("button", name="Resend", exact=True).click()
    assert without_settings(sent(page)[-1]) == {"type": "edit_last", "text": "Three more?"}
    page.get_by_role("button", name="Clear chat", exact=True).click()
    assert sent(page)[-1]["type"] == "edit_last"  # asked first: nothing sent yet
    page.get_by_role("button", name="Yes, clear", exact=True).click()
    assert sent(page)[-1] == {"type": "clear"}


def test_input_error_is_shown_and_the_text_kept(chat_page: Page) -> None:
    page = chat_page
    mount(page)
    box = page.get_by_role("textbox", name="Message", exact=True)
    box.fill("far too long")
    page.get_by_role("button", name="Send", exact=True).click()
    change(page, input_error="the conversation is too long for the model")
    expect(root(page).get_by_role("alert")).to_have_text(
        "the conversation is too long for the model"
    )
    expect(box).to_have_attribute("aria-invalid", "true")
    expect(box).to_have_value("far too long")


def test_view_opened_mid_stream_recovers_the_transcript(chat_page: Page) -> None:
    page = chat_page
    state = {
        "_messages": [*FIRST, user(1, "Two more?"), answer(1, "", "running", 2)],
        "status": "running",
        "run_id": 2,
    }
    mount(page, **state)
    view_id = sent(page)[0]["view"]
    emit(page, {"type": "reset", "run_id": 2, "view": view_id, "text": "Green and"})
    emit(page, {"type": "delta", "run_id": 2, "offset": 9, "text": " purple."})
    frame(page)
    newest = messages(page).nth(3)
    expect(newest.locator(".nbstream-output")).to_have_text("Green and purple.")
    expect(messages(page).nth(1).locator(".nbstream-output")).to_have_text("Red and blue.")
    # A gap asks for the whole text again.
    emit(page, {"type": "delta", "run_id": 2, "offset": 40, "text": "x"})
    assert [m["type"] for m in sent(page)] == ["sync", "sync"]


HOSTILE = """<script>window.__pwned=1</script> <img src=x onerror="window.__pwned=1">
[click me](javascript:window.__pwned=1) <a href="javascript:window.__pwned=1">raw</a>
![tracker](https://example.com/pixel.png?leak=secret)
"""


@pytest.mark.parametrize("how", ["stream", "settled"])
def test_hostile_answer_stays_inert(chat_page: Page, how: str) -> None:
    page = chat_page
    if how == "stream":
        mount(page, _messages=[user(0, HOSTILE), answer(0, "", "running", 1)],
              status="running", run_id=1)  # fmt: skip
        stream(page, HOSTILE, run_id=1, chunk=3)
        change(page, _messages=[user(0, HOSTILE), answer(0, HOSTILE, "complete", 1)],
               status="complete")  # fmt: skip
    else:
        mount(page, _messages=[user(0, HOSTILE), answer(0, HOSTILE, "complete", 1)],
              status="complete", run_id=1)  # fmt: skip
    frame(page)
    r = root(page)
    expect(r.locator(".nbstream-message").nth(1)).to_contain_text("window.__pwned=1")
    for tag in ("script", "img", "iframe", "svg", "object", "embed", "style"):
        expect(r.locator(f".nbstream-messages {tag}")).to_have_count(0)
    handlers = r.evaluate(
        """e => [...e.querySelectorAll('*')].flatMap(n => [...n.attributes]
              .filter(a => a.name.startsWith('on') || /javascript:/i.test(a.value))
              .map(a => n.tagName + ' ' + a.name))"""
    )
    assert handlers == []
    r.locator(".nbstream-message").nth(1).get_by_text("click me").click()
    page.wait_for_timeout(100)
    assert page.evaluate("typeof window.__pwned") == "undefined"


def test_raw_text_toggle_shows_every_answer_exactly(chat_page: Page) -> None:
    page = chat_page
    mount(page, _messages=FIRST, status="complete", run_id=1)
    page.get_by_role("button", name="Raw text", exact=True).click()
    raw = messages(page).nth(1).locator(".nbstream-raw")
    assert raw.evaluate("e => e.textContent") == "**Red** and blue."


def test_clear_and_cleanup(chat_page: Page) -> None:
    page = chat_page
    mount(page, _messages=FIRST, status="complete", run_id=1)
    change(page, _messages=[], status="idle", run_id=2)
    expect(messages(page)).to_have_count(0)
    assert page.evaluate("window.views[0].model.listenerCount()") > 0
    page.evaluate("window.views[0].cleanup()")
    assert page.evaluate("window.views[0].model.listenerCount()") == 0
    n = len(sent(page))
    change(page, _messages=FIRST, status="complete", run_id=3)
    page.get_by_role("button", name="Send", exact=True).click()
    assert len(sent(page)) == n
    expect(messages(page)).to_have_count(0)


def test_every_message_follows_the_transcript(chat_page: Page) -> None:
    """An edited last message and a history set from code keep the keys (turn, role) of the
    messages they replace: the elements show the new text and marks all the same."""
    page = chat_page
    stopped = [*FIRST, user(1, "A story", False), answer(1, "Once upon", "cancelled", 2)]
    mount(page, _messages=stopped, status="cancelled", run_id=2)
    msgs = messages(page)
    expect(msgs.nth(2)).to_have_attribute("data-in-history", "false")
    # Edit + Resend: the last turn replaced (same turn number, a new run).
    edited = [*FIRST, user(1, "A poem"), answer(1, "Roses", "complete", 3)]
    change(page, _messages=edited, status="complete", run_id=3)
    expect(msgs.nth(2).locator(".nbstream-message-text")).to_have_text("A poem")
    expect(msgs.nth(2)).to_have_attribute("data-in-history", "true")
    expect(msgs.nth(3)).to_have_attribute("data-status", "complete")
    # A history set from code: seeded answers (no run), then another history.
    seeded = [user(0, "Who was Ada Lovelace?"), answer(0, "A mathematician.", "complete", None)]
    change(page, _messages=seeded, status="idle", run_id=4)
    expect(msgs).to_have_count(2)
    expect(msgs.nth(0).locator(".nbstream-message-text")).to_have_text("Who was Ada Lovelace?")
    again = [user(0, "Name two colors."), answer(0, "Red and blue.", "complete", None)]
    change(page, _messages=again, run_id=5)
    frame(page)
    expect(msgs.nth(0).locator(".nbstream-message-text")).to_have_text("Name two colors.")
    expect(msgs.nth(1).locator(".nbstream-output")).to_have_text("Red and blue.")
    for k, role in enumerate(["user", "assistant"]):
        expect(msgs.nth(k)).to_have_attribute("data-role", role)
    expect(msgs.nth(0).locator(".nbstream-message-role")).to_have_text("You")


def test_an_answer_cut_at_max_new_tokens_is_marked(chat_page: Page) -> None:
    page = chat_page
    cut = "stopped at max_new_tokens"
    done = [user(0, "Hi"), answer(0, "Hello.", "complete", 1, finish_reason="eos")]
    mount(page, _messages=done, status="complete", run_id=1,
          metrics={"finish_reason": "eos"})  # fmt: skip
    badge = root(page).locator(".nbstream-bar .nbstream-badge")
    expect(badge.locator(".nbstream-badge-text")).to_have_text("complete")
    expect(messages(page).nth(1).locator(".nbstream-cut")).to_have_count(0)
    second = [*done, user(1, "More"), answer(1, "", "running", 2)]
    change(page, _messages=second, status="running", run_id=2, metrics={})
    stream(page, "Once upon a", run_id=2)
    expect(messages(page).nth(3).locator(".nbstream-cut")).to_have_count(0)
    last = answer(1, "Once upon a", "complete", 2, finish_reason="length")
    ended = [*done, user(1, "More"), last]
    change(page, _messages=ended, status="complete", metrics={"finish_reason": "length"})
    newest = messages(page).nth(3)
    expect(newest.locator(".nbstream-cut")).to_contain_text(cut)
    expect(newest.locator(".nbstream-output")).to_have_attribute("data-cut", "true")
    expect(newest.locator(".nbstream-output")).to_have_attribute("data-partial", "false")
    expect(badge.locator(".nbstream-badge-text")).to_have_text(f"complete · {cut}")
    expect(badge).to_have_class(re.compile(r"\bnbstream-cut\b"))
    expect(messages(page).nth(1).locator(".nbstream-cut")).to_have_count(0)
    # The chat is cleared: no mark left on the badge.
    change(page, _messages=[], status="idle", run_id=3, metrics={})
    expect(badge.locator(".nbstream-badge-text")).to_have_text("idle")
    expect(badge).not_to_have_class(re.compile(r"\bnbstream-cut\b"))


def test_a_replayed_answer_is_marked_and_a_live_one_is_not(chat_page: Page) -> None:
    page = chat_page
    why = "replayed from a recording, not a live model"
    # A resumed chat: its first answer replayed from a recording, the next one live.
    recorded = [user(0, "Hi"), answer(0, "Hello.", "complete", 1, replayed=True)]
    mount(page, _messages=recorded, status="complete", run_id=1)
    first = messages(page).nth(1)
    expect(first).to_have_attribute("data-replayed", "")
    mark = first.locator(".nbstream-message-role .nbstream-replayed")
    expect(mark).to_be_visible()
    expect(mark).to_have_attribute("title", why)
    # Its accessible text says what it is, not only "replay".
    expect(first.locator(".nbstream-message-role")).to_have_text(f"Assistant, replay ({why})")
    expect(messages(page).nth(0).locator(".nbstream-replayed")).to_have_count(0)
    live = answer(1, "", "running", 2, replayed=False)
    change(page, _messages=[*recorded, user(1, "More"), live], status="running", run_id=2)
    stream(page, "Once upon a", run_id=2)
    newest = messages(page).nth(3)
    expect(newest.locator(".nbstream-replayed")).to_have_count(0)
    expect(newest).not_to_have_attribute("data-replayed", "")
    expect(newest.locator(".nbstream-message-role")).to_have_text("Assistant")
    expect(mark).to_be_visible()  # the recorded one stays marked
    # An answer with no flag (a kernel that does not send it) is not marked either.
    change(page, _messages=FIRST, status="complete", run_id=3)
    expect(root(page).locator(".nbstream-replayed")).to_have_count(0)
