"""Branching in the widgets: the popover's ``branch`` message, the switcher's
``show_branch``, and what ``w.run`` / ``w.result`` / the saved output / a chat's history
follow.

The widgets are driven as their front end drives them (custom messages); what they send to
their views is captured from ``send``. The browser side is
tests/browser/test_branch_browser.py. The tiny model: the numbers do not matter here.
"""

from __future__ import annotations

import pytest
from helpers import Recorder, wait_followers

import nbstream
from nbstream.testing import tiny_model
from nbstream.widgets.branches import ENDPOINT_BRANCHES_IN_CODE, STILL_RUNNING


@pytest.fixture
def tiny():
    return tiny_model()


def text_of(recorder: Recorder, run_id: int) -> str:
    """The text a view holds for run ``run_id`` after applying its deltas in order."""
    text = ""
    for m in recorder.deltas(run_id):
        assert m["offset"] <= len(text), "a gap"
        text = text[: m["offset"]] + m["text"]
    return text


def answered(tiny, **settings) -> tuple[nbstream.StreamWidget, Recorder]:
    w = nbstream.StreamWidget(*tiny, max_new_tokens=12, alternatives=5, **settings)
    rec = Recorder(w)
    w.generate("Name a color.")
    w.wait(60)
    return w, rec


def stopped(w, gate) -> None:
    """Stop ``w``'s run while ``gate`` holds its model, and wait for the end to be shown."""
    assert gate.held.wait(60)
    w.stop()
    gate.release()
    with pytest.raises(nbstream.GenerationCancelled):
        w.wait(60)
    wait_followers()


def ask(w, **message):
    """A message from a view, as the comm handler gets it."""
    w._handle_view_message(message)


# -- StreamWidget -------------------------------------------------------------------------------


def test_the_popover_message_branches_and_the_branch_streams_into_the_view(tiny):
    w, rec = answered(tiny)
    original = w.run
    alt = original.trace[3].alternatives[1]
    ask(w, type="branch", run_id=w.run_id, step=3, token=alt.id)
    assert w.input_error == ""
    branch = w.run
    assert branch is not original and w.branches == [branch]
    w.wait(60)
    wait_followers()
    assert branch.token_ids[:4] == [*original.token_ids[:3], alt.id]
    assert branch.branch_info["parent"] is original
    # The views got the branch's text, as deltas of its own run id.
    assert text_of(rec, w.run_id) == branch.result
    tokenizer = tiny[1]
    assert w._branches == [
        {
            "step": 3,
            "parent_token": original.token_ids[3],
            "parent_text": tokenizer.decode([original.token_ids[3]]),
            "token": alt.id,
            "text": tokenizer.decode([alt.id]),
            "parent": 0,
            "status": "complete",
        }
    ]
    assert w.branch_shown == 1 and w.shown == 1
    assert w.result == branch.result and w.record["branch"]["step"] == 3


@pytest.mark.parametrize(
    ("message", "words"),
    [
        ({"run_id": -5, "step": 3}, "no longer the one shown"),
        ({"step": 99}, "step 99 is not a step of this run"),
        ({"step": "3"}, "step must be an int"),
        ({"step": 3, "token": "blue"}, "token must be a token id"),
    ],
    ids=["stale", "bad-step", "step-not-int", "token-not-id"],
)
def test_a_bad_branch_request_is_an_input_error_and_starts_nothing(tiny, message, words):
    w, _ = answered(tiny)
    original, run_id = w.run, w.run_id
    full = {"type": "branch", "run_id": run_id, "token": original.trace[3].alternatives[1].id}
    full.update(message)
    ask(w, **full)  # nothing raises into the comm handler
    assert words in w.input_error
    assert w.run is original and w.run_id == run_id and w.branches == []


def test_branch_and_show_requests_while_a_run_is_in_progress_are_ignored(tiny, probe):
    # Rule 7: the page disables the switcher and the popover says why meanwhile
    # (branch_unavailable), so such a request is a click that overtook the run's start.
    w, _ = answered(tiny)
    step, token = 3, w.run.trace[3].alternatives[1].id
    gate = probe(tiny[0])
    gate.hold()
    run = w.generate("Another prompt")
    run_id = w.run_id
    assert gate.held.wait(60)
    try:
        ask(w, type="branch", run_id=w.run_id, step=step, token=token)
        assert w.branch_unavailable == STILL_RUNNING  # the popover says why
        ask(w, type="show_branch", index=0)
        assert w.input_error == ""
        assert w.run is run and w.run_id == run_id
    finally:
        gate.release()
    w.wait(60)
    wait_followers()
    assert w.input_error == "" and w.branch_unavailable == ""
    assert w.run_id == run_id and w.branches == []


def test_a_second_continue_click_for_the_same_answer_is_dropped_quietly(tiny, probe):
    # Two clicks at once (a double click, two views): the first branches; the second names
    # the answer the branch replaced. No error, during the branch or after it.
    w, _ = answered(tiny)
    original, run_id = w.run, w.run_id
    alternatives = original.trace[3].alternatives
    gate = probe(tiny[0])
    gate.hold()
    ask(w, type="branch", run_id=run_id, step=3, token=alternatives[1].id)
    branch = w.run
    assert branch is not original
    assert gate.held.wait(60)
    try:
        ask(w, type="branch", run_id=run_id, step=3, token=alternatives[2].id)
        assert w.input_error == ""
        assert w.run is branch and w.branches == [branch]
    finally:
        gate.release()
    w.wait(60)
    wait_followers()
    # A duplicate handled after the branch ended is dropped the same way.
    ask(w, type="branch", run_id=run_id, step=3, token=alternatives[2].id)
    assert w.input_error == ""
    assert w.run is branch and w.branches == [branch] and branch.status == "complete"
    # A request naming an answer that is really no longer shown still says so.
    branch_id = w.run_id
    w.show(0)
    ask(w, type="branch", run_id=branch_id, step=3, token=alternatives[2].id)
    assert "no longer the one shown" in w.input_error
    assert w.run is original and w.branches == [branch]


def test_a_refused_switch_is_said_in_the_pages_words(tiny):
    w, _ = answered(tiny)
    w.branch(2, w.run.trace[2].alternatives[1])
    w.wait(60)
    wait_followers()
    for index in (7, -1, "1", None):
        ask(w, type="show_branch", index=index)
        assert w.input_error.startswith("Nothing was switched"), w.input_error
        # The Python API's words (show(), branches[k - 1], wait()) are not the page's.
        assert "show(" not in w.input_error and "branches[" not in w.input_error
        assert "Original" in w.input_error and "Branch 1" in w.input_error
    assert w.shown == 1


def test_switching_shows_the_original_and_back_and_everything_follows(tiny):
    w, rec = answered(tiny)
    completed: list[str] = []
    w.on_complete(completed.append)
    original = w.run
    branch = w.branch(2, original.trace[2].alternatives[2])
    w.wait(60)
    wait_followers()
    assert completed == [branch.result]
    assert branch.result != original.result

    statuses: list[str] = []
    w.observe(lambda change: statuses.append(change["new"]), "status")
    ask(w, type="show_branch", index=0)
    assert w.input_error == ""
    w.wait(60)
    wait_followers()
    assert w.run is original and w.shown == 0 and w.branch_shown == 0
    # An ended answer shown again is never said to be running (badge, Stop, announcement).
    assert "running" not in statuses
    assert w.result == original.result and w.record == original.record
    assert text_of(rec, w.run_id) == original.result  # the view redraws the original
    assert original.result in w._fallback()[1]["text/plain"]  # and the saved output
    assert w.branches == [branch]  # switching keeps every branch

    assert w.show(1) is branch
    w.wait(60)
    wait_followers()
    assert w.run is branch and w.branch_shown == 1
    assert text_of(rec, w.run_id) == branch.result
    assert completed == [branch.result], "showing an answer again is not a new completion"


def test_a_branch_of_a_branch_names_its_parent_and_generate_clears_them(tiny):
    w, _ = answered(tiny)
    first = w.branch(1, w.run.trace[1].alternatives[1])
    w.wait(60)
    second = w.branch(4, first.trace[4].alternatives[1])
    w.wait(60)
    wait_followers()
    assert second.branch_info["parent"] is first
    assert [e["parent"] for e in w._branches] == [0, 1]
    assert w.branches == [first, second] and w.branch_shown == 2
    w.generate("Name an animal.")
    w.wait(60)
    wait_followers()
    assert w.branches == [] and w._branches == [] and w.branch_shown == 0


def test_show_refuses_what_is_not_an_answer_of_the_prompt(tiny):
    w, _ = answered(tiny)
    with pytest.raises(ValueError, match="no answer 1: 0 is the original"):
        w.show(1)
    with pytest.raises(TypeError, match="show"):
        w.show("original")
    ask(w, type="show_branch", index=7)
    assert "no answer 7" in w.input_error
    assert w.run is not None and w.shown == 0


def test_an_endpoint_widget_says_why_it_offers_no_branch():
    endpoint = nbstream.Endpoint("http://127.0.0.1:9/v1", "some-model")
    w = nbstream.StreamWidget(endpoint)
    # The view lists no tokens of a server's answer; the words say how to branch in code.
    assert w.branch_unavailable == ENDPOINT_BRANCHES_IN_CODE
    assert "w.branch(step, w.run.trace[step].alternatives[1])" in w.branch_unavailable


# -- ChatWidget ---------------------------------------------------------------------------------


def test_a_chat_branches_its_last_answer_and_its_history_holds_only_the_one_shown(tiny):
    chat = nbstream.ChatWidget(*tiny, max_new_tokens=10, alternatives=5)
    rec = Recorder(chat)
    first = chat.generate("Hi")
    chat.wait(60)
    original = chat.generate("Name a color.")
    chat.wait(60)
    alt = original.trace[2].alternatives[1]
    ask(chat, type="branch", run_id=chat.run_id, step=2, token=alt.id)
    assert chat.input_error == ""
    branch = chat.run
    chat.wait(60)
    wait_followers()
    assert branch.token_ids[:3] == [*original.token_ids[:2], alt.id]
    assert chat.branches == [branch] and chat.branch_shown == 1
    assert text_of(rec, chat.run_id) == branch.result
    # Two turns, the second answered by the branch only.
    contents = [m["content"] for m in chat.history]
    assert contents == ["Hi", first.result, "Name a color.", branch.result]
    assert [m["content"] for m in chat.transcript][-1] == branch.result
    last = chat._messages[-1]
    assert last["run_id"] == chat.run_id and last["content"] == branch.result

    ask(chat, type="show_branch", index=0)
    chat.wait(60)
    wait_followers()
    assert chat.history[-1]["content"] == original.result
    assert len(chat.history) == 4 and chat.transcript[-1]["content"] == original.result
    assert chat.branch_shown == 0 and chat._messages[-1]["content"] == original.result

    # The next message is answered after the answer shown, and has no branches yet.
    chat.generate("And another?")
    chat.wait(60)
    wait_followers()
    assert chat._branches == [] and chat.branches == []
    assert chat.run.prompt[3]["content"] == original.result


def test_a_chat_branch_request_for_an_earlier_answer_or_a_seeded_one_is_refused(tiny):
    chat = nbstream.ChatWidget(*tiny, max_new_tokens=8, alternatives=5)
    first = chat.generate("Hi")
    chat.wait(60)
    first_id = chat.run_id
    chat.generate("Again")
    chat.wait(60)
    ask(chat, type="branch", run_id=first_id, step=1, token=first.trace[1].alternatives[1].id)
    assert "no longer the one shown" in chat.input_error
    chat.history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    with pytest.raises(ValueError, match="given in the history"):
        chat.branch(0, 5)
    assert chat._branches == []


def test_a_kept_partial_comes_back_with_its_answer_after_a_branch(tiny, probe):
    # Keep partial, try a branch, show the original again: the history holds it, kept, as
    # before the branch (the keep belongs to that answer, not to the turn).
    model, tokenizer = tiny_model(one_line=True)
    chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens=200, alternatives=3)
    gate = probe(model)
    gate.on_call = lambda calls: calls == 8 and gate.hold()
    original = chat.generate("Name a color.")
    stopped(chat, gate)
    assert original.status == "cancelled" and original.partial_text
    chat.keep_partial()
    assert chat.history[-1]["content"] == original.partial_text

    branch = chat.branch(2, original.token_ids[2] + 1, max_new_tokens=4)
    chat.wait(60)
    wait_followers()
    assert branch.status == "complete" and chat.history[-1]["content"] == branch.result
    assert chat.transcript[-1]["kept"] is False  # the branch completed: nothing to keep

    chat.show(0)
    assert chat.history[-1]["content"] == original.partial_text
    assert chat.transcript[-1]["kept"] is True and chat.transcript[-1]["in_history"] is True
    assert chat._messages[-1]["kept"] is True and chat._messages[-1]["in_history"] is True
    # Back and forth: each answer keeps what the history held for it.
    chat.show(1)
    chat.show(0)
    assert chat.history[-1]["content"] == original.partial_text
    assert len(chat.history) == 2


def test_a_stopped_branch_of_a_kept_answer_is_not_kept_with_it(tiny, probe):
    model, tokenizer = tiny_model(one_line=True)
    chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens=200, alternatives=3)
    gate = probe(model)
    gate.on_call = lambda calls: calls == 8 and gate.hold()
    original = chat.generate("Name a color.")
    stopped(chat, gate)
    chat.keep_partial()
    gate.on_call = lambda calls: calls == 16 and gate.hold()
    branch = chat.branch(2, original.token_ids[2] + 1)
    stopped(chat, gate)
    assert branch.status == "cancelled"
    assert chat.history == [] and chat.transcript[-1]["kept"] is False
    chat.keep_partial()
    chat.show(0)
    assert chat.history[-1]["content"] == original.partial_text
    chat.show(1)
    assert chat.history[-1]["content"] == branch.partial_text
