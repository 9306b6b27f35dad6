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


# -- one CPU step, against log_softmax + topk written here --------------------------------------
# The capture finds the top k of a CPU row without a full topk where the answer is unambiguous;
# these rows are built to reach every case where that could differ from the full computation.


def expected_step(logits, token, k, warped=None):
    """What one step must record, computed the straightforward way."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)[0]
    values, ids = logprobs.topk(min(k, logprobs.shape[0]))
    chosen = logprobs[token]
    if warped is None:
        cut = tuple(int(i) != token for i in ids)
    else:
        cut = tuple(bool(warped[0, int(i)] == float("-inf")) for i in ids)
    return {
        "alternative_ids": tuple(ids.tolist()),
        "alternative_logprobs": tuple(values.tolist()),
        "logprob": float(chosen),
        "rank": int((logprobs > chosen).sum()) + 1,
        "cut": cut,
    }


def captured_step(logits, token, k, warped=None):
    """The record nbstream's capture makes of one CPU step with raw ``logits`` ([1, vocab])."""
    from nbstream.trace import TraceCapture

    capture = TraceCapture(k, object())
    capture._raw = logits
    if warped is None:
        ids = torch.tensor([[3, 1, token]])
        capture.record_greedy(ids)
    else:
        capture.record_sampled(warped, torch.tensor([[token]]))
    (record,) = capture.records([token])
    return {
        "alternative_ids": record.alternative_ids,
        "alternative_logprobs": record.alternative_logprobs,
        "logprob": record.logprob,
        "rank": record.rank,
        "cut": record.cut,
    }


def same_step(logits, token, k, warped=None):
    assert captured_step(logits, token, k, warped) == expected_step(logits, token, k, warped)


def row(size, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(1, size, generator=generator) * 4


VOCAB = 49152  # the tiny model's


@pytest.mark.parametrize("seed", range(8))
def test_a_step_matches_log_softmax_and_topk(seed):
    logits = row(VOCAB, seed)
    best = int(logits.argmax())
    same_step(logits, best, K)  # the chosen token first
    same_step(logits, int(logits[0].topk(4).indices[3]), K)  # inside the top k
    same_step(logits, int(logits[0].topk(40).indices[39]), K)  # outside: counted over all
    same_step(logits, int(logits.argmin()), K)


def test_the_split_search_runs_without_the_full_topk_and_falls_back_on_a_tie(monkeypatch):
    """The cases below reach both ways: a plain row without the full topk, a tie with it."""
    full = []  # the size of each tensor topk runs on
    topk = torch.Tensor.topk

    def counted(self, *args, **kwargs):
        full.append(self.numel())
        return topk(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "topk", counted)
    from nbstream.trace import _host_top

    logits = row(VOCAB)
    _host_top(logits, K)
    assert full and VOCAB not in full  # only a few chunks searched
    full.clear()
    logits[0, 10] = logits[0, 20_000] = logits.max() + 1
    _host_top(logits, K)
    assert full[-1] == VOCAB


@pytest.mark.parametrize("places", [(0, 1), (5, 300), (7, 40_000, 49_151), (100, 101, 102, 103)])
def test_ties_at_the_top_keep_topks_order(places):
    logits = row(VOCAB, 1)
    logits[0, list(places)] = logits.max() + 0.5
    for token in places:
        same_step(logits, token, K)
        same_step(logits, token, len(places))  # the tied group fills the top k exactly
        same_step(logits, token, 2)  # the top k cuts the tied group


def test_a_tie_at_the_k_th_place_and_below():
    logits = row(VOCAB, 2)
    order = logits[0].topk(K + 3).indices.tolist()
    # The k-th and (k+1)-th equal, in different chunks and in the same one.
    logits[0, order[K]] = logits[0, order[K - 1]]
    logits[0, order[K - 1] ^ 1] = logits[0, order[K - 1]]
    for token in order:
        same_step(logits, token, K)
    # A tie only below the top k: the chosen token far down, tied with others.
    logits = row(VOCAB, 3)
    low = logits[0].topk(500).values[-1]
    tied = [17, 18, 30_000, 49_000]
    logits[0, tied] = low
    for token in tied:
        same_step(logits, token, K)


@pytest.mark.parametrize("tie", [4, 127, 128 * 5 + 9, 128 * 9 + 1, 30_000])
def test_a_tie_at_the_k_th_place_inside_the_best_chunks(tie):
    """The top k in a few chunks, the (k+1)-th equal to the k-th: the boundary is a tie."""
    logits = row(VOCAB, 7)
    top = {0: 100.0, 1: 99.0, 2: 98.0, 128 * 5 + 3: 97.0, 128 * 9: 96.0}
    for place, value in top.items():
        logits[0, place] = value
    logits[0, tie] = 96.0
    for token in (*top, tie):
        same_step(logits, token, K)
        same_step(logits, token, K - 1)  # the tie below the top k


@pytest.mark.parametrize(
    ("size", "k"),
    [
        (1, 1),
        (3, 5),  # k above the vocabulary
        (50, 5),  # shorter than one chunk
        (700, 20),  # fewer chunks than the split needs
        (128 * 30 + 5, 6),  # a tail that fits no chunk
        (VOCAB + 37, K),
        (VOCAB, 100),  # the most alternatives
    ],
)
def test_small_and_uneven_vocabularies(size, k):
    logits = row(size, 4)
    tokens = {0, size - 1, int(logits.argmax()), int(logits.argmin())}
    for token in tokens:
        same_step(logits, token, k)
    if size % 128:
        # The best values in the tail, past every whole chunk.
        logits[0, -min(3, size) :] = logits.max() + torch.tensor([1.0, 2.0, 3.0])[-min(3, size) :]
        for token in tokens:
            same_step(logits, token, k)


def test_suppressed_tokens():
    logits = row(VOCAB, 5)
    logits[0, 1000:30_000] = float("-inf")
    same_step(logits, int(logits.argmax()), K)
    same_step(logits, 2000, K)  # a suppressed token chosen (a sampled pick cannot be, a forced one)
    # Fewer finite values than k: the rest of the top k are tied at -inf.
    logits = torch.full((1, VOCAB), float("-inf"))
    logits[0, [5, 20_000, 40_000]] = torch.tensor([1.0, 3.0, 2.0])
    for token in (5, 20_000, 40_000, 7):
        same_step(logits, token, K)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_logits(dtype):
    # Coarse values: ties among the top are common, as in a bfloat16 model's logits.
    for seed in range(4):
        logits = row(VOCAB, seed).to(dtype)
        order = logits.float()[0].topk(30).indices.tolist()
        for token in (order[0], order[3], order[29]):
            same_step(logits, token, K)


def test_sampled_steps_mark_what_the_processors_cut():
    logits = row(VOCAB, 6)
    order = logits[0].topk(K).indices.tolist()
    warped = logits.clone()
    warped[0, [order[1], order[3]]] = float("-inf")
    far = int(logits[0].topk(1000).indices[-1])
    for token in (order[0], order[2], far):
        same_step(logits, token, K, warped)
        same_step(logits, token, K, warped.to(torch.bfloat16))
