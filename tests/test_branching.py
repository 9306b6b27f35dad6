"""What if it had picked another token (``run.branch``), what the sampling sliders do
(``run.distribution``), and where compare columns part (``cw.divergence``).

The numbers are checked on the embedded default model; the tiny model only where they do
not matter.
"""

from __future__ import annotations

import itertools
import json
import threading

import pytest
import torch
from transformers import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import nbstream
from nbstream.distribution import STAGES

PROMPT = "Name a color."


@pytest.fixture(scope="module")
def parent(real_model):
    """A greedy answer on the default model, with its trace."""
    run = nbstream.stream(*real_model, PROMPT, max_new_tokens=24, alternatives=5)
    run.wait(120)
    assert run.status == "complete" and len(run.token_ids) > 6
    return run


# -- branch ------------------------------------------------------------------------------------
def test_a_branch_keeps_the_prefix_takes_the_token_and_generates_on(parent, real_model):
    step = 3
    other = parent.trace[step].alternatives[1]  # the model's second choice there
    assert other.id != parent.token_ids[step]
    branch = parent.branch(step, other)
    text = branch.wait(120)
    assert branch.status == "complete" and text == branch.result
    # Its ids start with exactly the parent's first `step` tokens and the chosen one.
    assert branch.token_ids[: step + 1] == [*parent.token_ids[:step], other.id]
    assert len(branch.token_ids) > step + 1, "it generated on from the chosen token"
    _, tokenizer = real_model
    assert text.startswith(tokenizer.decode(branch.token_ids[: step + 1]).strip()[:8])
    assert text != parent.result
    info = branch.branch_info
    assert info is not None and info["parent"] is parent
    assert (info["step"], info["token"], info["parent_token"]) == (
        step,
        other.id,
        parent.token_ids[step],
    )


def test_the_branch_trace_is_aligned_and_its_kept_steps_are_the_parents(parent):
    branch = parent.branch(2, parent.trace[2].alternatives[2])
    branch.wait(120)
    trace = branch.trace
    assert trace is not None and [s.id for s in trace] == branch.token_ids
    for mine, theirs in zip(trace[:2], parent.trace[:2], strict=True):
        # The same context, so the model gave the same odds: recomputed, not copied.
        assert mine.id == theirs.id and mine.rank == theirs.rank
        assert mine.logprob == pytest.approx(theirs.logprob, abs=1e-4)
        assert mine.alternative_ids == theirs.alternative_ids
    forced = trace[2]
    assert forced.rank == 3  # the model's third choice
    assert forced.logprob == pytest.approx(parent.trace[2].alternative_logprobs[2], abs=1e-4)
    # Nothing was drawn at a forced step: every other candidate is marked cut.
    assert forced.cut == tuple(alt != forced.id for alt in forced.alternative_ids)


def test_the_record_names_the_parent_and_rerun_reproduces_a_branch(parent, real_model):
    branch = parent.branch(1, parent.trace[1].alternatives[1], temperature=0.9, seed=7)
    branch.wait(120)
    record = json.loads(json.dumps(branch.record))
    assert record["branch"]["prefix_ids"] == branch.token_ids[:2]
    assert record["branch"]["parent"] == json.loads(json.dumps(parent.record))
    again = nbstream.rerun(record, *real_model)
    assert again.wait(120) == branch.result
    assert again.token_ids == branch.token_ids


def test_a_sampled_branch_keeps_the_parents_seed(real_model):
    run = nbstream.stream(*real_model, PROMPT, max_new_tokens=12, temperature=0.8)
    run.wait(120)
    branch = run.branch(0, run.token_ids[0])
    branch.wait(120)
    assert branch.seed == run.seed and branch.settings["temperature"] == 0.8


def test_a_branch_on_the_end_token_ends_there(tiny_line):
    run = nbstream.stream(*tiny_line, "Hi", max_new_tokens=4)
    run.wait(60)
    eos = tiny_line[1].eos_token_id
    branch = run.branch(1, eos)
    branch.wait(60)
    assert branch.status == "complete" and branch.metrics["finish_reason"] == "eos"
    assert branch.token_ids == [run.token_ids[0], eos]


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda run: run.branch(99, 1), ValueError, "step 99 is not a step of this run"),
        (lambda run: run.branch(-1, 1), ValueError, "not a step"),
        (lambda run: run.branch(0, "red"), TypeError, "token must be a token id"),
        (lambda run: run.branch(0, 10**9), ValueError, "is not a token of this model"),
        (lambda run: run.branch(3, 1, max_new_tokens=3), ValueError, "leaves no room"),
        (lambda run: run.branch(0, 1, temperature=-1), ValueError, "temperature must be"),
        (lambda run: run.distribution(0, top_p=2), ValueError, "top_p must be in"),
        (lambda run: run.distribution(4), ValueError, "steps 0 to 3"),
    ],
)
def test_bad_branches_are_refused_before_anything_starts(tiny_line, call, error, words):
    run = nbstream.stream(*tiny_line, "Hi", max_new_tokens=4)
    run.wait(60)
    before = {t for t in threading.enumerate() if t.name.startswith("nbstream-run-")}
    with pytest.raises(error, match=words):
        call(run)
    after = {t for t in threading.enumerate() if t.name.startswith("nbstream-run-")}
    assert after <= before


def test_a_run_still_going_cannot_branch(tiny_line):
    run = nbstream.stream(*tiny_line, "Hi", max_new_tokens=5000)
    try:
        run.wait_for_progress(0, timeout=60)
        with pytest.raises(RuntimeError, match="has not ended"):
            run.branch(0, 1)
    finally:
        run.stop()
        with pytest.raises(nbstream.GenerationCancelled):
            run.wait(60)


def test_an_endpoint_run_says_it_cannot_branch():
    endpoint = nbstream.Endpoint("http://127.0.0.1:9/v1", "m", timeout=5)
    run = nbstream.stream(endpoint, None, "Hi")
    with pytest.raises(nbstream.GenerationFailed):
        run.wait(60)
    with pytest.raises(ValueError, match="branching needs a local transformers model"):
        run.branch(0, 1)
    with pytest.raises(ValueError, match="the distribution needs a local"):
        run.distribution(0)


def test_the_widget_keeps_every_branch_of_its_answer(tiny_line):
    w = nbstream.StreamWidget(*tiny_line, max_new_tokens=5)
    with pytest.raises(RuntimeError, match="no run to branch from"):
        w.branch(0, 1)
    first = w.generate("Hi")
    w.wait()
    one = w.branch(1, 5)
    w.wait()
    two = w.branch(2, 6)
    w.wait()
    assert w.branches == [one, two] and w.run is two and w.status == "complete"
    assert w.result == two.result and two.branch_info["parent"] is one
    assert one.branch_info["parent"] is first
    w.generate("Hello")
    w.wait()
    assert w.branches == []


# -- distribution --------------------------------------------------------------------------
def _warped(real_model, run, step, temperature, top_k, top_p):
    """transformers' own processors over the same logits, written out independently."""
    model, _ = real_model
    ids = torch.cat((run._job.encoded["input_ids"], torch.tensor([run.token_ids[:step]])), dim=-1)
    with torch.no_grad():
        scores = model(input_ids=ids).logits[:, -1].float()
    processors = LogitsProcessorList()
    if temperature != 1.0:
        processors.append(TemperatureLogitsWarper(temperature))
    if top_k:
        processors.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p))
    return torch.softmax(processors(ids, scores), dim=-1)[0]


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(0.7, 50, 0.9), (1.3, 0, 0.8), (1.0, 5, 1.0)]
)
def test_the_stages_equal_transformers_own_warpers(parent, real_model, temperature, top_k, top_p):
    d = parent.distribution(4, temperature=temperature, top_k=top_k, top_p=top_p)
    for stage in STAGES:
        probs = d.probs[stage]
        assert probs.dim() == 1 and probs.shape[0] == d.size
        # float32 over 49,152 tokens: the sum's rounding reaches 1.5e-5 (seen on "model").
        assert float(probs.sum()) == pytest.approx(1.0, abs=1e-4)
    expected = _warped(real_model, parent, 4, temperature, top_k, top_p)
    kept = d.probs["top_p"] > 0
    assert torch.equal(kept, expected > 0), "the kept set"
    assert torch.allclose(d.probs["top_p"], expected, atol=1e-6), "and its probabilities"
    # Each stage only removes: what a filter cut stays cut.
    for before, after in itertools.pairwise(STAGES[1:]):
        assert not bool(((d.probs[before] == 0) & (d.probs[after] > 0)).any())
    # A filter that is off leaves its stage as the one before it.
    if not top_k:
        assert torch.equal(d.probs["top_k"], d.probs["temperature"])
    if top_p == 1.0:
        assert torch.equal(d.probs["top_p"], d.probs["top_k"])


def test_what_a_sampled_run_drew_was_always_in_the_kept_set(real_model):
    run = nbstream.stream(
        *real_model, PROMPT, max_new_tokens=10, temperature=1.2, top_k=20, top_p=0.7, seed=3
    )
    run.wait(120)
    for step, token in enumerate(run.token_ids):
        d = run.distribution(step)  # the run's own settings
        assert d.settings == {"temperature": 1.2, "top_k": 20, "top_p": 0.7}
        assert d.prob(token) > 0, (step, token, d.describe())
        assert d.kept("top_p") <= d.kept("top_k") <= 20


def test_a_greedy_runs_own_settings_put_all_the_mass_on_its_token(parent):
    d = parent.distribution(5)
    assert d.run_settings["temperature"] == 0.0
    assert d.prob(parent.token_ids[5]) == 1.0 and d.kept("top_p") == 1
    assert "greedy" in d.describe()


def test_the_view_gets_words_top_candidates_and_the_rest(parent):
    d = parent.distribution(2, temperature=0.7, top_k=0, top_p=0.9)
    top = d.top(10)
    assert [c.id for c in top][:1] == [parent.trace[2].alternative_ids[0]]
    assert top[0].text == parent.trace[2].alternatives[0].text
    assert all(set(c.probs) == set(STAGES) for c in top)
    cut = [c for c in top if c.removed_by is not None]
    assert cut and all(c.removed_by == "top_p" and c.probs["top_p"] == 0 for c in cut)
    kept = d.kept("top_p")
    assert f"top-p 0.9 keeps {kept} of" in d.describe()
    assert d.rest(10) == pytest.approx(1 - sum(c.probs["model"] for c in top), abs=1e-5)


# -- compare -------------------------------------------------------------------------------
def test_divergence_is_the_first_step_where_the_columns_part(tiny_line):
    same = nbstream.CompareWidget(
        *tiny_line, "Hi", settings=[{"temperature": 0}, {"temperature": 0}], max_new_tokens=6
    )
    assert same.divergence is None  # no runs yet
    same.generate()
    same.wait(60)
    assert same.divergence is None
    parted = nbstream.CompareWidget(
        *tiny_line,
        "Hi",
        settings=[{"temperature": 0}, {"temperature": 5.0, "seed": 1}, {"temperature": 0}],
        max_new_tokens=8,
    )
    parted.generate()
    parted.wait(60)
    ids = [column.run.token_ids for column in parted.columns]
    assert ids[0] != ids[1]
    step, tokens = parted.divergence
    assert all(run_ids[:step] == ids[0][:step] for run_ids in ids)
    assert tokens == [run_ids[step] if step < len(run_ids) else None for run_ids in ids]
    assert len(set(tokens)) > 1


def test_divergence_counts_only_the_steps_every_streaming_column_has_reached(tiny_line, probe):
    """Columns on one model queue: a column still queued has no tokens yet, which is not
    'its answer ended'."""
    model, tokenizer = tiny_line
    p = probe(model)
    p.on_call = lambda calls: p.hold() if calls == 4 else None
    cw = nbstream.CompareWidget(
        model, tokenizer, "Hi", settings=[{"temperature": 0}, {"temperature": 0}],
        max_new_tokens=8,
    )  # fmt: skip
    cw.generate()
    try:
        assert p.held.wait(60)
        # The first column holds the model mid-answer; the second is queued.
        assert cw.divergence is None
    finally:
        p.release()
    cw.wait(60)
    assert cw.divergence is None  # greedy both: the same tokens


def test_a_branch_at_the_last_step_of_a_length_cut_answer_ends_at_once(tiny_line):
    run = nbstream.stream(*tiny_line, "Hi", max_new_tokens=4)
    run.wait(60)
    assert run.metrics["finish_reason"] == "length"
    branch = run.branch(3, run.trace[3].alternatives[1] if run.trace else 7)
    branch.wait(60)
    assert branch.status == "complete" and branch.metrics["finish_reason"] == "length"
    assert branch.token_ids[:3] == run.token_ids[:3] and len(branch.token_ids) == 4


def test_filters_asked_of_a_greedy_step_say_they_change_nothing(parent):
    d = parent.distribution(2, top_k=5, top_p=0.5)
    assert d.settings["temperature"] == 0.0 and d.kept("top_p") == 1
    words = d.describe()
    assert "top-k 5 changes nothing after greedy" in words
    assert "top-p 0.5 changes nothing after greedy" in words


def test_one_forward_pass_serves_many_settings_of_a_step(parent, real_model):
    """run.step_logits(step) once, then run.distribution(..., logits=...) for each setting:
    the same numbers as asking from scratch, and no further forward pass."""
    import torch

    logits = parent.step_logits(2)
    assert logits.ndim == 1 and logits.device.type == "cpu"
    calls = []
    hook = real_model[0].register_forward_hook(lambda *args: calls.append(1))
    try:
        kept = {
            t: parent.distribution(2, temperature=t, top_p=1.0, logits=logits) for t in (0.5, 2)
        }
        assert calls == []  # the kept logits: no forward pass
        for t, d in kept.items():
            fresh = parent.distribution(2, temperature=t, top_p=1.0)
            for stage in ("model", "temperature", "top_k", "top_p"):
                assert torch.allclose(fresh.probs[stage], d.probs[stage])
        assert len(calls) == 2  # one each from scratch
    finally:
        hook.remove()
    with pytest.raises(ValueError, match=r"logits must be run.step_logits\(2\)"):
        parent.distribution(2, logits=logits[None, :])


# -- a branch's own settings mean what they mean on a fresh run -------------------------------


def _greedy_after(model, tokenizer, run, prefix, n):
    """What greedy decoding makes after ``prefix``, computed by transformers itself."""
    prompt = tokenizer(run.prompt_text, add_special_tokens=False, return_tensors="pt")
    ids = torch.cat((prompt["input_ids"], torch.tensor([prefix])), dim=-1)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=n,
            pad_token_id=tokenizer.pad_token_id,
        )
    return out[0, ids.shape[-1] :].tolist()


def test_a_branch_of_a_greedy_run_samples_when_its_own_settings_say_so(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=16)
    run.wait(60)
    token = run.token_ids[1]
    branch = run.branch(1, token, temperature=1.5, seed=7)
    branch.wait(60)
    settings = branch.record["settings"]
    assert settings["do_sample"] is True and settings["temperature"] == 1.5
    assert branch.seed == 7
    # A fresh run with the same settings samples: the branch draws what it would.
    assert branch.token_ids[2:] != _greedy_after(model, tokenizer, run, run.token_ids[:2], 14)
    again = nbstream.rerun(json.loads(json.dumps(branch.record)), model, tokenizer)
    assert again.wait(60) == branch.result and again.token_ids == branch.token_ids


def test_a_branch_of_a_sampled_run_can_be_greedy(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=16, temperature=0.8)
    run.wait(60)
    branch = run.branch(1, run.token_ids[1], temperature=0)
    branch.wait(60)
    assert branch.record["settings"]["do_sample"] is False
    assert branch.token_ids[2:] == _greedy_after(model, tokenizer, run, run.token_ids[:2], 14)
    # What the parent was given explicitly is still inherited, and still contradicts.
    explicit = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=4, do_sample=True)
    explicit.wait(60)
    with pytest.raises(ValueError, match="contradicts do_sample=True"):
        explicit.branch(0, explicit.token_ids[0], temperature=0)
