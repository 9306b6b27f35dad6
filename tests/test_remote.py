"""nbstream.Endpoint: streaming from an OpenAI-compatible server (nbstream/backends/remote/).

Against a real ``transformers serve`` of the embedded default model (started once for the
module, through nbstream.testing.servers, whose probe logs each generation's end on the server's
side): text equal to a greedy local run, finish reasons, usage tokens, Stop that makes the
server stop generating, the widget. Faults the real server cannot produce on demand (error
statuses, a dropped connection, a malformed event, a stall) come from the fake server of
fake_server.py on loopback (the ``fake`` fixture).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import logging
import re
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import hypothesis
import pytest
from fake_server import PIECES, REASONING, USAGE, Fake, serving
from helpers import fail
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

import nbstream
from nbstream import generation
from nbstream.backends.remote import EndpointError
from nbstream.backends.remote import endpoint as remote_endpoint
from nbstream.testing.servers import LocalServer, free_port

KEY = "sk-nbstream-test-9f3c2a7e51"
COLORS = "Name two colors."
STORY = "Write a very long story about a lighthouse keeper and a cat."


# -- the real server ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    with LocalServer() as running:
        yield running


def until_text(run: nbstream.Generation, timeout: float = 120.0) -> None:
    """Block until the run has shown some text (fails if it ends or never does)."""
    deadline = time.monotonic() + timeout
    while not run.partial_text:
        assert not run.done, f"the run ended {run.status} before any text: {run.error}"
        assert time.monotonic() < deadline, "no text from the server"
        time.sleep(0.01)


@pytest.mark.parametrize(("max_new_tokens", "reason"), [(40, "eos"), (5, "length")])
def test_text_equals_a_greedy_local_run(
    server, real_model, greedy, no_leftover_runs, max_new_tokens, reason
):
    model, tokenizer = real_model
    ids, expected = greedy(model, tokenizer, COLORS, max_new_tokens)
    run = nbstream.stream(
        server.endpoint(), None, COLORS, max_new_tokens=max_new_tokens, temperature=0
    )
    chunks = list(run)
    assert run.status == "complete"
    assert run.result == "".join(chunks) == expected
    metrics = run.metrics
    assert metrics["finish_reason"] == reason
    # tokens: the server's usage count, which is the local run's number of new ids.
    assert metrics["tokens"] == len(ids)
    assert metrics["chunks"] >= len(chunks) + 1  # the text's events, then the closing one
    assert 0 < metrics["ttft_s"] <= metrics["elapsed_s"]

    record = json.loads(json.dumps(run.record))
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": COLORS}], tokenize=False, add_generation_prompt=True
    )
    assert record["prompt_tokens"] == len(
        tokenizer(rendered, add_special_tokens=False)["input_ids"]
    )
    assert record["model"]["class"] == "Endpoint"
    assert record["model"]["name"] == server.model
    assert record["model"]["base_url"] == server.base_url
    assert record["settings"]["max_new_tokens"] == max_new_tokens
    assert record["settings"]["do_sample"] is False
    assert record["status"] == "complete" and record["metrics"]["chunks"] == metrics["chunks"]
    if reason == "length":  # (the shorter run) its record starts it again on the endpoint
        assert nbstream.rerun(record, server.endpoint()).wait(120) == expected
    else:  # a stop string cuts the same answer; nbstream matches it and closes the stream
        assert "color red" in expected
        cut = nbstream.stream(
            server.endpoint(), None, COLORS, max_new_tokens=40, temperature=0, stop=["red"]
        )
        assert cut.wait(120) == expected[: expected.index("red")]
        assert cut.metrics["finish_reason"] == "stop"


def test_stop_cancels_and_the_server_stops_generating(server, no_leftover_runs):
    seen = len(server.lines)
    run = nbstream.stream(server.endpoint(), None, STORY, max_new_tokens=4000)
    until_text(run)
    assert run.stop()
    assert run.wait_done(60)
    assert run.status == "cancelled"
    assert run.result is None and run.partial_text
    assert run.metrics["finish_reason"] == "cancelled"
    assert run.metrics["tokens"] is None  # no usage comes on a stream that was closed
    with pytest.raises(nbstream.GenerationCancelled):
        run.wait()

    # The server's own log: its generation was aborted, far short of max_new_tokens.
    index, how, tokens, _ = server.generation_end(4000, after=seen, timeout=120)
    assert how == "cancelled" and tokens < 4000
    # And it is free: the next request is served, and its generation runs to its end.
    nxt = nbstream.stream(server.endpoint(), None, COLORS, max_new_tokens=3, temperature=0)
    assert nxt.wait(120)
    assert nxt.metrics["tokens"] == 3
    _, how, tokens, _ = server.generation_end(3, after=index + 1, timeout=120)
    assert (how, tokens) == ("finished", 3)


def test_widget_on_an_endpoint_completes_then_stops(server, no_leftover_runs):
    w = nbstream.StreamWidget(server.endpoint(api_key=KEY), max_new_tokens=40, temperature=0)
    run = w.generate(COLORS)
    text = w.wait(120)
    assert w.status == "complete" and w.result == text == run.result and text
    assert w.metrics["finish_reason"] == "eos" and w.metrics["chunks"] > 0
    assert w.error_info is None

    seen = len(server.lines)
    run = w.generate(STORY, max_new_tokens=3000)
    until_text(run)
    w._handle_message(w, {"type": "stop"}, [])  # the view's Stop button
    with pytest.raises(nbstream.GenerationCancelled):
        w.wait(60)
    assert w.status == "cancelled" and w.result is None and w.partial_text
    _, how, tokens, _ = server.generation_end(3000, after=seen, timeout=120)
    assert how == "cancelled" and tokens < 3000
    assert KEY not in json.dumps(w.get_state(), default=str)
    w.close()


@pytest.mark.parametrize(
    ("options", "settings", "words"),
    [
        # Not in the OpenAI protocol: told it is an unidentified server, nbstream sends top_k
        # under vLLM's name, which this server refuses (it takes it in a generation_config).
        (
            {"server": "generic"},
            {"top_k": 5},
            ["HTTP 422", "Unexpected fields", "top_k", "extension field", "Endpoint(server="],
        ),
        # The server is pinned to one model and says so.
        ({"model": "no-such-model"}, {}, ["HTTP 400", "Server is pinned to", "no-such-model"]),
    ],
)
def test_a_rejected_request_fails_with_the_servers_words(
    server, no_leftover_runs, options, settings, words
):
    endpoint = nbstream.Endpoint(
        server.base_url,
        options.get("model", server.model),
        api_key=KEY,
        server=options.get("server"),
    )
    run = nbstream.stream(endpoint, None, COLORS, max_new_tokens=5, **settings)
    assert run.wait_done(60)
    assert run.status == "failed" and run.result is None
    message = str(run.error)
    assert isinstance(run.error, EndpointError)
    for word in words:
        assert word in message
    assert KEY not in message


def test_transformers_serve_is_told_to_sample_and_takes_top_k(server, no_leftover_runs):
    # transformers serve decodes greedily at any temperature unless its GenerationConfig
    # says do_sample, and refuses a top_k field: nbstream sends both in a generation_config.
    endpoint = server.endpoint()
    assert endpoint.family == "transformers"

    def answer(**settings: Any) -> nbstream.Generation:
        run = nbstream.stream(endpoint, None, STORY, max_new_tokens=24, **settings)
        assert run.wait(120), run.error
        return run

    greedy = answer(temperature=0).result
    sampled = answer(temperature=1.5, seed=3)
    assert sampled.result != greedy  # it sampled, as its record says
    assert sampled.record["settings"]["do_sample"] is True
    assert answer(temperature=1.5, seed=3).result == sampled.result  # and its seed held
    # top_k=1 leaves only the favourite token: sampling then gives the greedy text.
    narrow = answer(temperature=1.5, seed=3, top_k=1)
    assert narrow.result == greedy
    assert narrow.record["settings"]["top_k"] == 1
    assert narrow.record["server"]["family"] == "transformers"
    assert narrow.record["settings_unconfirmed"] == {} and narrow.record["warnings"] == []


def test_two_runs_on_transformers_serve_wait_their_turn_in_the_notebook(server, no_leftover_runs):
    # transformers serve generates one request at a time: a second request got its first
    # chunk, then nothing until the first was done (long enough, for a long first answer,
    # to run out its read timeout). nbstream queues it instead, where it shows queued.
    endpoint = server.endpoint()
    assert endpoint.concurrent is False
    first = nbstream.stream(endpoint, None, STORY, max_new_tokens=30, temperature=0)
    until_text(first)
    second = nbstream.stream(server.endpoint(), None, COLORS, max_new_tokens=5)
    assert first.wait(180) and second.wait(180), second.error
    assert second.metrics["queued_s"] > 0  # it waited for the first in the notebook
    assert second.metrics["finish_reason"] == "length"


def test_the_api_key_is_never_shown(server, fake, caplog, no_leftover_runs):
    caplog.set_level(logging.DEBUG)  # every logger: nbstream's, httpx's, httpcore's
    endpoint = server.endpoint(api_key=KEY)
    assert KEY not in repr(endpoint) and KEY not in str(endpoint)
    assert "api_key='***'" in repr(endpoint)
    assert KEY not in repr(vars(endpoint))
    run = nbstream.stream(endpoint, None, COLORS, max_new_tokens=5, temperature=0)
    assert run.wait(120)
    assert KEY not in repr(run)
    assert KEY not in json.dumps(run.record)
    # A failed run too: the fake server's 401 body echoes the Authorization header it got.
    refused = nbstream.Endpoint(fake.url("401"), "fake-model", api_key=KEY)
    w = nbstream.StreamWidget(refused)
    w.generate("Hi")
    with pytest.raises(nbstream.GenerationFailed) as failed:
        w.wait(60)
    assert "Incorrect API key provided: Bearer ***" in str(w.error)
    shown = [str(failed.value), w.traceback, json.dumps(w.record), repr(w.run)]
    shown.append(json.dumps(w.get_state(), default=str))
    assert not [text for text in shown if KEY in text]
    w.close()
    assert caplog.records  # httpx did log the requests
    assert not [r for r in caplog.records if KEY in r.getMessage()]


# -- the fake server: faults on demand ------------------------------------------------------


@pytest.fixture
def stall(fake) -> Iterator[Fake]:
    fake.stalled.clear()
    fake.client_gone.clear()
    fake.release.clear()
    yield fake
    fake.release.set()


@pytest.mark.parametrize(
    ("scenario", "words"),
    [
        ("401", ["HTTP 401", "Incorrect API key provided", "api_key="]),
        ("404", ["HTTP 404", "The model `nope` does not exist", "base_url", "/404/v1/models"]),
        ("429", ["HTTP 429", "Rate limit reached for requests", "wait 7 s"]),
        ("500", ["HTTP 500", "CUDA out of memory", "its log says why"]),
    ],
)
def test_an_error_status_fails_with_the_servers_text(fake, no_leftover_runs, scenario, words):
    endpoint = nbstream.Endpoint(fake.url(scenario), "fake-model", api_key=KEY)
    run = nbstream.stream(endpoint, None, "Hi")
    message = fail(run)
    assert isinstance(run.error, EndpointError) and run.error.status == int(scenario)
    for word in words:
        assert word in message
    assert "{base_url}" not in message
    assert run.partial_text == ""
    # The 401 body echoes the Authorization header: the key is blotted out everywhere.
    assert KEY not in message and KEY not in json.dumps(run.record)


@pytest.mark.parametrize(
    ("scenario", "words"),
    [
        ("drop", ["connection to the server dropped mid-stream", "partial_text"]),
        ("garbage", ["malformed event", "this is not json"]),
        ("error_event", ["the server reported an error mid-stream", "generation crashed: boom"]),
        ("nofinish", ["without a finish_reason", "partial_text"]),
        ("filter", ["finish_reason='content_filter'"]),
    ],
)
def test_a_broken_stream_fails_keeping_its_text_apart(fake, no_leftover_runs, scenario, words):
    run = nbstream.stream(nbstream.Endpoint(fake.url(scenario), "fake-model"), None, "Hi")
    message = fail(run)
    for word in words:
        assert word in message
    assert run.partial_text == "".join(PIECES)
    assert run.metrics["finish_reason"] == "error"


def test_connection_refused_says_what_to_check(no_leftover_runs):
    url = f"http://127.0.0.1:{free_port()}/v1"
    message = fail(nbstream.stream(nbstream.Endpoint(url, "m", api_key=KEY), None, "Hi"))
    assert "cannot connect to" in message and url in message
    assert "is the server running" in message and KEY not in message


def test_not_an_event_stream_says_so(fake, no_leftover_runs):
    message = fail(nbstream.stream(nbstream.Endpoint(fake.url("notsse"), "m"), None, "Hi"))
    assert "did not answer with an event stream" in message and "application/json" in message


def test_a_stalled_stream_fails_at_the_budget_and_is_closed(stall, no_leftover_runs):
    endpoint = nbstream.Endpoint(stall.url("stall"), "fake-model")
    run = nbstream.stream(endpoint, None, "Hi", budget_s=1.0)
    message = fail(run)
    assert run.metrics["finish_reason"] == "timeout" and isinstance(run.error, TimeoutError)
    assert "budget of 1.0 s" in message
    assert run.partial_text == "".join(PIECES)
    assert stall.client_gone.wait(30), "the connection was left open"


def test_a_stalled_stream_fails_at_the_read_timeout(stall, no_leftover_runs):
    endpoint = nbstream.Endpoint(stall.url("stall"), "fake-model", timeout=0.5)
    message = fail(nbstream.stream(endpoint, None, "Hi"))
    assert "sent nothing for 0.5 s" in message and "timeout=" in message
    assert stall.client_gone.wait(30)


def test_concurrent_runs_on_one_endpoint_do_not_queue_in_the_notebook(stall, no_leftover_runs):
    endpoint = nbstream.Endpoint(stall.url("stall"), "fake-model", concurrent=True)
    assert endpoint.concurrent
    first = nbstream.stream(endpoint, None, "Hi")
    second = nbstream.stream(endpoint, None, "Hi")
    # Both requests are on the wire at once: the server schedules them.
    assert first.status == second.status == "running"
    until_text(first)
    until_text(second)
    for run in (first, second):
        run.stop()
        assert run.wait_done(30) and run.status == "cancelled"


@pytest.mark.parametrize("how", ["default", "named"])
def test_an_unidentified_server_gets_one_request_at_a_time(stall, no_leftover_runs, how):
    # The fake server does not answer GET /models: nbstream cannot tell what it is, and one
    # request at a time is the choice that cannot lose an answer (llama-cpp-python's server
    # ends the stream in progress when a second request arrives). A second Endpoint object
    # on the same server shares the queue.
    options = {"server": "llama-cpp-python"} if how == "named" else {}
    endpoint = nbstream.Endpoint(stall.url("stall"), "fake-model", **options)
    assert endpoint.family == ("llama-cpp-python" if how == "named" else "generic")
    assert endpoint.concurrent is False
    before = len(stall.requests)
    first = nbstream.stream(endpoint, None, "Hi")
    other = nbstream.Endpoint(stall.url("stall"), "fake-model", **options)
    second = nbstream.stream(other, None, "Hi")
    until_text(first)  # the first streams, and stalls: it holds the server
    assert second.status == "queued" and len(stall.requests) == before + 1
    first.stop()
    assert first.wait_done(30) and first.status == "cancelled"
    until_text(second)  # then the second is sent
    assert second.metrics["queued_s"] > 0
    second.stop()
    assert second.wait_done(30) and second.status == "cancelled"


def test_stop_while_the_server_sends_nothing(stall, no_leftover_runs):
    run = nbstream.stream(nbstream.Endpoint(stall.url("stall"), "fake-model"), None, "Hi")
    assert stall.stalled.wait(30)
    until_text(run)
    run.stop()
    assert run.wait_done(30)
    assert run.status == "cancelled" and run.partial_text == "".join(PIECES)
    assert stall.client_gone.wait(30), "Stop left the connection open"


@pytest.mark.parametrize(("scenario", "reason"), [("ok", "eos"), ("length", "length")])
def test_finish_reasons_map_to_the_engines(fake, no_leftover_runs, scenario, reason):
    run = nbstream.stream(nbstream.Endpoint(fake.url(scenario), "fake-model"), None, "Hi")
    assert run.wait(60) == "".join(PIECES)
    metrics = run.metrics
    assert metrics["finish_reason"] == reason
    assert metrics["tokens"] == USAGE["completion_tokens"]
    # Events: the opening one, three pieces, the finish, the usage ([DONE] is not one).
    assert metrics["chunks"] == 6
    assert run.record["prompt_tokens"] == USAGE["prompt_tokens"]


@pytest.mark.parametrize(
    ("finish", "reason"),
    [
        # Text Generation Inference's names for the natural ends.
        ("eos_token", "eos"),
        ("stop_sequence", "stop"),
    ],
)
def test_tgi_finish_reasons_end_complete(fake, no_leftover_runs, finish, reason):
    endpoint = nbstream.Endpoint(fake.url(f"finish-{finish}"), "fake-model")
    run = nbstream.stream(endpoint, None, "Hi")
    assert run.wait(60) == "".join(PIECES)
    assert run.status == "complete" and run.metrics["finish_reason"] == reason


@pytest.mark.parametrize(
    ("finish", "words"),
    [
        ("tool_calls", ["finish_reason='tool_calls'", "called a tool"]),
        ("function_call", ["finish_reason='function_call'", "called a tool"]),
        ("content_filter", ["finish_reason='content_filter'", "content filter cut"]),
        ("abort", ["finish_reason='abort'", "aborted"]),
        ("error", ["finish_reason='error'", "its log"]),
        ("made_up_reason", ["finish_reason='made_up_reason'"]),
    ],
)
def test_a_finish_reason_that_ends_no_answer_fails_naming_it(fake, no_leftover_runs, finish, words):
    run = nbstream.stream(nbstream.Endpoint(fake.url(f"finish-{finish}"), "m"), None, "Hi")
    message = fail(run)
    for word in words:
        assert word in message
    assert run.partial_text == "".join(PIECES)


@pytest.mark.parametrize("timeout", [0.5, 60.0])
def test_a_stream_that_stalls_after_its_finish_reason_ends_complete(
    stall, no_leftover_runs, timeout
):
    # The finish_reason came, then nothing: no usage, no [DONE], the connection held open.
    # The answer is over. With a read timeout shorter than the grace, and with one far
    # longer than this test waits, the run ends complete and the connection is closed.
    endpoint = nbstream.Endpoint(stall.url("finish_stall"), "fake-model", timeout=timeout)
    run = nbstream.stream(endpoint, None, "Hi")
    assert run.wait_done(30), "the run waited on a finished answer"
    assert run.status == "complete", run.error
    assert run.result == "".join(PIECES) and run.metrics["finish_reason"] == "eos"
    assert run.metrics["tokens"] is None  # no usage came
    assert stall.client_gone.wait(30), "the connection was left open"


def test_rerun_on_an_endpoint_does_not_warn_about_prompt_tokens(fake, caplog, no_leftover_runs):
    endpoint = nbstream.Endpoint(fake.url("ok"), "fake-model")
    run = nbstream.stream(endpoint, None, "Hi", temperature=0)
    assert run.wait(60)
    record = json.loads(json.dumps(run.record))
    assert record["prompt_tokens"] == USAGE["prompt_tokens"]  # from the server's usage
    caplog.set_level(logging.WARNING, logger="nbstream")
    again = nbstream.rerun(record, endpoint)
    assert again.wait(60) == run.result
    # The server counts the prompt only once it answers: there is nothing to compare when
    # the rerun starts, so nothing to warn about.
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_expect_json_works_on_an_endpoint(fake, no_leftover_runs):
    run = nbstream.stream(nbstream.Endpoint(fake.url("json"), "m"), None, "Hi", expect="json")
    assert run.wait(60) == '{"a": [1, 2]}'
    assert run.value == {"a": [1, 2]}


def test_settings_map_onto_the_request(fake, no_leftover_runs):
    endpoint = nbstream.Endpoint(fake.url("ok") + "/", "fake-model", api_key=KEY)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    cases = [
        ("Hi", {}),
        ("Hi", {"do_sample": False, "temperature": 0.7}),
        (
            messages,
            {"max_new_tokens": 7, "temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": ["zz"]},
        ),
    ]
    for prompt, settings in cases:
        before = len(fake.requests)
        nbstream.stream(endpoint, None, prompt, **settings).wait(60)
        assert len(fake.requests) == before + 1
    (_, h1, default), (_, _, greedy), (_, _, full) = fake.requests[-3:]
    assert h1["Authorization"] == f"Bearer {KEY}"
    assert default["model"] == "fake-model" and default["stream"] is True
    assert default["stream_options"] == {"include_usage": True}
    assert default["messages"] == [{"role": "user", "content": "Hi"}]
    assert default["max_tokens"] == 256 and "temperature" not in default
    assert greedy["temperature"] == 0
    assert full["messages"] == messages
    assert {k: full[k] for k in ("max_tokens", "temperature", "top_p", "seed")} == {
        "max_tokens": 7,
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 3,
    }
    assert "stop" not in full  # matched by nbstream on the text, as for a local model


@pytest.mark.parametrize(
    ("listing", "family"),
    [
        ("vllm", "vllm"),
        ("sglang", "sglang"),
        ("tgi", "tgi"),
        ("llamacpp", "llama.cpp"),
        ("llamacpppython", "llama-cpp-python"),
        ("transformers", "transformers"),
        ("other", "generic"),
        (None, "generic"),  # no answer to GET /models
    ],
)
def test_the_server_says_what_it_is_once(fake, listing, family):
    scenario = "ok" if listing is None else f"ok+{listing}"
    before = fake.listings_served
    endpoint = nbstream.Endpoint(fake.url(scenario), "fake-model")
    assert endpoint.family == family
    # One at a time on the servers that do not serve two requests side by side.
    assert endpoint.concurrent is (family not in ("generic", "llama-cpp-python", "transformers"))
    # Asked once per server: another Endpoint on it does not ask again.
    again = nbstream.Endpoint(fake.url(scenario), "fake-model")
    assert again.family == family
    assert fake.listings_served == before + (0 if listing is None else 1)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The Endpoint's clock for its probe's back-off, frozen: ``clock[0] += s`` moves it."""
    now = [1000.0]
    monkeypatch.setattr(remote_endpoint, "_clock", lambda: now[0])
    return now


def test_a_server_that_was_not_up_yet_is_asked_again(clock, no_leftover_runs):
    # Used before its server listens: the probe fails, and so does the run. Once a vLLM
    # server is up, the same Endpoint sees it (branching, enable_thinking, concurrency).
    port = free_port()
    endpoint = nbstream.Endpoint(f"http://127.0.0.1:{port}/ok+vllm/v1", "fake-model")
    assert "cannot connect" in fail(nbstream.stream(endpoint, None, "Hi"))
    with serving(port=port) as up:
        clock[0] += remote_endpoint._PROBE_RETRY_S  # the next run, after the probe's short back-off
        run = nbstream.stream(endpoint, None, "Hi", enable_thinking=False)
        assert run.wait(60) == "".join(PIECES)
        assert endpoint.family == "vllm" and endpoint.concurrent and endpoint.can_continue
        assert run.record["server"]["family"] == "vllm"
        assert up.requests[-1][2]["chat_template_kwargs"] == {"enable_thinking": False}
        # The answer is kept: asked once, for good.
        clock[0] += 10 * remote_endpoint._PROBE_RETRY_S
        nbstream.stream(endpoint, None, "Hi").wait(60)
        assert up.listings_asked == 1


def test_a_server_that_cannot_answer_now_is_not_asked_at_every_use(fake, clock, no_leftover_runs):
    # GET /models answers 503: not an answer to keep. One run asks once (not once for each
    # check it makes), and uses in the back-off that follows do not ask again; after it, the
    # server is asked again (by a run, or a look at what it is).
    endpoint = nbstream.Endpoint(fake.url("ok+busy"), "fake-model")
    before = fake.listings_asked
    run = nbstream.stream(endpoint, None, "Hi", alternatives=2)
    assert run.wait(60) == "".join(PIECES)
    assert endpoint.family == "generic" and not endpoint.concurrent
    assert fake.listings_asked == before + 1
    clock[0] += remote_endpoint._PROBE_RETRY_S
    # A view asks whether it may offer branching under its lock: never a new request.
    assert endpoint.why_no_branch() is not None and not endpoint.can_continue
    assert fake.listings_asked == before + 1
    assert endpoint.family == "generic"
    assert fake.listings_asked == before + 2


def test_a_base_url_with_a_query_keeps_it_after_the_path(fake, no_leftover_runs):
    # Azure-style gateways take the API version as a query string on every request.
    base = fake.url("ok+vllm") + "?api-version=2024-06-01"
    run = nbstream.stream(nbstream.Endpoint(base, "fake-model"), None, "Hi")
    assert run.wait(60) == "".join(PIECES)
    root = "/ok+vllm/v1"
    assert fake.paths[-2:] == [
        f"{root}/models?api-version=2024-06-01",
        f"{root}/chat/completions?api-version=2024-06-01",
    ]
    assert "api-version" not in json.dumps(run.record)  # a query may carry a secret


def test_runs_on_a_concurrent_endpoint_leave_no_queue_behind(fake, no_leftover_runs):
    # Each run on a concurrent server has a queue of its own (it waits for no other): the
    # engine's queue table must let it go with the run.
    endpoint = nbstream.Endpoint(fake.url("ok"), "fake-model", concurrent=True)
    gc.collect()
    before = len(generation._queues) + len(generation._strong_queues)
    runs = []
    for _ in range(100):
        runs.append(nbstream.stream(endpoint, None, "Hi"))
        assert runs[-1].wait(60) == "".join(PIECES)
    del runs
    gc.collect()
    assert len(generation._queues) + len(generation._strong_queues) == before


@pytest.mark.parametrize(
    ("listing", "sent"),
    [
        ("vllm", {"top_k": 5, "repetition_penalty": 1.3}),
        ("sglang", {"top_k": 5, "repetition_penalty": 1.3}),
        ("llamacpp", {"top_k": 5, "repeat_penalty": 1.3}),
        ("llamacpppython", {"top_k": 5, "repeat_penalty": 1.3}),
        (
            "transformers",
            {"generation_config": '{"top_k": 5, "repetition_penalty": 1.3, "do_sample": true}'},
        ),
    ],
)
def test_settings_beyond_openai_take_each_servers_names(
    fake, no_leftover_runs, caplog, listing, sent
):
    caplog.set_level(logging.WARNING, logger="nbstream")
    endpoint = nbstream.Endpoint(fake.url(f"ok+{listing}"), "fake-model", concurrent=True)
    run = nbstream.stream(
        endpoint, None, "Hi", temperature=0.7, seed=1, top_k=5, repetition_penalty=1.3
    )
    assert run.wait(60)
    _, _, body = fake.requests[-1]
    assert {name: body.get(name) for name in sent} == sent
    others = {"top_k", "repetition_penalty", "repeat_penalty", "generation_config"} - set(sent)
    assert not others & set(body)
    record = run.record
    assert record["settings"]["top_k"] == 5 and record["settings"]["repetition_penalty"] == 1.3
    assert record["settings_unconfirmed"] == {}
    assert not [r for r in caplog.records if "unconfirmed" in r.getMessage()]


def test_a_setting_tgi_has_no_field_for_is_refused_before_sending(fake, no_leftover_runs):
    endpoint = nbstream.Endpoint(fake.url("ok+tgi"), "fake-model")
    before = len(fake.requests)
    for setting in ({"top_k": 5}, {"repetition_penalty": 1.3}):
        with pytest.raises(ValueError, match="Text Generation Inference has no") as refused:
            nbstream.stream(endpoint, None, "Hi", **setting)
        assert "drop" in str(refused.value)
    assert len(fake.requests) == before
    assert nbstream.stream(endpoint, None, "Hi", temperature=0).wait(60)  # the rest works


def test_a_server_that_may_drop_a_setting_never_has_it_recorded_as_applied(
    fake, no_leftover_runs, caplog
):
    # A server nbstream could not identify may ignore a field it does not know without a
    # word (llama-cpp-python dropped repetition_penalty): sent, but not recorded as applied.
    caplog.set_level(logging.WARNING, logger="nbstream")
    endpoint = nbstream.Endpoint(fake.url("ok+other"), "fake-model", concurrent=True)
    run = nbstream.stream(endpoint, None, "Hi", temperature=0, repetition_penalty=1.3, top_k=4)
    assert run.wait(60)
    _, _, body = fake.requests[-1]
    assert body["repetition_penalty"] == 1.3 and body["top_k"] == 4
    record = json.loads(json.dumps(run.record))
    assert record["settings"]["repetition_penalty"] is None and record["settings"]["top_k"] is None
    assert record["settings_unconfirmed"] == {"repetition_penalty": 1.3, "top_k": 4}
    assert record["server"]["family"] == "generic" and record["server"]["how"] == "unknown"
    warned = [r.getMessage() for r in caplog.records]
    assert [m for m in warned if "may have dropped them" in m and "server=" in m]
    assert [w for w in record["warnings"] if "may have dropped them" in w]
    # rerun sends the same request again, unconfirmed settings included.
    assert nbstream.rerun(record, endpoint).wait(60)
    _, _, again = fake.requests[-1]
    assert again["repetition_penalty"] == 1.3 and again["top_k"] == 4


def test_the_model_that_answered_is_recorded_and_a_different_one_warned_about(
    fake, no_leftover_runs, caplog
):
    caplog.set_level(logging.WARNING, logger="nbstream")
    same = nbstream.stream(nbstream.Endpoint(fake.url("ok"), "fake-model"), None, "Hi")
    assert same.wait(60)
    assert same.record["model"]["answered_by"] == "fake-model"
    assert same.record["warnings"] == []
    # The fake's chunks always say "fake-model", whatever was asked for.
    other = nbstream.stream(nbstream.Endpoint(fake.url("ok"), "other-model"), None, "Hi")
    assert other.wait(60)
    record = other.record
    assert record["model"]["name"] == "other-model"
    assert record["model"]["answered_by"] == "fake-model"
    (warning,) = record["warnings"]
    assert "'other-model'" in warning and "answered as 'fake-model'" in warning
    assert [r for r in caplog.records if r.getMessage() == warning]


def test_what_a_server_listed_for_one_key_is_not_read_with_another(fake, no_leftover_runs):
    # A key that shares a piece with the model's name: the list kept for it is scrubbed of
    # that key, and must neither warn its own run nor mangle another key's view.
    url = fake.url("ok+vllm") + "?case=two-keys"  # a server no other test has asked
    shared = nbstream.Endpoint(url, "fake-model", api_key="sk-x-fake-model-1")
    mine = nbstream.stream(shared, None, "Hi")
    assert mine.wait(60)
    assert mine.record["warnings"] == []
    before = fake.listings_served
    plain = nbstream.stream(nbstream.Endpoint(url, "fake-model"), None, "Hi")
    assert plain.wait(60)
    assert plain.record["warnings"] == []
    assert fake.listings_served == before + 1  # another key asks for its own list
    again = nbstream.stream(nbstream.Endpoint(url, "fake-model"), None, "Hi")
    assert again.wait(60)
    assert fake.listings_served == before + 1  # and only once


def test_without_usage_tokens_are_none_and_the_metrics_say_why(fake, no_leftover_runs):
    run = nbstream.stream(nbstream.Endpoint(fake.url("nousage"), "fake-model"), None, "Hi")
    assert run.wait(60) == "".join(PIECES)
    metrics = run.metrics
    assert metrics["tokens"] is None
    assert metrics["text_chunks"] == len(PIECES)  # the events with text; not tokens
    assert metrics["chunks"] == len(PIECES) + 2  # and the opening and closing events
    assert "include_usage" in metrics["tokens_note"]
    assert "3 chunks of text (chunks are not tokens)" in metrics["tokens_note"]
    # Everywhere the count is shown, it says chunks, never "tokens=None".
    from nbstream._console import format_metrics
    from nbstream.widgets.display import fallback_bundle

    assert format_metrics(metrics).startswith("3 chunks (no token count) · ")
    assert "chunks=3 (no token count)" in repr(run)
    assert "3 chunks (no token count)" in fallback_bundle("complete", "x", metrics)["text/plain"]
    with_usage = nbstream.stream(nbstream.Endpoint(fake.url("ok"), "fake-model"), None, "Hi")
    assert with_usage.wait(60)
    assert with_usage.metrics["tokens"] == USAGE["completion_tokens"]
    assert with_usage.metrics["tokens_note"] is None


@pytest.mark.parametrize(
    ("scenario", "words"),
    [
        (
            "empty",
            [
                "0 chunks",
                "the prompt may be longer than the server's context",
                "the prompt is 20 characters",
            ],
        ),
        # vLLM states its context in GET /models.
        ("empty+vllm", ["the prompt is 20 characters", "the server's context is 2,048 tokens"]),
    ],
)
def test_a_stream_with_nothing_in_it_names_the_context(fake, no_leftover_runs, scenario, words):
    endpoint = nbstream.Endpoint(fake.url(scenario), "fake-model")
    message = fail(nbstream.stream(endpoint, None, "Twenty characters!!!"))
    for word in words:
        assert word in message
    # Text came, then the stream ended: no word about the context.
    message = fail(nbstream.stream(nbstream.Endpoint(fake.url("nofinish"), "m"), None, "Hi"))
    assert "context" not in message and "see its log" in message


@pytest.mark.parametrize(("listing", "warned"), [("llamacpp", True), ("vllm", False)])
def test_a_server_whose_same_request_can_differ_says_so_in_record_and_rerun(
    fake, no_leftover_runs, caplog, listing, warned
):
    endpoint = nbstream.Endpoint(fake.url(f"ok+{listing}"), "fake-model")
    run = nbstream.stream(endpoint, None, "Hi", temperature=0)
    assert run.wait(60)
    record = json.loads(json.dumps(run.record))
    assert record["server"]["reproducible"] is (False if warned else None)
    notes = [w for w in record["warnings"] if "may not give this text again" in w]
    assert bool(notes) is warned
    caplog.set_level(logging.WARNING, logger="nbstream")
    assert nbstream.rerun(record, endpoint).wait(60)
    said = [
        r.getMessage() for r in caplog.records if "may not give the same text" in r.getMessage()
    ]
    assert bool(said) is warned


def test_bad_input_is_refused_before_any_request(fake, no_leftover_runs):
    endpoint = nbstream.Endpoint(fake.url("ok"), "fake-model")
    before = len(fake.requests)
    with pytest.raises(ValueError, match="empty"):
        nbstream.stream(endpoint, None, "  ")
    with pytest.raises(TypeError, match="unknown setting"):
        nbstream.stream(endpoint, None, "Hi", frequency_penalty=1.0)
    with pytest.raises(ValueError, match="contradicts"):
        nbstream.stream(endpoint, None, "Hi", temperature=0, do_sample=True)
    assert len(fake.requests) == before
    with pytest.raises(ValueError, match="http"):
        nbstream.Endpoint("127.0.0.1:8000/v1", "m")
    with pytest.raises(ValueError, match="model") as empty:
        nbstream.Endpoint("http://user:hunter2@127.0.0.1:8000/v1/", "")
    assert "GET http://127.0.0.1:8000/v1/models" in str(empty.value)
    assert "{base_url}" not in str(empty.value) and "hunter2" not in str(empty.value)
    with pytest.raises(ValueError, match="timeout"):
        nbstream.Endpoint("http://127.0.0.1:8000/v1", "m", timeout=0)


def test_a_url_with_credentials_is_never_shown():
    endpoint = nbstream.Endpoint("http://user:hunter2@127.0.0.1:9/v1?key=hunter2", "m")
    assert "hunter2" not in repr(endpoint)
    assert "hunter2" not in json.dumps(endpoint.describe())


def test_missing_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "httpx", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'nbstream\[remote\]'"):
        nbstream.Endpoint("http://127.0.0.1:8000/v1", "m")


def test_chat_widget_on_an_endpoint_sends_the_conversation(fake, no_leftover_runs):
    chat = nbstream.ChatWidget(nbstream.Endpoint(fake.url("ok"), "fake-model"), system="Be brief.")
    assert chat.generate("Hi").wait(60) == "".join(PIECES)
    assert chat.generate("More?").wait(60) == "".join(PIECES)
    _, _, body = fake.requests[-1]
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "".join(PIECES)},
        {"role": "user", "content": "More?"},
    ]
    chat.close()


# -- nbstream's handling of events, property-based -------------------------------------------
# nbstream's reader splits the bytes into events; these check what it makes of them, however
# the bytes are cut into reads: the same text and end, and a malformed event failing the run
# with an EndpointError (never a hang, never another exception escaping the reader).


@contextlib.contextmanager
def answered_with(reads: list[bytes]) -> Iterator[None]:
    """Every Endpoint request in the block gets ``reads`` as its body, one read each."""
    import httpx

    real = httpx.AsyncClient

    async def body() -> AsyncIterator[bytes]:
        for read in reads:
            yield read

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=body())

    def client(**options: Any) -> Any:
        return real(transport=httpx.MockTransport(answer), **options)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(httpx, "AsyncClient", client)
        yield


def chunk_event(content: str | None = None, finish: str | None = None, **extra: Any) -> Any:
    delta = {"role": "assistant"} if content is None and finish is None else {}
    if content is not None:
        delta["content"] = content
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


@st.composite
def wire_event(draw: st.DrawFn, data: Any) -> bytes:
    """One event as a server may write it: any line ending, optional space after the colon,
    comment, event and id lines, JSON on one line or over several data lines, with or
    without non-ASCII escaped (always escaped where a lone surrogate leaves no choice)."""
    eol = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    space = draw(st.sampled_from(["", " "]))
    text = data
    if not isinstance(data, str):
        indent = draw(st.sampled_from([None, 1]))
        text = json.dumps(data, ensure_ascii=draw(st.booleans()), indent=indent)
        if not text.isascii() and SURROGATE.search(text):
            text = json.dumps(data, indent=indent)
    lines = [f"data:{space}{line}" for line in text.split("\n")]
    extras = draw(st.lists(st.sampled_from([": keep-alive", "event: message", "id: 7"])))
    for extra in extras:
        lines.insert(draw(st.integers(0, len(lines))), extra)
    return (eol.join(lines) + eol + eol).encode()


SURROGATE = re.compile("[\ud800-\udfff]")


def utf16_pieces(text: str, cuts: list[int]) -> list[str]:
    """``text`` cut at UTF-16 code units, as a JavaScript server may: a character beyond
    U+FFFF can be split into its two surrogate halves."""
    units = text.encode("utf-16-le")
    points = [0, *sorted(2 * (c % (len(units) // 2 + 1)) for c in cuts), len(units)]
    return [units[a:b].decode("utf-16-le", "surrogatepass") for a, b in itertools.pairwise(points)]


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(points)]


def run_on(reads: list[bytes]) -> nbstream.Generation:
    with answered_with(reads):
        endpoint = nbstream.Endpoint("http://fake.invalid/v1", "m", server="generic")
        run = nbstream.stream(endpoint, None, "Hi")
        assert run.wait_done(30), "the run never ended"
    return run


@hypothesis.settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(st.text(max_size=6), max_size=6),
    finish=st.sampled_from(["stop", "length", "eos_token", "stop_sequence"]),
    with_text=st.booleans(),
    usage=st.booleans(),
    done=st.booleans(),
    utf16=st.lists(st.integers(0, 100), max_size=6),
    data=st.data(),
)
def test_any_chunking_of_a_stream_gives_the_same_text(
    pieces, finish, with_text, usage, done, utf16, data
):
    expected = "".join(pieces)
    if utf16:  # the server cut the text in UTF-16 code units rather than characters
        pieces = utf16_pieces(expected, utf16)
    events: list[Any] = [chunk_event()]
    events += [chunk_event(piece) for piece in pieces]
    if with_text and pieces:  # the last piece and the finish_reason in one event
        events[-1] = chunk_event(pieces[-1], finish)
    else:
        events.append(chunk_event(None, finish))
    if usage:
        events.append({"choices": [], "usage": USAGE})
    wire = b"".join(data.draw(wire_event(e)) for e in events)
    if done:
        wire += data.draw(wire_event("[DONE]"))
    cuts = data.draw(st.lists(st.integers(0, len(wire)), max_size=16))
    run = run_on(cut(wire, cuts))
    assert run.status == "complete", run.error
    assert run.result == expected
    mapped = {"stop": "eos", "length": "length", "eos_token": "eos", "stop_sequence": "stop"}
    assert run.metrics["finish_reason"] == mapped[finish]
    assert run.metrics["tokens"] == (USAGE["completion_tokens"] if usage else None)


def test_a_character_split_between_events_is_joined():
    # A server that cuts its text in UTF-16 code units (as JavaScript strings are) can send
    # the two halves of a character beyond U+FFFF in two events, as JSON escapes. A half
    # that never finds its pair becomes U+FFFD: the text stays valid Unicode, which the
    # notebook, the widget and the record need (a lone surrogate cannot be UTF-8 encoded).
    pieces = ["a\ud83d", "\ude00b", "\ude00c\ud83d"]
    events = [chunk_event(piece) for piece in pieces] + [chunk_event(None, "stop")]
    wire = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)
    run = run_on([wire])
    assert run.status == "complete", run.error
    assert run.result == "a\U0001f600b\ufffdc\ufffd"
    run.result.encode("utf-8")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def not_json(text: str) -> bool:
    """Malformed data: not JSON, and not what carries nothing (blank: no chunk at all)."""
    try:
        json.loads(text)
    except ValueError:
        return text.strip() not in ("[DONE]", "")
    return False


MALFORMED = st.one_of(
    # Not JSON at all, or JSON that is not an object.
    st.text(max_size=30).filter(not_json),
    # (A string is written raw: a blank one is an event that carries nothing.)
    JSON_VALUES.filter(
        lambda value: (
            not isinstance(value, dict) and (not isinstance(value, str) or not_json(value))
        )
    ),
    # An object without a choices list.
    st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=3).filter(
        lambda d: "error" not in d and not isinstance(d.get("choices"), list)
    ),
    # A choice, delta, content or finish_reason of the wrong kind.
    JSON_VALUES.filter(lambda v: not isinstance(v, dict)).map(lambda v: {"choices": [v]}),
    JSON_VALUES.filter(lambda v: v is not None and not isinstance(v, dict)).map(
        lambda v: {"choices": [{"index": 0, "delta": v}]}
    ),
    JSON_VALUES.filter(lambda v: v is not None and not isinstance(v, str)).map(
        lambda v: {"choices": [{"index": 0, "delta": {"content": v}}]}
    ),
    JSON_VALUES.filter(lambda v: v not in (None, "") and not isinstance(v, str)).map(
        lambda v: {"choices": [{"index": 0, "delta": {}, "finish_reason": v}]}
    ),
)


@hypothesis.settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.lists(st.text(max_size=6), max_size=3),
    bad=MALFORMED,
    data=st.data(),
)
def test_a_malformed_event_fails_the_run(before, bad, data):
    # Text, one malformed event, then a proper end: the run fails all the same, saying so,
    # and keeps the text it had apart.
    events: list[Any] = [chunk_event(piece) for piece in before]
    events += [bad, chunk_event(None, "stop"), "[DONE]"]
    wire = b"".join(data.draw(wire_event(e)) for e in events)
    cuts = data.draw(st.lists(st.integers(0, len(wire)), max_size=8))
    run = run_on(cut(wire, cuts))
    assert run.status == "failed", f"{bad!r} was taken for a proper event"
    assert isinstance(run.error, EndpointError), repr(run.error)
    assert "malformed event" in str(run.error)
    assert run.partial_text == "".join(before)


@pytest.mark.parametrize("scenario", ["reasoning", "reasoning-vllm"])
def test_a_reasoning_servers_thinking_is_kept_apart(fake, no_leftover_runs, scenario):
    """vLLM, SGLang and DeepSeek-style servers send the thinking in its own delta field
    (reasoning_content, or vLLM's newer reasoning): it is the run's thinking, never its text,
    and a stop string inside it does not end the run."""
    endpoint = nbstream.Endpoint(fake.url(scenario), "fake-model")
    run = nbstream.stream(endpoint, None, "2+2?", expect="json", stop=["STOP"])
    assert run.wait(60) == '{"answer": 4}' and run.value == {"answer": 4}
    assert run.thinking == "".join(REASONING)
    assert run.metrics["finish_reason"] == "eos" and run.record["thinking"] == run.thinking


def test_enable_thinking_goes_where_a_server_takes_it_and_is_refused_elsewhere(fake):
    vllm = nbstream.Endpoint(fake.url("ok+vllm"), "fake-model")
    run = nbstream.stream(vllm, None, "Hi", enable_thinking=False)
    run.wait(60)
    body = fake.requests[-1][2]
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    tgi = nbstream.Endpoint(fake.url("ok+tgi"), "fake-model")
    with pytest.raises(ValueError, match="takes no chat-template options"):
        nbstream.stream(tgi, None, "Hi", enable_thinking=True)
