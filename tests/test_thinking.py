"""Reasoning models: the thinking kept apart from the answer.

A forced-output model that "thinks" (nbstream.testing.forced_model answers exactly the text
it is given) stands in for a reasoning model: no such model is on this machine, and what is
tested is how nbstream reads the tags, not how well a model reasons.
"""

from __future__ import annotations

import copy
import itertools
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbstream
from nbstream.streaming import ThinkingSplitter
from nbstream.testing import forced_model

THOUGHT = "The user asks for 2+2. That is 4. I should say END only at the end."
ANSWER = "The answer is 4."
TEXT = f"<think>{THOUGHT}</think>\n\n{ANSWER}"


@pytest.fixture(scope="module")
def thinker():
    return forced_model(TEXT)


def test_the_answer_is_the_result_and_the_thinking_is_kept_apart(thinker):
    run = nbstream.stream(*thinker, "What is 2+2?", max_new_tokens=80)
    chunks = list(run)
    assert run.status == "complete"
    assert run.result == ANSWER == run.partial_text == "".join(chunks)
    assert run.thinking == THOUGHT
    metrics = run.metrics
    tokenizer = thinker[1]
    thought_tokens = len(tokenizer.encode(f"<think>{THOUGHT}</think>", add_special_tokens=False))
    assert metrics["thinking_tokens"] == thought_tokens
    assert metrics["tokens"] > thought_tokens
    assert metrics["first_answer_s"] >= metrics["first_chunk_s"]
    record = json.loads(json.dumps(run.record))
    assert record["thinking"] == THOUGHT and record["status"] == "complete"


def test_stop_strings_and_json_apply_to_the_answer_only(thinker):
    # "END" is in the thinking: it must not end the run there.
    run = nbstream.stream(*thinker, "What is 2+2?", max_new_tokens=80, stop=["END", "is 4"])
    run.wait(60)
    assert run.thinking == THOUGHT
    assert run.result == "The answer " and run.metrics["finish_reason"] == "stop"
    model, tokenizer = forced_model('<think>Braces: { not JSON</think>{"answer": 4}')
    run = nbstream.stream(model, tokenizer, "JSON please", max_new_tokens=60, expect="json")
    assert run.wait(60) == '{"answer": 4}' and run.value == {"answer": 4}


def test_a_template_that_opens_the_thinking_is_handled():
    model, tokenizer = forced_model("Short answer wanted.</think>\nHi there. END")
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.chat_template += "{% if add_generation_prompt %}<think>\n{% endif %}"
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=40, stop=["END"])
    assert run.prompt_text.rstrip().endswith("<think>")
    assert run.wait(60) == "Hi there. "
    assert run.thinking == "Short answer wanted."


def test_a_model_that_does_not_think_is_unchanged():
    model, tokenizer = forced_model("  <b>not a tag</b> <think>late</think> done")
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=40)
    assert run.wait(60) == "  <b>not a tag</b> <think>late</think> done"
    assert run.thinking is None and run.metrics["thinking_tokens"] is None
    assert run.metrics["first_answer_s"] == run.metrics["first_chunk_s"]


def test_tags_can_be_named_or_turned_off(thinker):
    run = nbstream.stream(*thinker, "Hi", max_new_tokens=80, thinking_tags=[])
    assert run.wait(60) == TEXT and run.thinking is None
    model, tokenizer = forced_model("[[plan]] answer")
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=20, thinking_tags=["[[", "]]"])
    assert run.wait(60) == "answer" and run.thinking == "plan"
    with pytest.raises(ValueError, match="two non-empty strings"):
        nbstream.stream(model, tokenizer, "Hi", thinking_tags=["<think>"])
    with pytest.raises(TypeError, match="list of two strings"):
        nbstream.stream(model, tokenizer, "Hi", thinking_tags="<think>")


def test_a_stopped_run_keeps_its_partial_thinking_never_as_the_result():
    model, tokenizer = forced_model(TEXT)
    model.register_forward_hook(lambda *a: time.sleep(0.02))
    run = nbstream.stream(model, tokenizer, "What is 2+2?", max_new_tokens=80)
    deadline = time.monotonic() + 60
    while not run.thinking and time.monotonic() < deadline:
        run.wait_for_progress(run.progress, timeout=1)
    run.stop()
    with pytest.raises(nbstream.GenerationCancelled) as caught:
        run.wait(60)
    assert run.result is None and run.status == "cancelled"
    assert run.thinking and THOUGHT.startswith(run.thinking)
    assert ANSWER.startswith(run.partial_text) and "<think>" not in run.partial_text
    assert caught.value.thinking == run.thinking


def test_enable_thinking_goes_to_a_template_that_takes_it_and_is_refused_otherwise(thinker):
    model, tokenizer = thinker
    with pytest.raises(ValueError, match="does not take it"):
        nbstream.stream(model, tokenizer, "Hi", enable_thinking=False)
    switching = copy.deepcopy(tokenizer)
    switching.chat_template += (
        "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}"
    )
    off = nbstream.stream(model, switching, "Hi", max_new_tokens=2, enable_thinking=False)
    on = nbstream.stream(model, switching, "Hi", max_new_tokens=2, enable_thinking=True)
    assert off.prompt_text.endswith("<think></think>") and not on.prompt_text.endswith("</think>")
    off.wait(60), on.wait(60)
    with pytest.raises(TypeError, match="enable_thinking must be True or False"):
        nbstream.stream(model, switching, "Hi", enable_thinking="no")


def test_a_chat_sends_the_answer_back_not_the_thinking(thinker):
    chat = nbstream.ChatWidget(*thinker, max_new_tokens=80)
    chat.generate("What is 2+2?")
    chat.wait()
    assert chat.history[-1] == {"role": "assistant", "content": ANSWER}
    chat.generate("And 3+3?")
    chat.wait()
    assert THOUGHT not in chat.run.prompt_text and ANSWER in chat.run.prompt_text


# -- the splitter, however the text arrives -------------------------------------------------
def _split(pieces, inside=False):
    splitter = ThinkingSplitter("<think>", "</think>", inside=inside)
    thinking, answer = [], []
    for piece in pieces:
        t, a = splitter.feed(piece)
        thinking.append(t)
        answer.append(a)
    t, a = splitter.flush()
    thinking.append(t)
    answer.append(a)
    return "".join(thinking), "".join(answer), splitter.opened


@st.composite
def cut(draw, text):
    points = sorted(draw(st.sets(st.integers(0, len(text)), max_size=8)))
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), thought=st.text(max_size=20), answer=st.text(max_size=20))
def test_the_split_does_not_depend_on_how_the_text_was_cut(data, thought, answer):
    if "</think>" in thought:
        return
    text = f" <think>{thought}</think>\n{answer}"
    whole = _split([text])
    assert _split(data.draw(cut(text))) == whole
    thinking, shown, opened = whole
    assert opened and thinking == thought and shown == answer.lstrip()
    plain = data.draw(st.text(max_size=30))
    if not plain.lstrip().startswith("<think>"):
        # Text that does not open with the tag is the answer, untouched.
        assert _split(data.draw(cut(plain))) == ("", plain, False)


def test_the_saved_output_shows_the_answer_with_the_thinking_folded(thinker):
    w = nbstream.StreamWidget(*thinker, max_new_tokens=80)
    w.generate("What is 2+2?")
    w.wait()
    _, bundle = w._fallback()
    markdown, plain = bundle["text/markdown"], bundle["text/plain"]
    tokens = w.run.metrics["thinking_tokens"]
    assert markdown.endswith(f"</details>\n\n{ANSWER}")
    assert f"<details><summary>Thinking, {tokens} tokens (not part of the answer)" in markdown
    assert THOUGHT in markdown and "<think>" not in markdown
    assert plain.endswith(ANSWER) and f"[Thinking, {tokens} tokens, not part" in plain


def test_a_saved_chat_shows_each_answer_with_its_thinking_folded(thinker):
    chat = nbstream.ChatWidget(*thinker, max_new_tokens=80)
    chat.generate("What is 2+2?")
    chat.wait()
    _, bundle = chat._fallback()
    markdown, plain = bundle["text/markdown"], bundle["text/plain"]
    assert markdown.endswith(f"</details>\n\n**Assistant:** {ANSWER}")
    assert "<summary>Thinking (not part of the answer)</summary>" in markdown
    assert THOUGHT in markdown and "<think>" not in markdown
    assert plain.endswith(f"Assistant: {ANSWER}") and "[Thinking, not part of the answer" in plain


def test_the_transcript_keeps_the_thinking_and_a_setting_sends_it_back(thinker):
    chat = nbstream.ChatWidget(*thinker, max_new_tokens=80)
    chat.generate("What is 2+2?")
    chat.wait()
    answer = chat.transcript[-1]
    assert answer["content"] == ANSWER and answer["thinking"] == THOUGHT
    assert chat.transcript[0].get("thinking") is None  # the user's message has none
    chat.keep_thinking = True  # for a model trained to see its earlier thinking
    assert chat.history[-1]["content"] == f"<think>{THOUGHT}</think>\n\n{ANSWER}"
    with pytest.raises(TypeError, match="keep_thinking must be True or False"):
        nbstream.ChatWidget(*thinker, keep_thinking="yes")


def test_a_branch_past_the_thinking_stops_at_a_stop_string_in_its_answer():
    """The close tag is in the branch's forced tokens: the generating side must still find
    where the answer starts, or a stop string would not halt the model (only the reader's
    side would cut the text, after max_new_tokens of work)."""
    said = "The answer is 4, and that is all there is to say about it, really."
    text = f"<think>{THOUGHT}</think>\n\n{said} END and then a great deal more"
    model, tokenizer = forced_model(text + " filler" * 200)
    run = nbstream.stream(model, tokenizer, "2+2?", max_new_tokens=400)
    run.wait(60)
    ids = run.token_ids
    thought = len(tokenizer.encode(f"<think>{THOUGHT}</think>", add_special_tokens=False))
    # Far enough past the close tag that the newest few tokens no longer show it.
    step = thought + 14
    branch = run.branch(step, ids[step], stop=["END"])
    branch.wait(60)
    assert branch.result == f"{said} " and branch.thinking == THOUGHT
    # The model was halted at the stop string, not run on to max_new_tokens.
    assert branch.metrics["finish_reason"] == "stop" and branch.metrics["tokens"] < 60
