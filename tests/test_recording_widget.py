"""A widget given a recording: ``StreamWidget(nbstream.load(path))`` replays its answer.

The widgets are driven as their front end drives them (custom messages, trait changes);
what they send to their views is captured from ``send``. No assertion depends on timing:
a Stop uses a recording whose tokens were recorded a minute apart.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import Recorder, tokens_of, wait_followers

import nbstream
from nbstream.backends import resolve_backend
from nbstream.backends.replay import (
    RECORDING_CANNOT_BRANCH,
    RECORDING_HAS_NO_LOGITS,
    ReplayBackend,
)
from nbstream.recording import Recording
from nbstream.testing import forced_model, tiny_model

# Bounds a wait that must end; never the expected duration of anything.
HANG_S = 60.0
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    return tiny_model(one_line=True)


def recorded(tiny: tuple[Any, Any], tmp_path: Path, **settings: Any) -> Recording:
    """A short run of the tiny model, saved and loaded back."""
    model, tokenizer = tiny
    run = nbstream.stream(model, tokenizer, "Name a color.", max_new_tokens=12, **settings)
    run.wait()
    return nbstream.load(run.save(tmp_path / "run.json"))


def spread_out(recording: Recording) -> Recording:
    """The same recording with its tokens a minute apart: a replay is still going after one."""
    slow = tuple(
        dataclasses.replace(token, time_s=60.0 * index)
        for index, token in enumerate(recording.tokens)
    )
    return dataclasses.replace(recording, tokens=slow)


def wait_status(w: nbstream.StreamWidget, status: str) -> None:
    deadline = time.monotonic() + HANG_S
    while w.status != status:
        assert time.monotonic() < deadline, f"status stayed {w.status!r}"
        time.sleep(0.01)


def ask(w: nbstream.StreamWidget, **message: Any) -> None:
    """A message from a view, as the comm handler gets it."""
    w._handle_view_message(message)


def test_a_recording_resolves_to_its_replay_at_the_recorded_pace(tmp_path):
    model, tokenizer = forced_model("Blue.")
    run = nbstream.stream(model, tokenizer, "Name a color.", max_new_tokens=8)
    run.wait()
    loaded = nbstream.load(run.save(tmp_path / "blue.json"))
    backend = resolve_backend(loaded, None)
    assert isinstance(backend, ReplayBackend) and backend.recording is loaded
    assert backend.speed == 1.0 and not backend.supports_branching
    # Another pace: the replay backend itself is the widget's model.
    w = nbstream.StreamWidget(ReplayBackend(loaded, speed=None))
    try:
        assert w.prompt == "Name a color." and w.label == "replay"
        w.generate()
        assert w.wait(HANG_S) == "Blue."
        assert w.record is not None and w.record["replay"]["speed"] is None
    finally:
        w.close()
    wait_followers()


def test_a_widget_replays_the_recorded_answer_to_its_prompt(tiny, tmp_path):
    loaded = recorded(tiny, tmp_path)
    w = nbstream.StreamWidget(loaded)
    try:
        assert w.prompt == "Name a color."  # the box starts with the recorded prompt
        assert w.label == "replay"
        assert not w.can_trace and not w.can_explain  # no trace was recorded
        rec = Recorder(w)
        run = w.generate()  # the box's prompt
        assert w.wait(HANG_S) == loaded.text
        wait_status(w, "complete")
        assert w.result == loaded.text and run.result == loaded.text
        assert w.metrics["finish_reason"] == loaded.finish_reason
        assert w.record is not None and w.record["replay"]["speed"] == 1.0
        assert "".join(m["text"] for m in rec.deltas(w.run_id)) == loaded.text
        # Run again, by the prompt given: the same answer.
        w.generate("Name a color.")
        assert w.wait(HANG_S) == loaded.text
    finally:
        w.close()
    wait_followers()


def test_a_prompt_that_was_not_recorded_is_refused_and_nothing_starts(tiny, tmp_path):
    loaded = recorded(tiny, tmp_path)
    w = nbstream.StreamWidget(loaded)
    try:
        with pytest.raises(ValueError, match=r"the prompt it recorded is 'Name a color\.'"):
            w.generate("Name a fruit.")
        assert w.run is None and w.run_id == 0 and w.status == "idle"
        assert w.prompt == "Name a color."
        # From the view: the words are the input error, and nothing starts either.
        ask(w, type="run", prompt="Name a fruit.")
        assert "the prompt it recorded is 'Name a color.'" in w.input_error
        assert w.run is None and w.run_id == 0 and w.status == "idle"
    finally:
        w.close()


def test_stop_during_a_replay_ends_cancelled_with_partial_text_and_no_result(tiny, tmp_path):
    loaded = spread_out(recorded(tiny, tmp_path))
    w = nbstream.StreamWidget(loaded)
    try:
        run = w.generate()
        first = next(iter(run))  # recorded at once; the next one a minute later
        assert w.stop()
        with pytest.raises(nbstream.GenerationCancelled):
            w.wait(HANG_S)
        wait_status(w, "cancelled")
        assert w.result is None and run.result is None
        assert w.partial_text.startswith(first)
        assert loaded.text.startswith(w.partial_text)
        assert len(w.partial_text) < len(loaded.text)
        data, _metadata = w._repr_mimebundle_()
        assert "cancelled" in data["text/plain"] and "partial answer" in data["text/plain"]
    finally:
        w.close()
    wait_followers()


def test_the_saved_output_says_it_is_a_replay_never_a_live_model(tiny, tmp_path):
    loaded = recorded(tiny, tmp_path)
    w = nbstream.StreamWidget(loaded)
    try:
        data, _metadata = w._repr_mimebundle_()
        assert data[WIDGET_VIEW]["model_id"] == w.model_id
        assert data["text/plain"].startswith(
            "nbstream · replay of a recorded run, not a live model · idle"
        )
        w.generate()
        text = w.wait(HANG_S)
        data, _metadata = w._repr_mimebundle_()
        assert data["text/plain"].startswith(
            "nbstream · replay of a recorded run, not a live model · complete"
        )
        assert data["text/plain"].endswith(text)
        assert data["text/markdown"].startswith(
            "**nbstream** · *replay of a recorded run, not a live model* · **complete**"
        )
        assert repr(w).startswith("<StreamWidget replay status=")
    finally:
        w.close()
    # A widget on the model says nothing of a replay.
    live = nbstream.StreamWidget(*tiny, max_new_tokens=3)
    try:
        assert "replay" not in live._repr_mimebundle_()[0]["text/plain"]
        assert live.label == "" and "replay" not in repr(live)
    finally:
        live.close()
    wait_followers()


def test_branching_and_the_sampling_explainer_refuse_in_words_that_say_why(tiny, tmp_path):
    loaded = recorded(tiny, tmp_path, alternatives=3)
    w = nbstream.StreamWidget(loaded)
    try:
        assert w.can_trace and not w.can_explain
        assert w.branch_unavailable == RECORDING_CANNOT_BRANCH
        assert RECORDING_CANNOT_BRANCH.startswith(
            "A recording cannot branch: it has only the tokens it recorded"
        )
        w.generate()
        w.wait(HANG_S)
        run, run_id = w.run, w.run_id
        alternative = run.trace[0].alternatives[1]
        with pytest.raises(ValueError, match="A recording cannot branch"):
            w.branch(0, alternative)
        # The popover's Continue: the same words, and nothing starts.
        ask(w, type="branch", run_id=run_id, step=0, token=alternative.id)
        assert "A recording cannot branch" in w.input_error
        assert w.run is run and w.run_id == run_id and w.branches == []
        assert w.show(0) is run  # showing the recorded answer again still works
        # The sampling explainer: a request gets the words as its error.
        replies: list[dict[str, Any]] = []
        w._send_msg = replies.append  # type: ignore[method-assign]
        ask(w, type="distribution", view="v1", request=1, run_id=run_id, step=0)
        deadline = time.monotonic() + HANG_S
        while not replies:
            assert time.monotonic() < deadline, "no reply to the distribution request"
            time.sleep(0.01)
        assert replies[0]["error"] == RECORDING_HAS_NO_LOGITS
        assert RECORDING_HAS_NO_LOGITS.startswith("A recording has no logits")
        with pytest.raises(ValueError, match="A recording has no logits"):
            run.distribution(0)
    finally:
        w.close()
    wait_followers()


def test_the_token_views_show_the_recorded_tokens(tiny, tmp_path):
    loaded = recorded(tiny, tmp_path, alternatives=3)
    w = nbstream.StreamWidget(loaded, show_alternatives=True)
    try:
        rec = Recorder(w)
        w.generate()
        w.wait(HANG_S)
        wait_followers()
        held = tokens_of(rec, w.run_id)
        assert [entry[0] for entry in held] == loaded.token_ids
        for (token_id, text, kind, logprob, rank, alts), token in zip(
            held, loaded.tokens, strict=True
        ):
            assert (token_id, text, kind) == (token.id, token.text, "text")
            assert logprob == pytest.approx(token.logprob, abs=1e-4)
            assert rank == token.rank
            assert [alt[0] for alt in alts] == list(token.alternative_ids)
            assert [alt[1] for alt in alts] == [alt.text for alt in token.alternatives]
            assert [alt[-1] for alt in alts] == list(token.cut)
    finally:
        w.close()
    wait_followers()


def test_a_recording_without_a_trace_has_no_tokens_to_show(tiny, tmp_path):
    loaded = recorded(tiny, tmp_path)
    w = nbstream.StreamWidget(loaded, show_probabilities=True)
    try:
        assert not w.can_trace
        with pytest.raises(ValueError, match="this recording has no token probabilities"):
            w.generate(alternatives=3)
        assert w.run is None
    finally:
        w.close()


def test_a_replayed_thinking_run_shows_its_thinking(tmp_path):
    model, tokenizer = forced_model("<think>Two plus two.</think>Four.")
    run = nbstream.stream(model, tokenizer, "2+2?", max_new_tokens=30)
    run.wait()
    w = nbstream.StreamWidget(nbstream.load(run.save(tmp_path / "thinking.json")))
    try:
        w.generate()
        assert w.wait(HANG_S) == "Four."
        assert w.run.thinking == "Two plus two."
        data, _metadata = w._repr_mimebundle_()
        assert "replay of a recorded run" in data["text/plain"]
        assert "Two plus two." in data["text/plain"]
    finally:
        w.close()
    wait_followers()


def test_a_recording_of_messages_replays_from_run_and_generate(tiny, tmp_path):
    """A lesson's prompt with a system message: the box shows the question, Run replays it."""
    model, tokenizer = tiny
    messages = [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Name a color."},
    ]
    run = nbstream.stream(model, tokenizer, messages, max_new_tokens=8)
    run.wait()
    loaded = nbstream.load(run.save(tmp_path / "messages.json"))
    w = nbstream.StreamWidget(loaded)
    try:
        assert w.prompt == "Name a color."  # what was asked, not an empty box
        w.generate()
        assert w.wait(HANG_S) == loaded.text
        assert w.run.prompt == messages  # the recorded messages, system message and all
        wait_status(w, "complete")
        # Run from the view with the box as it shows: the same replay, no input error.
        ask(w, type="run", prompt=w.prompt)
        assert w.input_error == "" and w.run_id == 2
        assert w.wait(HANG_S) == loaded.text and w.run.prompt == messages
        wait_status(w, "complete")
        # Another question is still refused, in the words that name the recorded prompt.
        with pytest.raises(ValueError, match=r"this recording has no answer to 'Name a fruit\.'"):
            w.generate("Name a fruit.")
    finally:
        w.close()
    wait_followers()


def shown_tokens(w: nbstream.StreamWidget, *prompt: Any, **settings: Any) -> list[Any]:
    """``[shown, kind]`` of each token the views got for one run of ``w``."""
    try:
        rec = Recorder(w)
        w.generate(*prompt, **settings)
        w.wait(HANG_S)
        wait_followers()
        return [entry[1:3] for entry in tokens_of(rec, w.run_id)]
    finally:
        w.close()
        wait_followers()


def test_the_token_views_show_a_replayed_byte_and_special_token_as_live(tmp_path):
    model, tokenizer = forced_model("你好<|im_start|>")
    w = nbstream.StreamWidget(model, tokenizer, show_alternatives=True)
    live = shown_tokens(w, "Say hi", max_new_tokens=10)
    assert ["e4 bd", "bytes"] in live and ["<|im_start|>", "special"] in live
    loaded = nbstream.load(w.run.save(tmp_path / "kinds.json"))
    replayed = shown_tokens(nbstream.StreamWidget(loaded, show_alternatives=True))
    assert replayed == live
