"""A reasoning model's thinking in a real JupyterLab: the Thinking section.

A forced-output model that "thinks" (nbstream.testing.forced_model) stands in for a
reasoning model: none can be downloaded here, and what is checked is the view, not the
reasoning. A `Gate` forward hook (browser_helpers.SETUP) holds each run mid-thought, so
the section is seen open while the model thinks (also after a page reload), whatever the
machine's speed.
"""

from __future__ import annotations

import re

import pytest
from axe_audit import assert_accessible
from browser_helpers import MS, SETUP, STREAM_TIMEOUT, kval, view, wait_status, wait_until
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

THOUGHT = "The user asks for 2+2. Two and two make four. I will say so plainly."
ANSWER = "The answer is 4."
TEXT = f"<think>{THOUGHT}</think>\n\n{ANSWER}"

WIDGET = (
    f"model, tokenizer = forced_model({TEXT!r})\n"
    # Held at its 8th step: "<think>" and a few words of thinking made, no answer yet.
    "gate = Gate(model, 8)\n"
    "w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=120)\n"
    "w.prompt = 'What is 2+2?'\n"
    "w"
)
CHAT = (
    f"cmodel, ctokenizer = forced_model({TEXT!r})\n"
    "cgate = Gate(cmodel, 8)\n"
    "chat = nbstream.ChatWidget(cmodel, ctokenizer, max_new_tokens=120)\n"
    "chat"
)
THINKING = re.compile(r"^Thinking… \d+ tokens?$")


def section(v):
    return v.locator(".nbstream-thinking").first


def expect_open(box, is_open: bool) -> None:
    expect(box).to_have_js_property("open", is_open, timeout=STREAM_TIMEOUT * MS)


def expect_thinking(box) -> None:
    """Shown, open and streaming: the model is thinking."""
    expect(box).to_be_visible(timeout=STREAM_TIMEOUT * MS)
    expect(box).to_have_attribute("data-state", "thinking")
    expect_open(box, True)
    expect(box.locator(".nbstream-thinking-label")).to_have_text(THINKING)
    expect(box.locator(".nbstream-thinking-text")).to_contain_text("The user")


def expect_thought(box, tokens: int) -> None:
    """Ended, folded, with its time and token count."""
    expect(box).to_have_attribute("data-state", "done", timeout=STREAM_TIMEOUT * MS)
    expect_open(box, False)
    summary = rf"^Thought for \d+\.\d s · {tokens} tokens$"
    expect(box.locator(".nbstream-thinking-label")).to_have_text(re.compile(summary))
    # Folded, its text is kept (a click on the summary shows it).
    assert box.locator(".nbstream-thinking-text").text_content() == THOUGHT


def test_the_thinking_section_opens_while_thinking_and_folds_for_the_answer(lab):
    nb = lab.open_notebook([SETUP, WIDGET, "gate = Gate(model, 8)", "w", CHAT, "chat"])
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    box, output = section(v), v.locator(".nbstream-output")
    expect(box).to_be_hidden()  # no run, no thinking: no empty section

    # A run stopped while thinking keeps its thinking shown, marked, and never as the answer.
    v.get_by_role("button", name="Run", exact=True).click()
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="run held")
    expect_thinking(box)
    expect(output).to_have_attribute("data-empty", "true")
    v.get_by_role("button", name="Stop", exact=True).click()
    wait_until(lambda: kval(nb, "w.run._control.cancel_event.is_set()"), 30, what="Stop")
    nb.kernel_eval("gate.opened.set()")
    wait_status(v, "cancelled")
    expect(box).to_have_attribute("data-state", "stopped")
    expect(box.locator(".nbstream-thinking-label")).to_contain_text("Stopped while thinking")
    expect_open(box, True)
    expect(box.locator(".nbstream-thinking-text")).to_have_text(kval(nb, "w.run.thinking"))
    expect(output).to_have_attribute("data-empty", "true")

    # A run that answers: open while it thinks, folded as the answer starts.
    nb.run_cell(2)
    v.get_by_role("button", name="Run", exact=True).click()
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="run held")
    expect_thinking(box)
    expect(output).to_have_attribute("data-empty", "true")
    nb.kernel_eval("gate.opened.set()")
    wait_status(v, "complete")
    tokens = kval(nb, "w.run.metrics['thinking_tokens']")
    expect_thought(box, tokens)
    # The answer area holds the answer alone; the section is not inside it.
    expect(output).to_have_text(ANSWER)
    expect(output.locator(".nbstream-thinking")).to_have_count(0)
    # Keyboard: the summary takes the focus and Enter opens it.
    box.locator("summary").focus()
    expect(box.locator("summary")).to_be_focused()
    nb.page.keyboard.press("Enter")
    expect_open(box, True)
    expect(box.locator(".nbstream-thinking-text")).to_be_visible()
    assert_accessible(nb.page, "an open Thinking section", ".nbstream-thinking")

    # A second view of the same widget (traits + one reset) shows the same, folded.
    nb.run_cell(3)
    expect_thought(section(view(nb, 3)), tokens)
    expect(view(nb, 3).locator(".nbstream-output")).to_have_text(ANSWER)

    # The token view shows every token of the run, the thinking's marked, the boundary
    # visible: then the section (the same thinking again) gives way to it.
    tokens_button = v.get_by_role("button", name="Tokens", exact=True)
    tokens_button.click()
    expect(tokens_button).to_have_attribute("aria-pressed", "true")
    ids = kval(nb, "w.run.token_ids")
    shown = v.locator(".nbstream-output .nbstream-token")
    expect(shown).to_have_count(len(ids), timeout=STREAM_TIMEOUT * MS)
    expect(v.locator('.nbstream-token[data-thinking="true"]')).to_have_count(tokens)
    expect(v.locator('.nbstream-token[data-answer-start="true"]')).to_have_count(1)
    assert shown.nth(tokens).get_attribute("data-answer-start") == "true"
    assert_accessible(nb.page, "the token view of a run that thought", ".nbstream-tokens-view")
    expect(box).to_be_hidden()
    tokens_button.click()
    expect(box).to_be_visible()
    expect_open(box, True)  # as the user left it, through the redraws

    # The chat: the live answer's thinking from the messages, an ended one's from the kernel.
    nb.run_cell(4)
    chat = nb.cell(4).locator(".nbstream.nbstream-chat").first
    chat.get_by_role("textbox", name="Message", exact=True).fill("What is 2+2?")
    chat.get_by_role("button", name="Send", exact=True).click()
    wait_until(lambda: kval(nb, "cgate.reached.is_set()"), STREAM_TIMEOUT, what="answer held")
    answer = chat.locator('.nbstream-message[data-role="assistant"]').last
    expect_thinking(section(answer))
    # A reloaded page re-creates the views mid-thought: the reset carries the thinking.
    nb.save()
    nb.reload()
    chat = nb.cell(4).locator(".nbstream.nbstream-chat").first
    answer = chat.locator('.nbstream-message[data-role="assistant"]').last
    expect_thinking(section(answer))
    thought = section(answer).locator(".nbstream-thinking-text")
    expect(thought).to_have_text(kval(nb, "chat.run.thinking"))
    expect(answer.locator(".nbstream-output")).to_have_attribute("data-empty", "true")
    nb.kernel_eval("cgate.opened.set()")
    expect(chat).to_have_attribute("data-status", "complete", timeout=STREAM_TIMEOUT * MS)
    tokens = kval(nb, "chat.run.metrics['thinking_tokens']")
    expect_thought(section(answer), tokens)
    expect(answer.locator(".nbstream-output")).to_have_text(ANSWER)
    # What the model gets next: the answer without its thinking.
    history = kval(nb, "chat.history")
    assert history[-1] == {"role": "assistant", "content": ANSWER}
    nb.run_cell(5)
    again = nb.cell(5).locator('.nbstream-message[data-role="assistant"]').last
    expect_thought(section(again), tokens)
    expect(again.locator(".nbstream-output")).to_have_text(ANSWER)
    assert nb.console_errors() == []
