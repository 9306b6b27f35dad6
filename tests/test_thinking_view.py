"""What the views get of a reasoning model's thinking, without a browser.

The widget is driven as its front end drives it, and what it sends to its views is
captured: the thinking streams as ``thinking`` messages apart from the answer's deltas, a
``reset`` carries exactly the thinking sent, the chat's ended answers carry theirs in
``_messages``, and the token views say which tokens are thinking. A model that does not
think sends exactly what it sent before. A forced-output model stands in for a reasoning
model (nbstream.testing.forced_model): what is tested is the transport, not the reasoning.
"""

from __future__ import annotations

import threading
import time

import pytest

import nbstream
from nbstream.testing import forced_model

THOUGHT = "The user asks for 2+2. Two and two make four. I will say so plainly."
ANSWER = "The answer is 4."
TEXT = f"<think>{THOUGHT}</think>\n\n{ANSWER}"


class Recorder:
    """Every custom message a widget sends to its views."""

    def __init__(self, w: nbstream.StreamWidget | nbstream.ChatWidget) -> None:
        self.messages: list[dict] = []
        self._lock = threading.Lock()

        def send(content, buffers=None):
            with self._lock:
                self.messages.append(content)

        w.send = send

    def of(self, kind: str, run_id: int | None = None) -> list[dict]:
        with self._lock:
            found = list(self.messages)
        return [m for m in found if m["type"] == kind and run_id in (None, m.get("run_id"))]


def joined(messages: list[dict]) -> str:
    """The text a view assembles from delta-like messages (each placed at its offset)."""
    text = ""
    for m in messages:
        assert m["offset"] <= len(text), "a gap"
        text = text[: m["offset"]] + m["text"]
    return text


def wait_for(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


def wait_views_done(timeout=30.0):
    wait_for(lambda: not nbstream.widgets.feed.view_threads(), timeout)


@pytest.fixture(scope="module")
def thinker():
    return forced_model(TEXT)


def test_the_thinking_streams_apart_from_the_answer(thinker):
    w = nbstream.StreamWidget(*thinker, max_new_tokens=80)
    rec = Recorder(w)
    run = w.generate("What is 2+2?")
    run.wait(60)
    wait_views_done()
    rid = w.run_id
    thinking, deltas = rec.of("thinking", rid), rec.of("delta", rid)
    # The answer's deltas hold the answer alone; the thinking messages the thinking alone.
    assert joined(deltas) == run.result == ANSWER
    assert joined(thinking) == run.thinking == THOUGHT
    assert all("think" not in m["text"] for m in deltas)
    # Sent before the answer's first delta (one thread sends both, in this order), so a
    # view has the whole thinking when the answer starts; the last says it is done and
    # carries the summary's numbers.
    order = [m["type"] for m in rec.messages if m["type"] in ("thinking", "delta")]
    assert order.index("delta") > max(i for i, t in enumerate(order) if t == "thinking")
    last = thinking[-1]
    metrics = run.metrics
    assert last["done"] is True and all(m["done"] is False for m in thinking[:-1])
    assert last["tokens"] == metrics["thinking_tokens"] > 0
    assert last["elapsed_s"] == round(metrics["first_answer_s"], 2)


def test_a_reset_carries_the_thinking_sent(thinker):
    w = nbstream.StreamWidget(*thinker, max_new_tokens=80)
    rec = Recorder(w)
    run = w.generate("What is 2+2?")
    run.wait(60)
    wait_views_done()
    w._handle_message(w, {"type": "sync", "view": "v2", "page": "p"}, [])
    reset = rec.of("reset")[-1]
    last = rec.of("thinking", w.run_id)[-1]
    assert reset["text"] == ANSWER
    assert reset["thinking"] == {
        "text": THOUGHT,
        "tokens": last["tokens"],
        "elapsed_s": last["elapsed_s"],
        "done": True,
    }


def test_a_run_stopped_while_thinking_keeps_its_thinking_apart():
    model, tokenizer = forced_model("<think>" + "Hmm, let me weigh this. " * 60 + "</think>Yes.")
    # Slowed (a fake: a real reasoning model thinks for seconds), so Stop lands mid-thought.
    slow = model.register_forward_hook(lambda *a: time.sleep(0.02))
    try:
        w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=600)
        rec = Recorder(w)
        run = w.generate("Well?")
        wait_for(lambda: len(joined(rec.of("thinking", w.run_id))) > 30)
        w._handle_message(w, {"type": "stop"}, [])
        run.wait_done(60)
        wait_views_done()
    finally:
        slow.remove()
    assert run.status == "cancelled" and run.partial_text == ""
    assert rec.of("delta", w.run_id) == []  # nothing of it ever reached the answer
    thinking = rec.of("thinking", w.run_id)
    assert joined(thinking) == run.thinking and run.thinking.startswith("Hmm, let me weigh")
    assert thinking[-1]["done"] is True
    w._handle_message(w, {"type": "sync", "view": "v2", "page": "p"}, [])
    reset = rec.of("reset")[-1]
    assert reset["text"] == "" and reset["thinking"]["text"] == run.thinking


def test_a_model_that_does_not_think_sends_what_it_always_sent():
    model, tokenizer = forced_model("Plain answer, <think>not at the start</think> so no thinking.")
    w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=60, show_tokens=True)
    rec = Recorder(w)
    run = w.generate("Hi")
    run.wait(60)
    wait_views_done()
    w._handle_message(w, {"type": "sync", "view": "v2", "page": "p"}, [])
    assert run.thinking is None
    assert rec.of("thinking") == []
    assert set(rec.of("reset")[-1]) == {"type", "run_id", "view", "text"}
    tokens = rec.of("tokens")
    assert tokens and all("thinking" not in m for m in tokens)
    chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens=60)
    chat.generate("Hi").wait(60)
    wait_views_done()
    answer = chat._messages[-1]
    assert answer["status"] == "complete" and "thinking" not in answer


def test_the_token_views_mark_the_thinking_tokens(thinker):
    w = nbstream.StreamWidget(*thinker, max_new_tokens=80, show_tokens=True)
    rec = Recorder(w)
    run = w.generate("What is 2+2?")
    run.wait(60)
    wait_views_done()
    w._handle_message(w, {"type": "sync", "view": "v2", "page": "p"}, [])
    full = rec.of("tokens", w.run_id)[-1]  # the sync's: every token from offset 0
    assert full["offset"] == 0
    # Every token of the run, thinking included: the list is still run.token_ids.
    assert [t[0] for t in full["tokens"]] == run.token_ids
    n = full["thinking"]
    assert n == run.metrics["thinking_tokens"]
    tokenizer = thinker[1]
    assert tokenizer.decode(run.token_ids[:n]) == f"<think>{THOUGHT}</think>"


def test_a_stop_string_in_a_thinking_run_marks_the_right_tokens(thinker):
    w = nbstream.StreamWidget(*thinker, max_new_tokens=80, show_tokens=True, stop=["is 4"])
    rec = Recorder(w)
    run = w.generate("What is 2+2?")
    run.wait(60)
    wait_views_done()
    assert run.result == "The answer " and run.metrics["finish_reason"] == "stop"
    marked = rec.of("tokens", w.run_id)[-1]["tokens"]
    kept = [t for t in marked if t[6] is False]
    n = run.metrics["thinking_tokens"]
    # The thinking and the answer's tokens are not marked; " is" (the stop string) is.
    answer = "".join(t[1] for t in kept[n:])
    assert answer.strip() == "The answer", answer
    assert marked[len(kept)][1].strip() == "is"


def test_the_chat_shows_ended_answers_thinking_from_its_messages(thinker):
    chat = nbstream.ChatWidget(*thinker, max_new_tokens=80)
    rec = Recorder(chat)
    run = chat.generate("What is 2+2?")
    run.wait(60)
    wait_views_done()
    answer = chat._messages[-1]
    assert answer["content"] == ANSWER
    assert answer["thinking"]["text"] == THOUGHT and answer["thinking"]["done"] is True
    assert answer["thinking"]["tokens"] == run.metrics["thinking_tokens"]
    assert joined(rec.of("thinking", chat.run_id)) == THOUGHT
    # The history the model gets next has the answer alone; the transcript keeps both.
    assert chat.history[-1] == {"role": "assistant", "content": ANSWER}
    assert chat.transcript[-1]["thinking"] == THOUGHT
