"""ChatWidget in a real JupyterLab driven by Chromium.

Each test opens its own notebook (fresh kernel) with the tiny one-line model (it never ends
early, so an answer is as long as max_new_tokens asks). Where a test needs an answer to be
mid-stream, a `Gate` forward hook (browser_helpers.SETUP) holds the model at a decode
step until the test opens it: nothing depends on how fast this machine is. The kernel is
read through `nb.kernel_eval` (a subshell: it answers while an answer streams).
"""

from __future__ import annotations

import re

import pytest
from browser_helpers import MS, SETUP, STREAM_TIMEOUT, kval, wait_until
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

CHAT = (
    "model, tokenizer = tiny_model(one_line=True)\n"
    "chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens={max_new_tokens})\n"
    "chat"
)


def chat_view(nb, cell: int):
    return nb.cell(cell).locator(".nbstream.nbstream-chat").first


def messages(v):
    return v.locator(".nbstream-message")


def show_raw(v) -> None:
    toggle = v.get_by_role("button", name="Raw text", exact=True)
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "true")


def raw_of(message) -> str:
    return message.locator(".nbstream-raw").evaluate("(e) => e.textContent")


def wait_raw(message, text: str, timeout: float = 15.0) -> None:
    wait_until(lambda: raw_of(message) == text, timeout, what="message text == kernel text")


def wait_message_status(message, status: str, timeout: float = STREAM_TIMEOUT) -> None:
    expect(message).to_have_attribute("data-status", status, timeout=timeout * MS)


def send_from_page(v, text: str) -> None:
    v.get_by_role("textbox", name="Message", exact=True).fill(text)
    v.get_by_role("button", name="Send", exact=True).click()


def test_two_turn_chat_streams_into_the_newest_message(lab):
    """Turn 1 from code, turn 2 from the page: the second answer streams into a new message,
    the model gets the first turn, and every message carries the DOM hooks."""
    nb = lab.open_notebook(
        [
            SETUP,
            CHAT.format(max_new_tokens=40),
            "first = chat.generate('Hello there')\nanswer = chat.wait()\ngate = Gate(model, 15)",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = chat_view(nb, 1)
    expect(v).to_have_attribute("data-status", "idle")
    nb.run_cell(2)
    expect(v).to_have_attribute("data-status", "complete", timeout=STREAM_TIMEOUT * MS)
    show_raw(v)
    answer = kval(nb, "answer")
    expect(messages(v)).to_have_count(2)
    wait_raw(messages(v).nth(1), answer)

    send_from_page(v, "And more?")
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="step 15")
    msgs = messages(v)
    expect(msgs).to_have_count(4)
    newest = msgs.nth(3)
    held = kval(nb, "chat.partial_text")
    assert held
    wait_raw(newest, held)  # the held answer's text is in the newest message, and only there
    expect(newest).to_have_attribute("data-status", "running")
    expect(v).to_have_attribute("data-status", "running")
    expect(newest.locator(".nbstream-output")).to_have_attribute("data-partial", "true")
    assert raw_of(msgs.nth(1)) == answer  # the first answer is untouched
    expect(v.get_by_role("textbox", name="Message", exact=True)).to_have_value("")
    nb.kernel_eval("gate.opened.set()")

    wait_message_status(newest, "complete")
    result = kval(nb, "chat.result")
    assert result.startswith(held) and len(result) > len(held)
    wait_raw(newest, result)
    expect(newest.locator(".nbstream-output")).to_have_attribute("data-partial", "false")
    for k, role in enumerate(["user", "assistant", "user", "assistant"]):
        expect(msgs.nth(k)).to_have_attribute("data-role", role)
        expect(msgs.nth(k)).to_have_class("nbstream-message")
    expect(msgs.nth(1)).to_have_attribute("data-status", "complete")
    expect(msgs.nth(2).locator(".nbstream-message-text")).to_have_text("And more?")
    assert kval(nb, "chat.run.prompt") == [
        {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "And more?"},
    ]
    assert kval(nb, "len(chat.history)") == 4
    assert nb.console_errors() == []


def test_stopped_answer_is_kept_out_of_the_context(lab):
    """Stop mid-answer: the message says cancelled, and the next message's history (what the
    model gets) has neither the stopped turn's question nor its partial answer."""
    nb = lab.open_notebook(
        [
            SETUP,
            CHAT.format(max_new_tokens=20),
            "gate = Gate(model, 30)\nlong = chat.generate('Tell me a story', max_new_tokens=500)",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = chat_view(nb, 1)
    show_raw(v)
    nb.run_cell(2)
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="step 30")
    newest = messages(v).nth(1)
    wait_raw(newest, kval(nb, "chat.partial_text"))
    v.get_by_role("button", name="Stop", exact=True).click()
    wait_until(lambda: kval(nb, "long._control.cancel_event.is_set()"), 30, what="Stop reached")
    nb.kernel_eval("gate.opened.set()")

    wait_message_status(newest, "cancelled")
    expect(v).to_have_attribute("data-status", "cancelled")
    partial = kval(nb, "chat.partial_text")
    assert partial and kval(nb, "chat.result") is None
    wait_raw(newest, partial)
    expect(newest.locator(".nbstream-output")).to_have_attribute("data-partial", "true")
    expect(newest.locator(".nbstream-partial-label")).to_contain_text("stopped before its end")
    expect(newest).to_have_attribute("data-in-history", "false")
    expect(newest.get_by_role("button", name="Keep partial", exact=True)).to_be_visible()
    assert kval(nb, "chat.history") == []

    send_from_page(v, "Something else")
    msgs = messages(v)
    expect(msgs).to_have_count(4)
    wait_message_status(msgs.nth(3), "complete")
    assert kval(nb, "chat.run.prompt") == [{"role": "user", "content": "Something else"}]
    # The stopped turn is still shown, marked, and still out of the conversation.
    expect(msgs.nth(1)).to_have_attribute("data-status", "cancelled")
    expect(msgs.nth(1)).to_have_attribute("data-in-history", "false")
    wait_raw(msgs.nth(1), partial)
    assert nb.console_errors() == []


def test_reload_mid_stream_recovers_the_transcript(lab):
    """Save and reload while the second answer streams: the view comes back with both turns,
    the newest answer's text so far, and keeps streaming to the kernel's result."""
    nb = lab.open_notebook(
        [
            SETUP,
            CHAT.format(max_new_tokens=30),
            "answer = chat.generate('Hello').wait()\n"
            "first, second = Gate(model, 100), Gate(model, 200)\n"
            "run = chat.generate('More please', max_new_tokens=300)",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    nb.run_cell(2)
    v = chat_view(nb, 1)
    expect(messages(v)).to_have_count(4, timeout=30 * MS)
    wait_until(
        lambda: messages(v).nth(3).locator(".nbstream-output").inner_text().strip(),
        30,
        what="first text of the second answer",
    )
    assert kval(nb, "chat.status") == "running"
    nb.save()
    nb.reload()
    assert kval(nb, "chat.status") == "running"  # the answer went on while the page was away

    v = chat_view(nb, 1)
    expect(v).to_have_attribute("data-status", "running", timeout=30 * MS)
    show_raw(v)
    msgs = messages(v)
    expect(msgs).to_have_count(4)
    answer = kval(nb, "answer")
    wait_raw(msgs.nth(1), answer)
    expect(msgs.nth(0).locator(".nbstream-message-text")).to_have_text("Hello")
    expect(msgs.nth(2).locator(".nbstream-message-text")).to_have_text("More please")
    wait_until(lambda: kval(nb, "first.reached.is_set()"), STREAM_TIMEOUT, what="step 100")
    at_first = kval(nb, "chat.partial_text")
    wait_raw(msgs.nth(3), at_first)
    nb.kernel_eval("first.opened.set()")
    wait_until(lambda: kval(nb, "second.reached.is_set()"), STREAM_TIMEOUT, what="step 200")
    at_second = kval(nb, "chat.partial_text")
    assert at_second.startswith(at_first) and len(at_second) > len(at_first)
    wait_raw(msgs.nth(3), at_second)
    expect(msgs.nth(3)).to_have_attribute("data-status", "running")
    nb.kernel_eval("second.opened.set()")

    wait_message_status(msgs.nth(3), "complete")
    result = kval(nb, "chat.result")
    assert result.startswith(at_second) and kval(nb, "chat.metrics['tokens']") == 300
    wait_raw(msgs.nth(3), result)
    expect(msgs.nth(3).locator(".nbstream-output")).to_have_attribute("data-partial", "false")
    assert nb.cell(1).locator(".nbstream-chat").count() == 1
    assert nb.console_errors() == []


# ----- the page shows what the kernel holds ------------------------------------------------

# Every message as the page shows it: role, text (a user's bubble; an answer's raw text),
# and an answer's end state and in-history mark.
_READ_MESSAGES = """(root) => [...root.querySelectorAll('.nbstream-message')].map((m) => {
  const user = m.dataset.role === 'user';
  const text = user ? m.querySelector('.nbstream-message-text') : m.querySelector('.nbstream-raw');
  const out = {role: m.dataset.role, content: text ? text.textContent : null,
               in_history: m.dataset.inHistory === 'true'};
  if (!user) out.status = m.dataset.status;
  return out;
})"""

# The same fields of the kernel's transcript.
_KERNEL_MESSAGES = (
    "[{k: m[k] for k in ('role', 'content', 'in_history', 'status') if k in m}"
    " for m in chat.transcript]"
)


def wait_page_matches_kernel(nb, v, timeout: float = 15.0) -> list[dict]:
    """Wait until every message the page shows is the kernel's `chat.transcript` entry."""
    seen: dict[str, object] = {}

    def agree() -> bool:
        seen["page"] = v.evaluate(_READ_MESSAGES)
        seen["kernel"] = kval(nb, _KERNEL_MESSAGES)
        return seen["page"] == seen["kernel"]

    try:
        wait_until(agree, timeout, what="the page shows chat.transcript")
    except AssertionError:
        raise AssertionError(f"page {seen['page']!r}\n!= kernel {seen['kernel']!r}") from None
    return seen["kernel"]  # type: ignore[return-value]


def test_edit_after_a_kept_partial_shows_the_new_question(lab):
    """Three turns, the third stopped and kept, then Edit + Resend from the page: every
    bubble shows the kernel's transcript, the edited question too."""
    nb = lab.open_notebook(
        [
            SETUP,
            CHAT.format(max_new_tokens=8),
            "chat.generate('First question').wait()\n"
            "chat.generate('Second question').wait()\n"
            "gate = Gate(model, 6)\n"
            "third = chat.generate('Third question', max_new_tokens=300)",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = chat_view(nb, 1)
    show_raw(v)
    nb.run_cell(2)
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="step 6")
    msgs = messages(v)
    expect(msgs).to_have_count(6)
    v.get_by_role("button", name="Stop", exact=True).click()
    wait_until(lambda: kval(nb, "third._control.cancel_event.is_set()"), 30, what="Stop reached")
    nb.kernel_eval("gate.opened.set()")
    wait_message_status(msgs.nth(5), "cancelled")
    msgs.nth(5).get_by_role("button", name="Keep partial", exact=True).click()
    expect(msgs.nth(5)).to_have_attribute("data-in-history", "true")
    assert kval(nb, "chat.transcript[-1]['kept']") is True
    wait_page_matches_kernel(nb, v)

    msgs.nth(4).get_by_role("button", name="Edit", exact=True).click()
    box = v.get_by_role("textbox", name="Message", exact=True)
    expect(box).to_have_value("Third question")
    box.fill("A new question")
    resend = v.locator(".nbstream-send")
    expect(resend).to_contain_text("Resend")
    resend.click()
    wait_until(lambda: kval(nb, "chat.status") == "complete", STREAM_TIMEOUT, what="new answer")
    kernel = wait_page_matches_kernel(nb, v)
    assert kval(nb, "chat.history")[-2] == {"role": "user", "content": "A new question"}
    assert kernel[4]["content"] == "A new question"
    expect(msgs.nth(4).locator(".nbstream-message-text")).to_have_text("A new question")
    assert nb.console_errors() == []


def test_setting_history_shows_the_new_messages(lab):
    """`chat.history = ...` from code, after a turn from a run and after another history:
    the page shows the new transcript, never a question of the one before."""
    nb = lab.open_notebook(
        [
            SETUP,
            CHAT.format(max_new_tokens=8),
            "chat.generate('Hello there').wait()",
            "chat.history = [{'role': 'user', 'content': 'Name two colors.'},\n"
            "                {'role': 'assistant', 'content': 'Red and blue.'}]",
            "chat.history = [{'role': 'user', 'content': 'Who was Ada Lovelace?'},\n"
            "                {'role': 'assistant', 'content': 'A mathematician.'},\n"
            "                {'role': 'user', 'content': 'Born when?'},\n"
            "                {'role': 'assistant', 'content': 'In 1815.'}]",
            "chat.history = [{'role': 'user', 'content': 'Name two colors.'},\n"
            "                {'role': 'assistant', 'content': 'Red and blue.'}]",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = chat_view(nb, 1)
    show_raw(v)
    nb.run_cell(2)
    wait_page_matches_kernel(nb, v)
    for cell, first in ((3, "Name two colors."), (4, "Who was Ada Lovelace?"),
                        (5, "Name two colors.")):  # fmt: skip
        nb.run_cell(cell)
        kernel = wait_page_matches_kernel(nb, v)
        assert kernel[0]["content"] == first
        expect(messages(v).nth(0).locator(".nbstream-message-text")).to_have_text(first)
    assert nb.console_errors() == []


def test_an_answer_cut_at_max_new_tokens_is_marked(lab):
    """An answer that reached max_new_tokens is complete but marked "stopped at
     max_new_tokens" (the badge and a mark under the answer); one that ended on its own is not
    ."""
    nb = lab.open_notebook(
        [
            SETUP,
            "model, tokenizer = forced_model('Red and blue, then green and yellow.')\n"
            "chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens=50)\n"
            "chat",
            "chat.generate('Name two colors.').wait()",
            "chat.generate('And two more?', max_new_tokens=3).wait()",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = chat_view(nb, 1)
    show_raw(v)
    badge = v.locator(".nbstream-bar .nbstream-badge")
    cut = "stopped at max_new_tokens"
    nb.run_cell(2)
    wait_page_matches_kernel(nb, v)
    assert kval(nb, "chat.metrics['finish_reason']") == "eos"
    msgs = messages(v)
    expect(badge).to_have_attribute("data-status", "complete")
    expect(badge).not_to_contain_text(cut)
    expect(badge).not_to_have_class(re.compile(r"\bnbstream-cut\b"))
    expect(msgs.nth(1).locator(".nbstream-cut")).to_have_count(0)
    expect(msgs.nth(1)).not_to_contain_text(cut)

    nb.run_cell(3)
    kernel = wait_page_matches_kernel(nb, v)
    assert kernel[3]["status"] == "complete"
    assert kval(nb, "chat.metrics['finish_reason']") == "length"
    assert kval(nb, "[m.get('finish_reason') for m in chat._messages]") == [
        None, "eos", None, "length"
    ]  # fmt: skip
    expect(badge).to_have_attribute("data-status", "complete")
    expect(badge.locator(".nbstream-badge-text")).to_have_text(f"complete · {cut}")
    expect(badge).to_have_class(re.compile(r"\bnbstream-cut\b"))
    expect(msgs.nth(3).locator(".nbstream-cut")).to_be_visible()
    expect(msgs.nth(3).locator(".nbstream-cut")).to_contain_text(cut)
    output = msgs.nth(3).locator(".nbstream-output")
    expect(output).to_have_attribute("data-cut", "true")
    expect(output).to_have_attribute("data-partial", "false")
    # The first answer ended on its own: still unmarked.
    expect(msgs.nth(1).locator(".nbstream-cut")).to_have_count(0)
    expect(msgs.nth(1).locator(".nbstream-output")).to_have_attribute("data-cut", "false")
    assert nb.console_errors() == []
