"""run.trace and run.branch on a server: nbstream/backends/remote/ and servers.py.

Against the loopback server of branching_server.py (the ``loopback`` fixture), which streams
logprobs as vLLM documents them and continues an answer when asked to, and records every
request, so a test can say what reached the server and that nothing did. The real
llama-cpp-python server's trace is tested in tests/test_llamacpp_server.py.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import pytest
from branching_server import ANSWER, PROMPT, LoopbackHandler, chunk, listing

import nbstream
from nbstream.trace import RemoteAlternative, RemoteTrace
from nbstream.widgets.branches import ENDPOINT_BRANCHES_IN_CODE


def answered(endpoint: nbstream.Endpoint, **settings: Any) -> nbstream.Generation:
    run = nbstream.stream(endpoint, None, PROMPT, max_new_tokens=20, **settings)
    assert run.wait(30), run.error
    return run


def test_alternatives_on_a_server_fill_the_trace_with_what_it_sent(loopback, no_leftover_runs):
    endpoint = nbstream.Endpoint(loopback.url("vllm", "trace"), "m")
    run = answered(endpoint, alternatives=2)
    sent = loopback.posts("trace")[-1]
    assert sent["logprobs"] is True and sent["top_logprobs"] == 2
    trace = run.trace
    assert isinstance(trace, RemoteTrace) and trace.incomplete is None
    assert "".join(step.text for step in trace) == run.result == "Red and blue."
    assert [round(step.logprob, 3) for step in trace] == [t[1] for t in ANSWER]
    for step, (_, logprob, tops) in zip(trace, ANSWER, strict=True):
        assert step.id is None and step.rank == 1
        assert math.isclose(step.prob, math.exp(logprob))
        assert step.alternatives == tuple(RemoteAlternative(None, t, lp) for t, lp in tops[:2])
        assert step.cut == (None, None)  # the server does not say what its settings cut
    record = json.loads(json.dumps(run.record))
    assert record["settings"]["alternatives"] == 2
    assert record["trace"] == {
        "records": 4,
        "meaning": record["trace"]["meaning"],
        "incomplete": None,
    }
    assert "raw_logprobs" in record["trace"]["meaning"]  # what vLLM's numbers are


@pytest.mark.parametrize("family", ["vllm", "sglang"])
def test_a_branch_sends_the_answer_so_far_for_the_server_to_continue(
    loopback, no_leftover_runs, family
):
    endpoint = nbstream.Endpoint(loopback.url(family, "branch"), "m")
    run = answered(endpoint, alternatives=3, temperature=0)
    other = run.trace[2].alternatives[1]  # " green" instead of " blue"
    branch = run.branch(2, other)
    assert branch.wait(30), branch.error
    sent = loopback.posts("branch")[-1]
    assert sent["messages"] == [
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": "Red and green"},
    ]
    assert sent["continue_final_message"] is True and sent["add_generation_prompt"] is False
    assert sent["max_tokens"] == 20 - 3  # the forced tokens count toward max_new_tokens
    assert sent["temperature"] == 0 and sent["top_logprobs"] == 3  # the parent's settings
    # The branch's text starts with the answer so far; its trace covers all of it.
    assert branch.result == "Red and green yellow."
    assert "".join(step.text for step in branch.trace) == branch.result
    assert [step.forced for step in branch.trace] == [False, False, True, False, False]
    assert branch.trace[2].text == " green" and branch.trace[2].rank == 2
    info = branch.branch_info
    assert info["parent"] is run and info["step"] == 2
    assert info["token"] == " green" and info["parent_token"] == " blue"
    record = json.loads(json.dumps(branch.record))
    assert record["branch"]["prefix_text"] == "Red and green"
    assert record["branch"]["parent"] == json.loads(json.dumps(run.record))
    assert record["continuation"]["how"] == "continue_final_message"
    assert record["continuation"]["confirmed"] is True
    # rerun sends the same request again and gets the same text.
    again = nbstream.rerun(record, nbstream.Endpoint(loopback.url(family, "branch"), "m"))
    assert again.wait(30), again.error
    assert loopback.posts("branch")[-1] == sent
    assert again.result == branch.result
    assert again.trace.incomplete and "its record" in again.trace.incomplete


def test_settings_override_a_branchs_and_a_text_names_the_token(loopback, no_leftover_runs):
    run = answered(nbstream.Endpoint(loopback.url("vllm", "override"), "m"), alternatives=2)
    branch = run.branch(0, "Blue", temperature=0.7, seed=3, max_new_tokens=5)
    assert branch.wait(30), branch.error
    sent = loopback.posts("override")[-1]
    assert sent["messages"][-1] == {"role": "assistant", "content": "Blue"}
    assert sent["temperature"] == 0.7 and sent["seed"] == 3 and sent["max_tokens"] == 4
    assert branch.result == "Blue yellow."
    assert branch.trace[0].logprob == -1.6  # Blue's, from the parent's alternatives


def test_llama_server_continues_by_prefill_and_the_record_says_it_is_not_confirmed(
    loopback, no_leftover_runs
):
    run = answered(nbstream.Endpoint(loopback.url("llamacpp", "prefill"), "m"), alternatives=2)
    branch = run.branch(1, run.trace[1].alternatives[1])
    assert branch.wait(30), branch.error
    sent = loopback.posts("prefill")[-1]
    assert sent["messages"][-1] == {"role": "assistant", "content": "Red,"}
    assert "continue_final_message" not in sent and "add_generation_prompt" not in sent
    assert branch.result == "Red, yellow."
    record = branch.record
    assert record["continuation"]["how"] == "prefill"
    assert record["continuation"]["confirmed"] is False
    assert any("--no-prefill-assistant" in w for w in record["warnings"])


def test_a_server_that_sends_no_logprobs_keeps_its_text_and_the_trace_says_why(
    loopback, no_leftover_runs
):
    run = answered(nbstream.Endpoint(loopback.url("vllm", "nologprobs"), "m"), alternatives=2)
    assert run.status == "complete" and run.result == "Red and blue."
    assert run.trace == [] and "came without logprobs" in run.trace.incomplete
    record = run.record
    assert "came without logprobs" in record["trace"]["incomplete"]
    assert any("run.trace is incomplete" in w for w in record["warnings"])
    with pytest.raises(ValueError, match=r"not in run\.trace, which has 0 records"):
        run.branch(0, "Blue")


def test_malformed_logprobs_stop_the_trace_where_they_start(loopback, no_leftover_runs):
    run = answered(nbstream.Endpoint(loopback.url("vllm", "malformed"), "m"), alternatives=2)
    assert run.status == "complete" and run.result == "Red and blue."
    trace = run.trace
    assert [step.text for step in trace] == ["Red", " and"]  # nothing made up after
    assert "malformed logprobs" in trace.incomplete and "'not a number'" in trace.incomplete
    # What was recorded can still be branched from.
    branch = run.branch(1, trace[1].alternatives[1])
    assert branch.wait(30) and branch.result == "Red, yellow."


def test_what_a_server_cannot_do_is_refused_before_anything_is_sent(loopback, no_leftover_runs):
    # transformers serve refuses logprobs: alternatives is refused, naming it.
    with pytest.raises(ValueError, match="transformers serve sends no token probabilities"):
        nbstream.stream(
            nbstream.Endpoint(loopback.url("tf", "refused"), "m"), None, PROMPT, alternatives=3
        )
    assert loopback.posts("refused") == []
    # TGI: nobody has checked what it does with a final assistant message: refused.
    run = answered(nbstream.Endpoint(loopback.url("tgi", "nobranch"), "m"), alternatives=2)
    before = len(loopback.posts("nobranch"))
    with pytest.raises(ValueError, match=r"Text Generation Inference cannot be asked") as e:
        run.branch(1, run.trace[1].alternatives[1])
    assert "vLLM or SGLang (continue_final_message)" in str(e.value)
    # llama-cpp-python continues a text only: without the model's tokenizer to render
    # the conversation, branch is refused, saying what to pass.
    run = answered(nbstream.Endpoint(loopback.url("lcp", "nobranch"), "m"), alternatives=2)
    with pytest.raises(ValueError, match=r"needs the model's tokenizer") as e:
        run.branch(1, run.trace[1].alternatives[1])
    assert "Endpoint(..., tokenizer=...)" in str(e.value)
    assert len(loopback.posts("nobranch")) == before + 1  # the second answer; no branch
    # No trace, no id, no token of the list: each says what to pass.
    vllm = nbstream.Endpoint(loopback.url("vllm", "bad"), "m")
    plain = answered(vllm)
    with pytest.raises(ValueError, match="start it with alternatives=k"):
        plain.branch(0, "Blue")
    traced = answered(vllm, alternatives=2)
    with pytest.raises(TypeError, match="no token ids"):
        traced.branch(0, 42)
    with pytest.raises(ValueError, match=r"not one of run.trace\[0\].alternatives"):
        traced.branch(0, RemoteAlternative(None, "Purple", -9.0))
    assert len(loopback.posts("bad")) == 2  # the two answers; no branch was sent


def test_an_endpoint_widget_says_how_to_branch_and_its_branch_streams_into_it(
    loopback, no_leftover_runs
):
    w = nbstream.StreamWidget(
        nbstream.Endpoint(loopback.url("vllm", "widget"), "m"), max_new_tokens=20, alternatives=2
    )
    assert w.branch_unavailable == ENDPOINT_BRANCHES_IN_CODE
    assert "w.branch(step, w.run.trace[step].alternatives[1])" in w.branch_unavailable
    w.generate(PROMPT)
    assert w.wait(30)
    branch = w.branch(2, w.run.trace[2].alternatives[1])
    assert w.wait(30) and branch.result == "Red and green yellow."
    assert w.run is branch and w.branches == [branch]
    entry = w._branches[0]
    assert entry["parent_text"] == " blue" and entry["text"] == " green"
    assert entry["token"] is None and entry["parent_token"] is None  # a server sends no ids
    w.close()


def test_more_alternatives_than_the_server_takes_fails_saying_to_ask_fewer(
    loopback, no_leftover_runs
):
    run = nbstream.stream(
        nbstream.Endpoint(loopback.url("vllm", "toomany"), "m"), None, PROMPT, alternatives=25
    )
    assert run.wait_done(30) and run.status == "failed"
    message = str(run.error)
    assert "HTTP 400" in message and "top_logprobs must be at most 20" in message
    assert "alternatives=25 is sent as the server's logprobs count" in message
    assert "ask for fewer" in message


def test_a_branch_of_a_branch_sends_the_whole_answer_so_far(loopback, no_leftover_runs):
    run = answered(nbstream.Endpoint(loopback.url("vllm", "twice"), "m"), alternatives=2)
    first = run.branch(2, run.trace[2].alternatives[1])
    assert first.wait(30), first.error
    second = first.branch(3, first.trace[3].alternatives[1])  # " pink" for " yellow"
    assert second.wait(30), second.error
    sent = loopback.posts("twice")[-1]
    assert sent["messages"] == [
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": "Red and green pink"},
    ]
    assert second.result == "Red and green pink yellow."
    assert second.branch_info["parent"] is first
    assert second.record["branch"]["parent"]["branch"]["prefix_text"] == "Red and green"
    again = nbstream.rerun(second.record, nbstream.Endpoint(loopback.url("vllm", "twice"), "m"))
    assert again.wait(30) and again.result == second.result
    assert loopback.posts("twice")[-1] == sent


def test_a_chat_on_a_server_branches_its_last_answer_into_its_history(loopback, no_leftover_runs):
    chat = nbstream.ChatWidget(
        nbstream.Endpoint(loopback.url("vllm", "chat"), "m"), max_new_tokens=20, alternatives=2
    )
    chat.generate("Hi")
    assert chat.wait(30)
    chat.generate(PROMPT)
    assert chat.wait(30)
    branch = chat.branch(2, chat.run.trace[2].alternatives[1])
    assert chat.wait(30) and branch.result == "Red and green yellow."
    # The whole conversation went, the last answer so far at its end.
    assert loopback.posts("chat")[-1]["messages"] == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Red and blue."},
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": "Red and green"},
    ]
    assert chat.history[-1] == {"role": "assistant", "content": "Red and green yellow."}
    chat.show(0)
    assert chat.history[-1] == {"role": "assistant", "content": "Red and blue."}
    chat.close()


def test_a_reasoning_models_separate_thinking_stops_the_trace_and_says_so(
    loopback, no_leftover_runs
):
    run = answered(nbstream.Endpoint(loopback.url("vllm", "reasoning"), "m"), alternatives=2)
    assert run.thinking == "Think." and run.result == "Red and blue."
    assert run.trace == [] and "thinking came in a separate field" in run.trace.incomplete


# -- the trace against the streamed text, stop=, the key in reasons ---------------------------
class Scripted(ThreadingHTTPServer):
    """A vLLM-speaking server whose answer a test writes, chunk by chunk: ``answer`` for a
    new question, ``continuation`` for an answer so far to continue."""

    daemon_threads = True

    def __init__(self, answer: list[bytes], continuation: list[bytes], family: str) -> None:
        super().__init__(("127.0.0.1", 0), ScriptedHandler)
        self.answer, self.continuation, self.family = answer, continuation, family
        self.requests: list[dict[str, Any]] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class ScriptedHandler(LoopbackHandler):
    server: Scripted  # type: ignore[assignment]

    def do_GET(self) -> None:
        self._send(200, "application/json", json.dumps(listing(self.server.family)).encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        if "prompt" in body:  # the completions API (llama-cpp-python's branch)
            text = {"index": 0, "text": " cake", "logprobs": None, "finish_reason": "stop"}
            data = f"data: {json.dumps({'choices': [text]})}\n\ndata: [DONE]\n\n".encode()
            self._send(200, "text/event-stream", data)
            return
        continues = body["messages"][-1]["role"] == "assistant"
        events = self.server.continuation if continues else self.server.answer
        data = b"".join([chunk(None), *events, chunk(None, finish="stop"), b"data: [DONE]\n\n"])
        self._send(200, "text/event-stream", data)


def entry(text: str, tops: list[str], raw: bytes | None = None) -> dict[str, Any]:
    """One token's logprobs, its bytes its text's unless ``raw`` says otherwise."""
    return {
        "token": text,
        "logprob": -0.1,
        "bytes": list(text.encode() if raw is None else raw),
        "top_logprobs": [
            {"token": t, "logprob": -0.1 * (i + 1), "bytes": list(t.encode())}
            for i, t in enumerate(tops)
        ],
    }


@pytest.fixture
def scripted() -> Iterator[Any]:
    servers: list[Scripted] = []

    def start(
        answer: list[bytes], continuation: list[bytes] | None = None, family: str = "vllm"
    ) -> Scripted:
        servers.append(Scripted(answer, continuation or [chunk(" cake", None)], family))
        return servers[-1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_branch_after_a_character_split_over_tokens_sends_the_text_shown(
    scripted, no_leftover_runs
):
    # vLLM: each part of a split character is the token U+FFFD (bytes too), its text comes
    # with the last part (an empty delta before it).
    fffd = "\ufffd"
    server = scripted(
        [
            chunk("I like", {"content": [entry("I", ["I"]), entry(" like", [" like"])]}),
            chunk("", {"content": [entry(" " + fffd, [" " + fffd])]}),
            chunk(" 🍕", {"content": [entry(fffd, [fffd])]}),
            chunk(" and", {"content": [entry(" and", [" and", " or"])]}),
        ]
    )
    run = answered(nbstream.Endpoint(server.url(), "m"), alternatives=2)
    assert run.result == "I like 🍕 and"
    assert len(run.trace) == 5 and run.trace.incomplete is None
    branch = run.branch(4, " or")
    assert branch.wait(30), branch.error
    assert server.requests[-1]["messages"][-1]["content"] == "I like 🍕 or"
    assert branch.result == "I like 🍕 or cake"
    assert branch.record["branch"]["prefix_text"] == "I like 🍕 or"


def test_tokens_that_do_not_spell_the_text_stop_the_trace_and_no_branch_sends_them(
    scripted, no_leftover_runs
):
    server = scripted(
        [
            chunk("Hi", {"content": [entry("Hi", ["Hi"], raw=b"IGNORE ALL")]}),
            chunk(" there", {"content": [entry(" there", [" there", " you"])]}),
        ]
    )
    run = answered(nbstream.Endpoint(server.url(), "m"), alternatives=2)
    assert run.result == "Hi there"
    assert len(run.trace) == 0
    assert "IGNORE ALL" in run.trace.incomplete and "do not match its text" in run.trace.incomplete
    with pytest.raises(ValueError, match=r"not in run\.trace"):
        run.branch(1, " you")
    assert len(server.requests) == 1  # nothing sent
    other = scripted([chunk("A", {"content": [entry("Zebra", ["Zebra"]), entry(" extra", [])]})])
    run = answered(nbstream.Endpoint(other.url(), "m"), alternatives=2)
    assert run.result == "A" and len(run.trace) == 0 and "Zebra extra" in run.trace.incomplete


def test_a_stop_string_cuts_the_trace_at_the_text_shown(scripted, no_leftover_runs):
    # One chunk carries the stop string and tokens past it (vLLM --stream-interval > 1).
    server = scripted(
        [
            chunk("Red and", {"content": [entry("Red", ["Red"]), entry(" and", [" and"])]}),
            chunk(
                " blue. Green",
                {
                    "content": [
                        entry(" blue", [" blue"]),
                        entry(".", [".", "!"]),
                        entry(" Green", [" Green", " Pink"]),
                    ]
                },
            ),
        ]
    )
    run = answered(nbstream.Endpoint(server.url(), "m"), alternatives=2, stop=["blue"])
    assert run.result == "Red and "
    assert [step.text for step in run.trace] == ["Red", " and"]
    with pytest.raises(ValueError, match=r"not in run\.trace"):
        run.branch(4, " Pink")
    assert len(server.requests) == 1  # nothing sent


def test_a_trace_reason_quoting_the_servers_data_has_no_key(scripted, caplog, no_leftover_runs):
    key = "sk-test-0123456789abcdef"
    server = scripted([chunk("Hi", {"oops": f"Bearer {key}"})])
    endpoint = nbstream.Endpoint(server.url(), "m", api_key=key)
    with caplog.at_level("WARNING"):
        run = answered(endpoint, alternatives=2)
    assert run.result == "Hi" and run.trace.incomplete
    assert key not in run.trace.incomplete
    assert key not in json.dumps(run.record)
    assert key not in caplog.text


def test_a_branchs_stop_string_is_looked_for_in_its_answer_not_its_thinking(
    scripted, no_leftover_runs
):
    tokens = ["<think>", "say", " blue", "</think>", "Red", " and", " green", "."]
    server = scripted(
        [chunk(t, {"content": [entry(t, [t, " pink"])]}) for t in tokens],
        [chunk(t, {"content": [entry(t, [t])]}) for t in (" now", ",", " then", ".")],
    )
    run = answered(nbstream.Endpoint(server.url(), "m"), alternatives=2, stop=["blue"])
    assert run.thinking == "say blue" and run.result == "Red and green."
    branch = run.branch(6, " pink")
    assert branch.wait(30), branch.error
    sent = server.requests[-1]["messages"][-1]["content"]
    assert sent == "<think>say blue</think>Red and pink"
    assert branch.thinking == "say blue" and branch.result == "Red and pink now, then."


#: Llama 3's chat template, which trims each message (``content | trim``).
TRIMMING_TEMPLATE = (
    "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)


def test_an_answer_so_far_the_chat_template_would_trim_is_sent_as_shown_not_confirmed(
    scripted, no_leftover_runs
):
    from transformers import AutoTokenizer

    from nbstream.models import default_model_dir

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    tokenizer.chat_template = TRIMMING_TEMPLATE
    tokens = ["Red", " and", " blue"]
    answer = [chunk(t, {"content": [entry(t, [t, "\n"])]}) for t in tokens]
    server = scripted(answer, family="lcp")
    run = answered(nbstream.Endpoint(server.url(), "m", tokenizer=tokenizer), alternatives=2)
    branch = run.branch(2, "\n")
    assert branch.wait(30), branch.error
    assert server.requests[-1]["prompt"].endswith("<|end_header_id|>\n\nRed and\n")
    continuation = branch.record["continuation"]
    assert continuation["prompt_text"] == server.requests[-1]["prompt"]
    assert continuation["confirmed"] is False
    assert any("trims it" in warning for warning in branch.record["warnings"])
    # vLLM renders the prefix with its own template: whitespace at its end is not confirmed.
    server = scripted(answer)
    run = answered(nbstream.Endpoint(server.url(), "m"), alternatives=2)
    branch = run.branch(2, "\n")
    assert branch.wait(30), branch.error
    assert branch.record["continuation"]["confirmed"] is False
    assert any("ends in whitespace" in note for note in branch.record["warnings"])
    branch = run.branch(2, " green")
    assert branch.wait(30), branch.error
    assert branch.record["continuation"]["confirmed"] is True


def test_an_endpoint_refuses_a_tokenizer_that_cannot_render_a_conversation():
    from transformers import AutoTokenizer

    from nbstream.models import default_model_dir

    url = "http://127.0.0.1:9/v1"  # nothing is sent
    with pytest.raises(TypeError, match=r"AutoTokenizer\.from_pretrained"):
        nbstream.Endpoint(url, "m", tokenizer="HuggingFaceTB/SmolLM2-135M-Instruct")
    with pytest.raises(TypeError, match="apply_chat_template"):
        nbstream.Endpoint(url, "m", tokenizer=5)
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    tokenizer.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        nbstream.Endpoint(url, "m", tokenizer=tokenizer)


def test_a_rerun_of_a_server_branch_is_that_branch_again_with_its_trace(loopback, no_leftover_runs):
    endpoint = nbstream.Endpoint(loopback.url("vllm", "rerunbranch"), "m")
    run = answered(endpoint, alternatives=2, temperature=0)
    branch = run.branch(2, " green")
    assert branch.wait(30), branch.error
    record = json.loads(json.dumps(branch.record))
    again = nbstream.rerun(record, nbstream.Endpoint(loopback.url("vllm", "rerunbranch"), "m"))
    assert again.wait(30), again.error
    assert again.result == "Red and green yellow."
    # The tokens after the prefix are recorded; the prefix has none, and says so.
    assert [step.text for step in again.trace] == [" yellow", "."]
    assert "its record" in again.trace.incomplete
    with pytest.raises(ValueError, match="branch from the original run"):
        again.branch(0, " pink")
    rerecord = json.loads(json.dumps(again.record))
    assert rerecord["branch"] == record["branch"]  # step, tokens, prefix, parent's record
    third = nbstream.rerun(rerecord, nbstream.Endpoint(loopback.url("vllm", "rerunbranch"), "m"))
    assert third.wait(30), third.error
    assert loopback.posts("rerunbranch")[-1] == loopback.posts("rerunbranch")[-2]
    assert third.result == branch.result


def test_a_rerun_of_a_local_branch_records_that_branch_again(no_leftover_runs):
    from nbstream.testing import tiny_model

    model, tokenizer = tiny_model()
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=6, alternatives=3)
    assert run.wait(60), run.error
    branch = run.branch(2, run.trace[2].alternatives[1])
    assert branch.wait(60), branch.error
    record = json.loads(json.dumps(branch.record))
    again = nbstream.rerun(record, model, tokenizer)
    assert again.wait(60), again.error
    assert again.token_ids == branch.token_ids
    assert json.loads(json.dumps(again.record))["branch"] == record["branch"]


def test_more_top_logprobs_than_asked_are_cut_to_k_and_far_more_stop_the_trace(
    scripted, no_leftover_runs
):
    many = [f"w{i}" for i in range(6)]
    server = scripted([chunk("w5", {"content": [entry("w5", many)]})])
    run = answered(nbstream.Endpoint(server.url(), "m"), alternatives=2)
    # The 2 asked for, best first, and the chosen token's own entry (6th in the list).
    assert [alt.text for alt in run.trace[0].alternatives] == ["w0", "w1", "w5"]
    flood = [f"w{i}" for i in range(100)]
    server = scripted([chunk("w0", {"content": [entry("w0", flood)]})])
    run = answered(nbstream.Endpoint(server.url(), "m"), alternatives=2)
    assert run.result == "w0" and len(run.trace) == 0
    assert "100 top_logprobs for a token, asked for 2" in run.trace.incomplete


def test_the_record_says_which_vllm_sends_the_models_own_logprobs(loopback, no_leftover_runs):
    run = answered(nbstream.Endpoint(loopback.url("vllm", "meaning"), "m"), alternatives=2)
    meaning = run.record["trace"]["meaning"]
    assert "V1 engine" in meaning and "vLLM < 0.10" in meaning
