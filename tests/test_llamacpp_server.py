"""nbstream.Endpoint against a second real server: llama-cpp-python's (``make llama-cpp``).

The server (``python -m llama_cpp.server``, started once for the module through
nbstream.testing.servers.LlamaCppServer) serves the embedded default model's own GGUF. It differs
from ``transformers serve`` in the ways measured here: a second request ends the stream in
progress, its sampling fields have llama.cpp's names and unknown ones are dropped without a
word, any model name is answered by its one model, it sends no usage, a prompt over its
context ends the stream with nothing, and the same greedy request can give another text
(its prompt cache). Each test shows what a user of nbstream sees there.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator

import pytest

import nbstream
from nbstream.testing.servers import LlamaCppServer

COLORS = "Name two colors."
STORY = "Write a very long story about a lighthouse keeper and a cat."
#: The context the module's server is started with (tokens): small, so that a prompt over
#: it is quick to make.
N_CTX = 1024


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaCppServer]:
    with LlamaCppServer(n_ctx=N_CTX) as running:
        yield running
    assert running.pid is None  # closed: the process is gone


def until_text(run: nbstream.Generation, timeout: float = 120.0) -> None:
    """Block until the run has shown some text (fails if it ends or never does)."""
    deadline = time.monotonic() + timeout
    while not run.partial_text:
        assert not run.done, f"the run ended {run.status} before any text: {run.error}"
        assert time.monotonic() < deadline, "no text from the server"
        time.sleep(0.01)


def test_the_server_is_recognised_and_runs_one_request_at_a_time(llama, no_leftover_runs):
    endpoint = llama.endpoint()
    assert endpoint.family == "llama-cpp-python"
    assert endpoint.concurrent is False
    first = nbstream.stream(endpoint, None, STORY, max_new_tokens=60)
    second = nbstream.stream(llama.endpoint(), None, COLORS, max_new_tokens=20)
    # Sent at once, the second would end the first (test below); queued, both complete.
    for run in (first, second):
        assert run.wait(120), run.error
        assert run.metrics["finish_reason"] in ("eos", "length")
    assert second.metrics["queued_s"] > 0
    record = first.record
    assert record["server"]["family"] == "llama-cpp-python"
    assert record["server"]["how"] == "detected" and record["server"]["concurrent"] is False


def test_a_compare_of_three_columns_completes_every_column(llama, no_leftover_runs):
    # The case: on this server a CompareWidget completed 1 column of 3.
    compare = nbstream.CompareWidget(
        llama.endpoint(),
        None,
        COLORS,
        settings=[{"temperature": 0}, {"temperature": 0.7}, {"temperature": 1.0}],
        max_new_tokens=30,
        same_seed=True,
    )
    runs = compare.generate()
    for run in runs:
        assert run.wait_done(180), "a column never ended"
    assert [run.status for run in runs] == ["complete"] * 3, [str(r.error) for r in runs]
    assert all(run.result for run in runs)
    compare.close()


def test_sent_at_once_a_second_request_ends_the_first_and_the_message_says_why(
    llama, no_leftover_runs
):
    endpoint = llama.endpoint(concurrent=True)
    first = nbstream.stream(endpoint, None, STORY, max_new_tokens=2000)
    until_text(first)
    second = nbstream.stream(endpoint, None, COLORS, max_new_tokens=10)
    assert second.wait(120)
    assert first.wait_done(120)
    assert first.status == "failed" and first.result is None and first.partial_text
    message = str(first.error)
    assert "without a finish_reason" in message
    assert "another request to the same server started while this one streamed" in message
    assert "Endpoint(..., concurrent=False)" in message


def test_repetition_penalty_reaches_the_server_as_repeat_penalty(llama, no_leftover_runs):
    endpoint = llama.endpoint()

    def greedy(**settings: float) -> nbstream.Generation:
        run = nbstream.stream(endpoint, None, COLORS, max_new_tokens=40, temperature=0, **settings)
        assert run.wait(120), run.error
        return run

    greedy()  # the prompt's first request (its prompt cache then holds it, see below)
    plain = greedy().result
    # Before, nbstream sent repetition_penalty, which this server drops: both equalled plain.
    for penalty in (2.0, 0.5):
        run = greedy(repetition_penalty=penalty)
        assert run.result != plain, penalty
        assert run.record["settings"]["repetition_penalty"] == penalty
        assert run.record["settings_unconfirmed"] == {}


def test_the_record_says_when_the_model_asked_for_is_not_the_servers(
    llama, caplog, no_leftover_runs
):
    caplog.set_level(logging.WARNING, logger="nbstream")
    endpoint = nbstream.Endpoint(llama.base_url, "no-such-model")
    run = nbstream.stream(endpoint, None, COLORS, max_new_tokens=8, temperature=0)
    assert run.wait(120)  # the server answers any name with its one model
    record = json.loads(json.dumps(run.record))
    assert record["model"]["name"] == "no-such-model"
    # It echoes the name asked for in every chunk; its model list says what it has.
    assert record["model"]["answered_by"] == "no-such-model"
    assert llama.model in " ".join(record["warnings"])
    assert "does not list the model asked for" in " ".join(record["warnings"])
    assert [r for r in caplog.records if "does not list the model" in r.getMessage()]
    # With the right name, no such warning.
    right = nbstream.stream(llama.endpoint(), None, COLORS, max_new_tokens=8, temperature=0)
    assert right.wait(120)
    assert right.record["model"]["answered_by"] == llama.model
    assert not [w for w in right.record["warnings"] if "does not list" in w]


def test_without_usage_tokens_are_unknown_and_say_why(llama, no_leftover_runs):
    run = nbstream.stream(llama.endpoint(), None, COLORS, max_new_tokens=12, temperature=0)
    assert run.wait(120)
    metrics = run.metrics
    assert metrics["tokens"] is None and metrics["tokens_per_s"] is None
    assert "include_usage" in metrics["tokens_note"]
    # Counted as what they are: the events with text, and every event.
    assert 0 < metrics["text_chunks"] <= metrics["chunks"]
    assert f"{metrics['text_chunks']} chunks of text" in metrics["tokens_note"]
    assert run.record["metrics"]["tokens_note"] == metrics["tokens_note"]


def test_a_prompt_over_the_context_says_so_with_its_length(llama, no_leftover_runs):
    from transformers import AutoTokenizer

    from nbstream.models import default_model_dir

    prompt = "word " * (N_CTX + 200)
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    expected_tokens = len(
        tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=True, add_generation_prompt=True
        )
    )
    for options, words in [
        ({}, [f"{len(prompt):,} characters"]),
        ({"tokenizer": tokenizer}, [f"{len(prompt):,} characters", f"{expected_tokens:,} tokens"]),
    ]:
        run = nbstream.stream(llama.endpoint(**options), None, prompt, max_new_tokens=10)
        assert run.wait_done(120)
        assert run.status == "failed" and run.partial_text == ""
        message = str(run.error)
        assert "the prompt may be longer than the server's context" in message
        for word in words:
            assert word in message


def test_a_wrong_base_url_names_the_url_to_look_at(llama, no_leftover_runs):
    root = llama.base_url.removesuffix("/v1")
    run = nbstream.stream(nbstream.Endpoint(root, llama.model), None, COLORS, max_new_tokens=5)
    assert run.wait_done(60) and run.status == "failed"
    message = str(run.error)
    assert "HTTP 404" in message
    assert f"GET {root}/models lists what the server has" in message
    assert "{base_url}" not in message


def test_the_record_and_rerun_say_the_same_request_may_give_another_text(
    llama, caplog, no_leftover_runs
):
    run = nbstream.stream(llama.endpoint(), None, COLORS, max_new_tokens=20, temperature=0)
    assert run.wait(120)
    record = json.loads(json.dumps(run.record))
    assert record["server"]["reproducible"] is False
    assert [w for w in record["warnings"] if "may not give this text again" in w]
    caplog.set_level(logging.WARNING, logger="nbstream")
    again = nbstream.rerun(record, llama.endpoint())
    assert again.wait(120)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert [m for m in warned if "the rerun may not give the same text" in m], warned


def test_alternatives_fill_the_trace_with_the_servers_own_numbers(llama, no_leftover_runs):
    run = nbstream.stream(
        llama.endpoint(), None, COLORS, max_new_tokens=24, temperature=0, alternatives=5
    )
    assert run.wait(120), run.error
    trace = run.trace
    assert trace.incomplete is None and len(trace) > 3
    # One record per token the server sent, spelling the answer.
    assert "".join(step.text for step in trace) == run.result
    for step in trace:
        assert step.id is None and 0 < step.prob <= 1
        logprobs = [alt.logprob for alt in step.alternatives]
        assert logprobs == sorted(logprobs, reverse=True) and all(lp <= 0 for lp in logprobs)
        # Its top list is keyed by text and always holds the chosen token (added when it is
        # not in the top k), with the same number: at most k + 1 entries.
        texts = [alt.text for alt in step.alternatives]
        assert 1 <= len(texts) <= 6 and step.text in texts
        assert step.alternatives[texts.index(step.text)].logprob == step.logprob
        assert step.rank == 1 + sum(lp > step.logprob for lp in logprobs)
    record = json.loads(json.dumps(run.record))
    assert record["trace"]["records"] == len(trace) and record["trace"]["incomplete"] is None
    assert "logits_to_logprobs" in record["trace"]["meaning"]


def test_a_branch_continues_the_answer_so_far_through_the_completions_api(llama, no_leftover_runs):
    from transformers import AutoTokenizer

    from nbstream.backends.remote import transport
    from nbstream.models import default_model_dir

    run = nbstream.stream(
        llama.endpoint(), None, COLORS, max_new_tokens=24, temperature=0, alternatives=3
    )
    assert run.wait(120), run.error
    step = 6  # mid-sentence: a fresh answer would start again from its first word
    other = run.trace[step].alternatives[1]
    prefix = "".join(record.text for record in run.trace[:step]) + other.text
    # Its chat API would start a new answer: without the tokenizer to render the
    # conversation for /v1/completions, branch is refused before any request.
    mine = transport.traffic.begin(llama.base_url)
    with pytest.raises(ValueError, match="needs the model's tokenizer"):
        run.branch(step, other)
    assert transport.traffic.since(llama.base_url, mine) == 0
    # With it, the same answer (greedy) branches there.
    endpoint = llama.endpoint(tokenizer=AutoTokenizer.from_pretrained(default_model_dir()))
    run = nbstream.stream(endpoint, None, COLORS, max_new_tokens=24, temperature=0, alternatives=3)
    assert run.wait(120), run.error
    other = run.trace[step].alternatives[1]
    prefix = "".join(record.text for record in run.trace[:step]) + other.text
    branch = run.branch(step, other)
    assert branch.wait(120), branch.error
    text = branch.result
    assert text.startswith(prefix) and len(text) > len(prefix)
    # The server continued the text: what follows the prefix is no new answer.
    assert not text[len(prefix) :].lstrip().startswith(run.result[:12])
    assert "".join(record.text for record in branch.trace) == text
    assert branch.trace[step].forced and branch.trace[step].text == other.text
    assert all(0 < record.prob <= 1 for record in branch.trace[step + 1 :])
    record = json.loads(json.dumps(branch.record))
    assert record["continuation"]["how"] == "completions"
    assert record["continuation"]["prompt_text"].endswith(prefix)
    assert record["branch"]["prefix_text"] == prefix
