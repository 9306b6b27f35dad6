"""run.trace (``alternatives=k``): per token, the model's own probability and its top k.

References are computed here, independently of nbstream: one forward pass of the model over
the prompt and the generated tokens (the raw logits at every position), and transformers'
``generate(output_logits=True, return_dict_in_generate=True)``. Mostly the tiny random
model; one short check on the default model.
"""

from __future__ import annotations

import json
import math
import threading
import time

import pytest
import torch

import nbstream
from nbstream.backends import Backend
from nbstream.settings import MAX_ALTERNATIVES, validate_settings
from nbstream.trace import Alternative, TokenTrace

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

K = 5
LONG = 4000  # tokens: more than a test lets a one-line run produce before it stops it
TOL = 1e-4  # float32 log-probabilities: cached decoding vs one full forward pass


def wait_until(predicate, timeout=30.0):
    """Poll (no timing assertion: the timeout only keeps a broken engine from hanging)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.002)


def raw_logprobs(model, run):
    """log_softmax of the raw logits that predicted each generated token: [tokens, vocab]."""
    ids = run.token_ids
    prompt = model_inputs(run)
    sequence = torch.cat([prompt, torch.tensor([ids])], dim=1)
    with torch.no_grad():
        logits = model(sequence).logits[0].float()
    start = prompt.shape[1] - 1
    return torch.log_softmax(logits[start : start + len(ids)], dim=-1)


def model_inputs(run):
    """The prompt ids exactly as the model saw them (nbstream's prompt_text, re-encoded)."""
    tokenizer = run._job.backend.tokenizer
    ids = tokenizer(run.prompt_text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    assert ids.shape[1] == run.prompt_tokens
    return ids


def check_against(reference, trace, k=K):
    """Every record's logprob, rank and alternatives agree with the reference rows."""
    for row, step in zip(reference, trace, strict=True):
        assert step.logprob == pytest.approx(row[step.id].item(), abs=TOL)
        # 1 + the tokens ranked above it (tokens within TOL of it may fall either way).
        chosen = row[step.id]
        assert (
            int((row > chosen + TOL).sum()) + 1 <= step.rank <= int((row > chosen - TOL).sum()) + 1
        )
        top = row.topk(k).values.tolist()
        alternatives = step.alternatives
        assert len(alternatives) == k
        assert [a.logprob for a in alternatives] == pytest.approx(top, abs=TOL)
        for alt in alternatives:
            assert alt.logprob == pytest.approx(row[alt.id].item(), abs=TOL)
        logprobs = [a.logprob for a in alternatives]
        assert logprobs == sorted(logprobs, reverse=True)
        assert len(step.cut) == k


# -- off ----------------------------------------------------------------------------------------


def test_no_trace_and_nothing_captured_without_alternatives(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    for settings in ({}, {"alternatives": 0}):
        p.hold()
        run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=6, **settings)
        assert p.held.wait(30)
        # Nothing hooked into the model but the test's own probe; no processor added.
        assert len(model._forward_hooks) == 1
        assert run._job.trace_capture is None
        assert run.trace is None
        p.release()
        run.wait()
        assert run.trace is None
        assert run.record["settings"]["alternatives"] == 0


def test_the_hook_is_removed_after_the_run(tiny_line, probe):
    model, tokenizer = tiny_line
    before = len(model._forward_hooks)
    p = probe(model)
    p.hold()
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=4, alternatives=2)
    assert p.held.wait(30)
    assert len(model._forward_hooks) == before + 2  # the probe and the trace's
    p.release()
    run.wait()
    p.remove()
    assert len(model._forward_hooks) == before


# -- greedy -------------------------------------------------------------------------------------


def test_greedy_trace_matches_an_independent_forward(tiny):
    model, tokenizer = tiny
    run = nbstream.stream(model, tokenizer, "Hello there", max_new_tokens=12, alternatives=K)
    run.wait()
    trace = run.trace
    assert len(trace) == len(run.token_ids) == run.metrics["tokens"] > 0
    assert [step.id for step in trace] == run.token_ids
    check_against(raw_logprobs(model, run), trace)
    for step in trace:
        # Nothing processes this model's scores: greedy picks the model's favourite, and
        # gives every other alternative no chance.
        assert step.alternatives[0].id == step.id
        assert step.rank == 1
        assert step.cut == (False,) + (True,) * (K - 1)
        assert step.prob == pytest.approx(math.exp(step.logprob))


def test_logprob_is_from_the_raw_logits_before_the_models_own_processors(tiny_line):
    # tiny_line's generation config bans newlines and special tokens (sequence_bias -inf):
    # the trace still reports the raw logits, where a banned token can be the favourite.
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=40, alternatives=K)
    run.wait()
    trace = run.trace
    assert [step.id for step in trace] == run.token_ids
    check_against(raw_logprobs(model, run), trace)
    banned = {ids[0] for ids, _ in model.generation_config.sequence_bias}
    for step in trace:
        for alt, cut in zip(step.alternatives, step.cut, strict=True):
            assert cut == (alt.id != step.id)  # greedy: only the chosen token had a chance
    beaten = [s for s in trace if s.alternatives[0].id in banned]
    assert beaten, "expected a banned token to top the raw logits somewhere"
    assert all(s.rank > 1 and s.cut[0] for s in beaten)


def test_trace_matches_generate_output_logits(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=10, alternatives=K)
    run.wait()
    inputs = model_inputs(run)
    with torch.no_grad():
        out = model.generate(
            input_ids=inputs,
            attention_mask=torch.ones_like(inputs),
            do_sample=False,
            max_new_tokens=10,
            output_logits=True,
            return_dict_in_generate=True,
        )
    assert out.sequences[0, inputs.shape[1] :].tolist() == run.token_ids
    reference = torch.log_softmax(torch.cat(out.logits).float(), dim=-1)
    check_against(reference, run.trace)


def test_texts_decode_each_token(tiny):
    model, tokenizer = tiny
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=8, alternatives=3)
    run.wait()
    for step in run.trace:
        assert step.text == tokenizer.decode([step.id], skip_special_tokens=False)
        for alt in step.alternatives:
            assert isinstance(alt, Alternative) and isinstance(alt, tuple)
            token_id, text, logprob = alt
            assert text == tokenizer.decode([token_id], skip_special_tokens=False)
            assert isinstance(logprob, float)
    assert "TokenTrace(id=" in repr(run.trace[0])


# -- sampled ------------------------------------------------------------------------------------


def test_sampled_logprob_ignores_temperature_and_top_k_cuts_all_but_two(tiny):
    model, tokenizer = tiny
    run = nbstream.stream(
        model,
        tokenizer,
        "Hello",
        max_new_tokens=16,
        temperature=1.7,
        top_k=2,
        seed=3,
        alternatives=K,
    )
    run.wait()
    trace = run.trace
    assert [step.id for step in trace] == run.token_ids
    # Temperature changes what is drawn, never the model's own probabilities.
    check_against(raw_logprobs(model, run), trace)
    for step in trace:
        assert step.cut == (False, False) + (True,) * (K - 2)  # top_k=2: two survive
        assert step.id in (step.alternatives[0].id, step.alternatives[1].id)
        assert step.rank == 1 + [a.id for a in step.alternatives].index(step.id)
    assert {step.rank for step in trace} == {1, 2}  # seed 3 draws the runner-up sometimes


def test_sampled_rank_counts_the_whole_vocabulary(tiny):
    # A hot temperature and no top-k/top-p: picks far below the top k, ranked exactly.
    model, tokenizer = tiny
    run = nbstream.stream(
        model,
        tokenizer,
        "Hello",
        max_new_tokens=16,
        temperature=5.0,
        top_k=0,
        top_p=1.0,
        seed=1,
        alternatives=3,
    )
    run.wait()
    trace = run.trace
    check_against(raw_logprobs(model, run), trace, k=3)  # ranks against the vocabulary
    for step in trace:
        assert step.cut == (False, False, False)  # nothing was cut: every token could come
    assert max(step.rank for step in trace) > 100


def test_top_p_cut_matches_the_nucleus(tiny):
    model, tokenizer = tiny
    run = nbstream.stream(
        model, tokenizer, "Hello", max_new_tokens=10, top_p=0.001, seed=0, alternatives=K
    )
    run.wait()
    for step in run.trace:
        # A nucleus this small keeps only the single most likely token (at temperature 1).
        assert step.cut == (False,) + (True,) * (K - 1)
        assert step.id == step.alternatives[0].id


def test_capture_changes_no_token(tiny):
    model, tokenizer = tiny
    for settings in ({"temperature": 0}, {"temperature": 1.2, "top_p": 0.95, "seed": 11}):
        plain = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=20, **settings)
        traced = nbstream.stream(
            model, tokenizer, "Hello", max_new_tokens=20, alternatives=K, **settings
        )
        assert traced.wait() == plain.wait()
        assert traced.token_ids == plain.token_ids


# -- while streaming, and after a stop ------------------------------------------------------------


def test_trace_readable_while_streaming_and_kept_after_stop(tiny_line, probe):
    model, tokenizer = tiny_line
    p = probe(model)
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=LONG, alternatives=K)
    wait_until(lambda: p.calls >= 8)
    p.hold()
    wait_until(p.held.is_set)
    # The model is held mid-run: the trace so far matches the tokens so far.
    assert run.status == "running"
    during = run.trace
    ids = run.token_ids
    assert len(during) == len(ids) >= 6
    assert [step.id for step in during] == ids
    assert isinstance(during[0], TokenTrace)
    p.release()
    run.stop()
    with pytest.raises(nbstream.GenerationCancelled):
        run.wait()
    after = run.trace
    assert run.status == "cancelled"
    assert [step.id for step in after] == run.token_ids
    assert after[: len(during)] == during  # a snapshot, extended, never rewritten
    assert len(after) < LONG


def test_trace_from_several_reader_threads(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hello", max_new_tokens=200, alternatives=3)
    seen: list[list[int]] = []

    def read() -> None:
        while not run.done:
            run.trace  # noqa: B018 - reading races the other readers and the worker
        seen.append([step.id for step in run.trace])

    readers = [threading.Thread(target=read) for _ in range(3)]
    for reader in readers:
        reader.start()
    run.wait()
    for reader in readers:
        reader.join(30)
    assert seen == [run.token_ids] * 3


# -- settings, backends, records -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        (-1, ValueError, "between 0 (off) and 100"),
        (MAX_ALTERNATIVES + 1, ValueError, "100"),
        (2.0, TypeError, "must be an int"),
        (True, TypeError, "must be an int"),
        ("5", TypeError, "must be an int"),
    ],
)
def test_alternatives_setting_is_checked_before_anything_starts(tiny, value, error, words):
    model, tokenizer = tiny
    with pytest.raises(error, match="alternatives") as info:
        nbstream.stream(model, tokenizer, "Hello", alternatives=value)
    assert words in str(info.value)
    assert validate_settings({"alternatives": 0}) == {"alternatives": 0}
    assert validate_settings({"alternatives": MAX_ALTERNATIVES}) == {"alternatives": 100}
    assert validate_settings({"alternatives": None}) == {}


def test_a_backend_that_cannot_capture_is_refused_before_any_request():
    class NoLogits(Backend):
        prepared = 0

        def queue_key(self):
            return self

        def prepare(self, prompt, settings):
            NoLogits.prepared += 1
            raise AssertionError("prepare must not be reached")

    with pytest.raises(ValueError, match="alternatives=3: NoLogits cannot capture"):
        nbstream.stream(NoLogits(), None, "Hi", alternatives=3)
    assert NoLogits.prepared == 0
    # A server known to send no logprobs (others send theirs: tests/test_remote_branch.py).
    endpoint = nbstream.Endpoint("http://127.0.0.1:9/v1", "some-model", server="transformers")
    with pytest.raises(ValueError, match="transformers serve sends no token probabilities"):
        nbstream.stream(endpoint, None, "Hi", alternatives=1)


def test_record_keeps_alternatives_and_rerun_reproduces_the_trace(tiny):
    model, tokenizer = tiny
    run = nbstream.stream(
        model, tokenizer, "Hello", max_new_tokens=10, temperature=0.9, alternatives=4
    )
    run.wait()
    record = json.loads(json.dumps(run.record))
    assert record["settings"]["alternatives"] == 4
    again = nbstream.rerun(record, model, tokenizer)
    again.wait()
    assert again.trace == run.trace
    assert len(again.trace[0].alternatives) == 4


def test_the_most_alternatives(tiny):
    # k is at most 100, far below any real vocabulary: every step holds exactly k.
    model, tokenizer = tiny
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=3, alternatives=100)
    run.wait()
    assert all(len(step.alternatives) == 100 == len(step.cut) for step in run.trace)


# -- the default model -----------------------------------------------------------------------------


@pytest.mark.model
def test_default_model_trace(real_model):
    model, tokenizer = real_model
    run = nbstream.stream(
        model, tokenizer, "Name a primary color.", max_new_tokens=12, alternatives=K
    )
    run.wait()
    trace = run.trace
    assert [step.id for step in trace] == run.token_ids
    check_against(raw_logprobs(model, run), trace)
    assert all(step.rank == 1 and step.alternatives[0].id == step.id for step in trace)
    # Each token's text, in order, is the answer (special tokens shown).
    assert "".join(step.text for step in trace) == tokenizer.decode(
        run.token_ids, skip_special_tokens=False
    )
    assert all(-30 < step.logprob <= 0 for step in trace)


def test_the_distribution_gives_no_chance_to_what_the_trace_marks_cut(tiny_line):
    """The model's sequence_bias (here: newlines and special tokens banned) is applied by
    run.distribution as by the run: a banned token has probability 0, as run.trace says."""
    from transformers import SequenceBiasLogitsProcessor, TopPLogitsWarper

    model, tokenizer = tiny_line
    bias = model.generation_config.sequence_bias
    banned = [ids[0] for ids, value in bias if value == float("-inf")]
    run = nbstream.stream(
        model,
        tokenizer,
        "Hello",
        max_new_tokens=6,
        alternatives=100,
        temperature=1.0,
        top_k=0,
        top_p=0.9,
        seed=2,
    )
    run.wait(60)
    prompt = model_inputs(run)
    seen_cut = 0
    for step, record in enumerate(run.trace):
        d = run.distribution(step)
        # Independently: transformers' own processors, in generate()'s order, on raw logits.
        history = torch.cat([prompt, torch.tensor([run.token_ids[:step]], dtype=torch.long)], 1)
        with torch.no_grad():
            scores = model(history).logits[:, -1].float()
        scores = SequenceBiasLogitsProcessor(bias)(history, scores)
        scores = TopPLogitsWarper(0.9)(history, scores)
        expected = torch.softmax(scores, dim=-1)[0]
        assert torch.allclose(d.probs["top_p"], expected, atol=1e-6)
        assert float(d.probs["top_p"][banned].sum()) == 0.0
        for alt, cut in zip(record.alternative_ids, record.cut, strict=True):
            assert cut == (d.prob(alt, "top_p") == 0.0)
            seen_cut += alt in banned
    assert seen_cut  # a banned token was among the alternatives: the check saw one
