"""The view of a run on a server: its tokens from run.trace, and Continue.

A widget on an Endpoint that asked for the server's logprobs (``alternatives=k``) lists the
run's tokens from its trace (a server sends no ids: each entry's id is null, and each
alternative's ``cut`` too, since a server does not say what its settings ruled out), and the
popover's Continue names the alternative by its place in the list. The loopback server
(vLLM's wire format) is tests/test_remote_branch.py's; the browser side is
tests/frontend/test_remote_branch_frontend.py and
tests/browser/test_remote_branch_browser.py.
"""

from __future__ import annotations

import math

from branching_server import ANSWER, PROMPT
from helpers import Recorder, tokens_of, wait_followers

import nbstream
from nbstream.widgets.branches import ENDPOINT_BRANCHES_IN_CODE, STILL_RUNNING


def test_a_server_runs_tokens_reach_the_view_with_the_servers_numbers(
    loopback,
    no_leftover_runs,
):
    endpoint = nbstream.Endpoint(loopback.url("vllm", "view"), "m")
    w = nbstream.StreamWidget(endpoint, max_new_tokens=20, alternatives=3, show_alternatives=True)
    assert w.can_trace and not w.can_explain  # tokens, but no logits for the sampling panel
    rec = Recorder(w)
    w.generate(PROMPT)
    assert w.wait(30)
    wait_followers()
    held = tokens_of(rec, w.run_id)
    assert [t[1] for t in held] == [text for text, _, _ in ANSWER]
    for (token_id, _text, kind, logprob, rank, alts), (_, want, tops) in zip(
        held, ANSWER, strict=True
    ):
        assert token_id is None and kind == "text"
        assert math.isclose(logprob, want) and rank == 1
        assert [a[1] for a in alts] == [t for t, _ in tops]
        assert [a[0] for a in alts] == [None] * 3  # no ids
        assert [a[4] for a in alts] == [None] * 3  # cut: the server did not say
        assert all(math.isclose(a[3], lp) for a, (_, lp) in zip(alts, tops, strict=True))
    assert w.branch_unavailable == ""  # vLLM continues an answer
    w.close()


def test_continue_from_the_view_names_the_alternative_and_the_branch_is_shown(
    loopback,
    no_leftover_runs,
):
    endpoint = nbstream.Endpoint(loopback.url("vllm", "viewbranch"), "m")
    w = nbstream.StreamWidget(endpoint, max_new_tokens=20, alternatives=3, show_alternatives=True)
    w.generate(PROMPT)
    assert w.wait(30)
    original = w.run
    # What the popover's Continue on ' green' (the second alternative of token 3) sends.
    w._handle_view_message({"type": "branch", "run_id": w.run_id, "step": 2, "alternative": 1})
    assert w.input_error == "", w.input_error
    assert w.wait(30)
    assert w.run is not original and w.run.result == "Red and green yellow."
    assert w.branches == [w.run] and w.branch_shown == 1
    assert w._branches[0]["text"] == " green" and w._branches[0]["parent_text"] == " blue"
    w._handle_view_message({"type": "show_branch", "index": 0})
    assert w.run is original and w.branch_shown == 0
    # A bad place says what is there; nothing starts.
    w._handle_view_message({"type": "branch", "run_id": w.run_id, "step": 2, "alternative": 9})
    assert "has 3 alternatives" in w.input_error
    assert w.branches == [w.branches[0]] and w.run is original
    w.close()


def test_a_server_run_without_a_trace_offers_no_tokens_and_says_how(
    loopback,
    no_leftover_runs,
):
    endpoint = nbstream.Endpoint(loopback.url("vllm", "viewplain"), "m")
    w = nbstream.StreamWidget(endpoint, max_new_tokens=20, show_alternatives=True)
    assert not w.can_trace and not w.can_explain
    rec = Recorder(w)
    w.generate(PROMPT)
    assert w.wait(30)
    wait_followers()
    # As before: no alternatives asked, none sent (the view toggles do not ask a server).
    assert w.run.trace is None and "logprobs" not in loopback.posts("viewplain")[-1]
    assert [m for _, m in rec.messages if m["type"] == "tokens"] == []
    assert not w.can_trace and w.branch_unavailable == ENDPOINT_BRANCHES_IN_CODE
    w.close()


def test_a_server_that_cannot_continue_says_why_in_the_popover(
    loopback,
    no_leftover_runs,
):
    # llama-cpp-python without the model's tokenizer: tokens shown, Continue not offered.
    endpoint = nbstream.Endpoint(loopback.url("lcp", "viewlcp"), "m")
    w = nbstream.StreamWidget(endpoint, max_new_tokens=20, alternatives=2, show_alternatives=True)
    w.generate(PROMPT)
    assert w.wait(30)
    assert w.can_trace
    assert "tokenizer" in w.branch_unavailable and w.branch_unavailable != STILL_RUNNING
    w.close()


def test_a_chat_on_a_server_continues_its_last_answer_from_the_view(
    loopback,
    no_leftover_runs,
):
    endpoint = nbstream.Endpoint(loopback.url("vllm", "viewchat"), "m")
    chat = nbstream.ChatWidget(endpoint, max_new_tokens=20, alternatives=2, show_alternatives=True)
    chat.generate(PROMPT)
    assert chat.wait(30)
    assert chat.can_trace and chat.branch_unavailable == ""
    chat._handle_view_message(
        {"type": "branch", "run_id": chat.run_id, "step": 0, "alternative": 1}
    )
    assert chat.input_error == "", chat.input_error
    assert chat.wait(30)
    assert chat.history[-1] == {"role": "assistant", "content": "Blue yellow."}
    chat.close()


def test_a_chat_shows_tokens_only_while_every_answer_on_the_server_has_them(
    loopback,
    no_leftover_runs,
):
    # An answer without a trace has no tokens to list: the token view would show it empty.
    endpoint = nbstream.Endpoint(loopback.url("vllm", "viewmixed"), "m")
    chat = nbstream.ChatWidget(endpoint, max_new_tokens=20, show_alternatives=True)
    chat.generate(PROMPT)
    assert chat.wait(30)
    assert not chat.can_trace
    chat.generate("And two more?", alternatives=2)
    assert chat.wait(30)
    assert chat.run.trace is not None and not chat.can_trace
    chat.clear()
    chat.generate(PROMPT, alternatives=2)
    assert chat.wait(30)
    assert chat.can_trace
    chat.close()


def test_a_compare_column_on_a_server_shows_its_tokens_and_continues(
    loopback,
    no_leftover_runs,
):
    endpoint = nbstream.Endpoint(loopback.url("vllm", "viewcompare"), "m")
    cw = nbstream.CompareWidget(
        endpoint,
        None,
        PROMPT,
        settings=[{"temperature": 0}, {"temperature": 0.7}],
        max_new_tokens=20,
        alternatives=2,
        show_alternatives=True,
    )
    cw.generate()
    assert cw.wait(30) == ["Red and blue."] * 2
    column = cw.columns[1]
    assert column.can_trace and not column.can_explain and column.branch_unavailable == ""
    rec = Recorder(column)
    column._send_all_tokens()  # as a view's toggle asks
    assert [t[1] for t in tokens_of(rec, column.run_id)] == [text for text, _, _ in ANSWER]
    column._handle_view_message(
        {"type": "branch", "run_id": column.run_id, "step": 2, "alternative": 1}
    )
    assert column.input_error == "", column.input_error
    assert column.wait(30) and column.result == "Red and green yellow."
    assert cw.columns[0].result == "Red and blue."  # the other column keeps its answer
    cw.close()
