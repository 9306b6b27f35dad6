"""A run's ``steer=(direction, strength)``: against a hook written here, its lifetime, its reach.

The reference for a steered run is the same run unsteered while a forward hook written here
adds ``strength * vector`` to the layer's output on every thread (nbstream's own hook is not
involved); a fresh model is a copy made before anything was steered. Runs are held inside a
forward pass with gates, never with sleeps (the budget's overrun excepted: it is a wait).
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
import threading
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest

import nbstream
from nbstream import steering
from nbstream.backends.replay import ReplayBackend
from nbstream.steering import Direction, SteeringUnavailable, decoder_layers

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PROMPT = "Tell me something."
TOWARD = ["Tell me about the sea.", "Waves crash on the shore."]
AWAY = ["Tell me about the desert.", "Sand dunes stretch far away."]
STRENGTH = 8.0
GREEDY = {"max_new_tokens": 8, "temperature": 0}


@pytest.fixture(scope="module")
def pair(tiny_line):
    """A copy of the tiny model of its own: this module's hooks never reach another's."""
    model, tokenizer = tiny_line
    return copy.deepcopy(model), tokenizer


@pytest.fixture(scope="module")
def fresh(pair):
    """A copy of ``pair``'s model made before anything here steered it."""
    return copy.deepcopy(pair[0]), pair[1]


@pytest.fixture(scope="module")
def sea(pair, fresh):
    return Direction.from_examples(pair[0], pair[1], TOWARD, AWAY, layer=0)


def random_direction(seed: int, size: int = 64, layer: int = 0) -> Direction:
    """A direction of its own digest (a test's record names no other test's direction)."""
    vector = torch.randn(size, generator=torch.Generator().manual_seed(seed))
    return Direction(vector=vector * 4, layer=layer)


@contextlib.contextmanager
def own_hook(model: Any, layer: int, added: Any) -> Iterator[None]:
    """Add ``added`` to decoder layer ``layer``'s output, on every thread, while open.

    First among the layer's hooks, as the steering's is: transformers' own hooks that read
    hidden states (added for good the first time a model is asked for them, and copied with
    the model) must read the output with the direction added, whichever came first.
    """

    def add(module: Any, args: Any, output: Any) -> Any:
        if isinstance(output, tuple):
            return (output[0] + added, *output[1:])
        return output + added

    handle = decoder_layers(model)[layer].register_forward_hook(add, prepend=True)
    try:
        yield
    finally:
        handle.remove()


def hooks(model: Any) -> list[int]:
    """nbstream's steering hooks on each decoder layer (transformers adds hooks of its own the
    first time hidden states are asked for, and keeps them)."""
    return [
        sum(hook.__qualname__.startswith("steered.") for hook in layer._forward_hooks.values())
        for layer in decoder_layers(model)
    ]


def finished(run: Any) -> Any:
    assert run.wait_done(60), run
    return run


def plain(model: Any, tokenizer: Any, **settings: Any) -> Any:
    return finished(nbstream.stream(model, tokenizer, PROMPT, **{**GREEDY, **settings}))


def step_logits_by_hand(model: Any, tokenizer: Any, run: Any, step: int) -> Any:
    """The logits at ``step`` of ``run``: one plain forward pass over prompt and answer."""
    ids = tokenizer(run.prompt_text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    answer = torch.tensor([run.token_ids[:step]], dtype=ids.dtype)
    with torch.no_grad():
        return model(input_ids=torch.cat((ids, answer), dim=-1)).logits[0, -1].float()


class Gate:
    """A forward hook on decoder layer 1 (past the steered layer 0) that holds the
    ``at``-th forward pass until opened, or raises there."""

    def __init__(self, model: Any, at: int = 3, raises: bool = False, hold_s: float = 30.0):
        self.reached, self.open = threading.Event(), threading.Event()
        self.calls, self.at, self.raises, self.hold_s = 0, at, raises, hold_s
        self.handle = decoder_layers(model)[1].register_forward_hook(self.hook)

    def hook(self, module: Any, args: Any, output: Any) -> None:
        self.calls += 1
        if self.calls != self.at:
            return
        self.reached.set()
        if self.raises:
            raise RuntimeError("injected failure inside the model")
        self.open.wait(self.hold_s)

    def remove(self) -> None:
        self.open.set()
        self.handle.remove()


# -- what a steered run computes -------------------------------------------------------------
def test_a_steered_run_is_the_run_a_hook_written_here_makes(pair, sea):
    model, tokenizer = pair
    run = plain(model, tokenizer, steer=(sea, STRENGTH), alternatives=3)
    with own_hook(model, 0, STRENGTH * sea.vector):
        reference = plain(model, tokenizer, alternatives=3)
    assert run.status == "complete" and run.token_ids == reference.token_ids
    assert run.result == reference.result
    assert [t.logprob for t in run.trace] == [t.logprob for t in reference.trace]
    assert run.token_ids != plain(model, tokenizer).token_ids  # it was pulled somewhere
    # Its logits, read afterwards, are the steered ones: the unsteered run's, read with the
    # hook here, and close to one forward pass written here (other kernels: not bit for bit).
    for step in (0, 3, 7):
        with own_hook(model, 0, STRENGTH * sea.vector):
            expected = reference.step_logits(step)
            by_hand = step_logits_by_hand(model, tokenizer, run, step)
        assert torch.equal(run.step_logits(step), expected)
        assert torch.allclose(expected, by_hand, atol=1e-5)
        assert not torch.allclose(reference.step_logits(step), by_hand, atol=1e-5)
    assert hooks(model) == [0, 0]


def test_a_sampled_steered_run_is_the_hooked_run_with_the_same_seed(pair, sea):
    model, tokenizer = pair
    sampled = {"temperature": 1.0, "seed": 11}
    run = plain(model, tokenizer, steer=(sea, -STRENGTH), **sampled)
    with own_hook(model, 0, -STRENGTH * sea.vector):
        reference = plain(model, tokenizer, **sampled)
    assert run.token_ids == reference.token_ids


def test_strength_zero_is_the_unsteered_run_exactly(pair, sea):
    model, tokenizer = pair
    run = plain(model, tokenizer, steer=(sea, 0), alternatives=3)
    unsteered = plain(model, tokenizer, alternatives=3)
    assert run.result == unsteered.result and run.token_ids == unsteered.token_ids
    assert [t.logprob for t in run.trace] == [t.logprob for t in unsteered.trace]
    assert run.record["settings"]["steer"]["strength"] == 0.0  # asked, so recorded


def test_a_steered_runs_lens_attribution_and_attention_show_what_it_computed(pair, sea):
    model, tokenizer = pair
    run = plain(model, tokenizer, steer=(sea, STRENGTH))
    with own_hook(model, 0, STRENGTH * sea.vector):
        reference = plain(model, tokenizer)
        expected_lens = reference.lens(4)
        expected_attention = reference.attention(4)
        expected_scores = reference.attribution(4).scores
    assert run.lens(4) == expected_lens
    assert torch.equal(run.attention(4).weights, expected_attention.weights)
    assert run.attribution(4).scores == expected_scores
    assert reference.attribution(4).scores != expected_scores
    # Read without the hook, the same ids give other numbers: the steering made the difference.
    assert reference.lens(4) != expected_lens
    assert hooks(model) == [0, 0]


def test_a_branch_of_a_steered_run_is_steered_too(pair, sea):
    model, tokenizer = pair
    run = plain(model, tokenizer, steer=(sea, STRENGTH))
    token = tokenizer.encode(" ocean", add_special_tokens=False)[0]
    branch = finished(run.branch(2, token))
    with own_hook(model, 0, STRENGTH * sea.vector):
        expected = finished(plain(model, tokenizer).branch(2, token))
    assert branch.token_ids == expected.token_ids
    assert branch.record["settings"]["steer"] == run.record["settings"]["steer"]


# -- the hook's lifetime and reach ----------------------------------------------------------
def _complete(model: Any, tokenizer: Any, direction: Direction) -> Any:
    return plain(model, tokenizer, steer=(direction, STRENGTH))


def _stopped(model: Any, tokenizer: Any, direction: Direction) -> Any:
    gate = Gate(model)
    try:
        run = nbstream.stream(
            model, tokenizer, PROMPT, max_new_tokens=30, steer=(direction, STRENGTH)
        )
        assert gate.reached.wait(30)
        assert hooks(model)[0] == 1  # held inside generate(), steered
        run.stop()
    finally:
        gate.remove()
    return finished(run)


def _failed(model: Any, tokenizer: Any, direction: Direction) -> Any:
    gate = Gate(model, raises=True)
    try:
        run = finished(nbstream.stream(model, tokenizer, PROMPT, steer=(direction, STRENGTH)))
    finally:
        gate.remove()
    assert "injected failure" in str(run.error)
    return run


def _over_budget(model: Any, tokenizer: Any, direction: Direction) -> Any:
    gate = Gate(model, hold_s=1.0)  # a step that takes a second, past the budget
    try:
        run = finished(
            nbstream.stream(
                model, tokenizer, PROMPT, max_new_tokens=30, budget_s=0.3, steer=(direction, 4)
            )
        )
    finally:
        gate.remove()
    assert run.error is not None and "budget" in str(run.error)
    return run


@pytest.mark.parametrize(
    ("ending", "status"),
    [
        (_complete, "complete"),
        (_stopped, "cancelled"),
        (_failed, "failed"),
        (_over_budget, "failed"),
    ],
)
def test_the_hook_goes_however_the_run_ends(pair, fresh, sea, ending, status):
    model, tokenizer = pair
    run = ending(model, tokenizer, sea)
    assert run.status == status
    # A budget ends the run while its step is still inside the model; the hook goes as its
    # thread leaves generate() (meanwhile it steers that thread only, and the model's queue
    # holds the next run back).
    assert run.join(30)
    assert hooks(model) == [0, 0]
    # A later unsteered run is byte for byte a run on a model that was never steered.
    after, never = plain(model, tokenizer, alternatives=3), plain(*fresh, alternatives=3)
    assert after.result.encode() == never.result.encode()
    assert after.token_ids == never.token_ids
    assert [t.logprob for t in after.trace] == [t.logprob for t in never.trace]


def test_two_runs_on_one_model_never_see_each_others_steering(pair, fresh, sea):
    model, tokenizer = pair
    earlier = plain(model, tokenizer)  # an unsteered run, looked at while a steered one runs
    lens_before, attention_before = earlier.lens(3), earlier.attention(3)
    gate = Gate(model)
    try:
        pulled = nbstream.stream(model, tokenizer, PROMPT, **GREEDY, steer=(sea, STRENGTH))
        assert gate.reached.wait(30)
        # Queued behind it on the model: an unsteered run and one steered the other way.
        unsteered = nbstream.stream(model, tokenizer, PROMPT, **GREEDY)
        pushed = nbstream.stream(model, tokenizer, PROMPT, **GREEDY, steer=(sea, -STRENGTH))
        # Beside the held steered run (the lens on this thread, the attention on a twin of
        # the model that shares its hooks): the earlier run's numbers, unsteered.
        assert hooks(model)[0] == 1
        assert earlier.lens(3) == lens_before
        assert torch.equal(earlier.attention(3).weights, attention_before.weights)
    finally:
        gate.remove()
    for run in (pulled, unsteered, pushed):
        finished(run)
    assert unsteered.token_ids == plain(*fresh).token_ids
    for run, strength in ((pulled, STRENGTH), (pushed, -STRENGTH)):
        with own_hook(fresh[0], 0, strength * sea.vector):
            assert run.token_ids == plain(*fresh).token_ids
    assert hooks(model) == [0, 0]


# -- refused before anything starts ----------------------------------------------------------
def refused(model: Any, tokenizer: Any, steer: Any, error: type, words: str) -> None:
    started: list[str] = []
    start, caller = threading.Thread.start, threading.current_thread()

    def record(thread: threading.Thread) -> None:
        if threading.current_thread() is caller:
            started.append(thread.name)
        start(thread)

    # The threads this call started, not a count of threads: a thread of an earlier test may
    # end, or start another, meanwhile.
    with mock.patch.object(threading.Thread, "start", record), pytest.raises(error, match=words):
        nbstream.stream(model, tokenizer, PROMPT, **GREEDY, steer=steer)
    assert started == []  # no run's thread was started
    if getattr(getattr(model, "config", None), "model_type", None) in steering.DECODER_LAYERS:
        assert not any(hooks(model))


def test_bad_steering_is_refused_in_words_before_anything_starts(pair, sea):
    model, tokenizer = pair
    narrow = random_direction(1, size=32)
    refused(model, tokenizer, (narrow, 1), SteeringUnavailable, r"has 32 numbers .* have 64")
    deep = random_direction(1, layer=5)
    refused(model, tokenizer, (deep, 1), SteeringUnavailable, r"layer 5, but this model has 2")
    for strength in (float("nan"), float("inf")):
        refused(model, tokenizer, (sea, strength), ValueError, "finite number")
    refused(model, tokenizer, (sea, "4"), TypeError, "strength must be a number")
    refused(model, tokenizer, ("the sea", 4), TypeError, "must be an nbstream.Direction")
    refused(model, tokenizer, sea, TypeError, r"a pair \(direction, strength\)")


def test_a_family_steering_cannot_hook_is_refused_by_name(pair):
    tokenizer = pair[1]
    config = transformers.GPTNeoXConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
    )
    neox = transformers.GPTNeoXForCausalLM(config).eval()
    words = r"'gpt_neox'\) is not a family whose decoder layers nbstream knows.*use a model"
    refused(neox, tokenizer, (random_direction(2), 1), SteeringUnavailable, words)


def test_servers_and_replays_refuse_steering_by_name(pair, sea, tmp_path):
    model, tokenizer = pair
    server = nbstream.Endpoint("http://127.0.0.1:9/v1", "some-model", server="vllm")
    refused(server, None, (sea, 4), ValueError, "steer: Endpoint cannot steer its model")
    recording = nbstream.load(plain(model, tokenizer).save(tmp_path / "plain.json"))
    replaying = ReplayBackend(recording, speed=None)
    words = "steer: a replay plays the recorded text and runs no model"
    refused(replaying, None, (sea, 4), ValueError, words)


# -- the record, rerun and the recording -----------------------------------------------------
def test_the_record_names_the_direction_and_rerun_reproduces_the_run(pair, monkeypatch):
    model, tokenizer = pair
    own = random_direction(3)
    run = plain(model, tokenizer, steer=(own, 6))
    record = json.loads(json.dumps(run.record))
    assert record["settings"]["steer"] == {
        "digest": own.digest,
        "layer": 0,
        "size": 64,
        "strength": 6.0,
        "file": None,
    }
    assert finished(nbstream.rerun(record, model, tokenizer)).token_ids == run.token_ids
    # In a session without the direction (never saved to a file): refused, saying what to do.
    monkeypatch.setattr(steering, "_KNOWN", {})
    with pytest.raises(SteeringUnavailable, match="not in this session and was never saved"):
        nbstream.rerun(record, model, tokenizer)
    with pytest.raises(SteeringUnavailable, match=r"Direction\.from_examples"):
        nbstream.rerun(record, model, tokenizer)
    # Built again the same way (the same vector and layer): found by its digest.
    again = Direction(vector=own.vector.clone(), layer=0)
    assert finished(nbstream.rerun(record, model, tokenizer)).token_ids == run.token_ids
    assert again.digest == own.digest


def test_a_saved_direction_is_found_in_its_file_by_a_later_session(pair, tmp_path, monkeypatch):
    model, tokenizer = pair
    own = random_direction(4)
    path = own.save(tmp_path / "own.safetensors")
    run = plain(model, tokenizer, steer=(own, -6))
    record = json.loads(json.dumps(run.record))
    assert record["settings"]["steer"]["file"] == str(path.resolve())
    monkeypatch.setattr(steering, "_KNOWN", {})
    assert finished(nbstream.rerun(record, model, tokenizer)).token_ids == run.token_ids
    random_direction(5).save(path)  # saved over with another direction
    monkeypatch.setattr(steering, "_KNOWN", {})
    with pytest.raises(SteeringUnavailable, match="now holds another one"):
        nbstream.rerun(record, model, tokenizer)
    path.unlink()
    with pytest.raises(SteeringUnavailable, match="cannot be read"):
        nbstream.rerun(record, model, tokenizer)


def test_a_direction_saved_after_the_setting_was_made_is_named_by_its_file(pair, tmp_path):
    model, tokenizer = pair
    own = random_direction(6)
    widget_settings = nbstream.settings.validate_settings({"steer": (own, 2)})
    path = own.save(tmp_path / "later.safetensors")
    run = plain(model, tokenizer, **widget_settings)
    assert run.record["settings"]["steer"]["file"] == str(path.resolve())


def test_a_recording_replays_a_steered_run_and_keeps_its_steer(pair, sea, tmp_path, monkeypatch):
    model, tokenizer = pair
    run = plain(model, tokenizer, steer=(sea, STRENGTH), alternatives=3)
    path = run.save(tmp_path / "steered.json")
    monkeypatch.setattr(steering, "_KNOWN", {})  # a replay needs no direction, nor the model
    replayed = finished(nbstream.replay(path, speed=None))
    assert replayed.result == run.result and replayed.token_ids == run.token_ids
    assert replayed.record["settings"]["steer"] == run.record["settings"]["steer"]
    assert nbstream.load(path).record["settings"]["steer"]["strength"] == STRENGTH


# -- the widgets ------------------------------------------------------------------------------
def test_a_widget_steers_from_its_settings_and_each_call(pair, sea):
    model, tokenizer = pair
    expected = {s: plain(model, tokenizer, steer=(sea, s)).result for s in (4.0, -4.0)}
    w = nbstream.StreamWidget(model, tokenizer, steer=(sea, 4.0), **GREEDY)
    try:
        assert w.generate(PROMPT).wait(60) == expected[4.0]
        assert w.generate(PROMPT, steer=(sea, -4.0)).wait(60) == expected[-4.0]
        assert w.generate(PROMPT).wait(60) == expected[4.0]
    finally:
        w.close()


def test_compare_columns_that_differ_only_in_strength_pull_one_prompt_three_ways(pair, sea):
    model, tokenizer = pair
    strengths = (0.0, STRENGTH, -STRENGTH)
    expected = {s: plain(model, tokenizer, steer=(sea, s)).result for s in strengths}
    assert len(set(expected.values())) == 3
    cw = nbstream.CompareWidget(
        models=[(model, tokenizer)] * 3,
        settings=[{"steer": (sea, s)} for s in strengths],
        prompt=PROMPT,
        blind=True,
        **GREEDY,
    )
    try:
        cw._shuffler = random.Random(7)
        cw.generate()
        cw.wait(60)
        # Hidden: nothing a user can read says which strength a column had (the page's
        # code, _esm and _css, names the slider's traits: left out).
        states = [
            {k: v for k, v in column.get_state().items() if k not in ("_esm", "_css")}
            for column in cw.columns
        ]
        shown = [
            repr(cw),
            json.dumps(cw.records, default=str),
            json.dumps(cw._fallback(), default=str),
            *(json.dumps(state, default=str) for state in states),
            *(json.dumps(column._shown_fallback(), default=str) for column in cw.columns),
        ]
        for text in shown:
            assert '"strength"' not in text and sea.digest[:12] not in text, text[:300]
            assert "steer +" not in text and "steer -" not in text, text[:300]
        assert all(s["steer_strength"] is None and s["steer_direction"] is None for s in states)
        assert all(record["settings"] == {} for record in cw.records)
        cw.reveal()
        for column, record in zip(cw.columns, cw.records, strict=True):
            strength = record["settings"]["steer"]["strength"]
            assert column.run.result == expected[strength]
        assert sorted(r["settings"]["steer"]["strength"] for r in cw.records) == sorted(strengths)
        # Revealed, each column's heading says its strength: three columns of one model
        # that differ only in it are told apart.
        for column, record in zip(cw.columns, cw.records, strict=True):
            strength = record["settings"]["steer"]["strength"]
            assert f"steer {strength:+g} at layer {sea.layer}" in column.label, column.label
    finally:
        cw.close()
