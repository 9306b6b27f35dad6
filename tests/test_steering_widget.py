"""The Settings panel's Steering slider, kernel side: ``w.steer`` (a direction, from Python),
``steer_strength`` (the slider, both ways; None: off) and what a run takes from them.

The page's side is tests/frontend/test_steer_frontend.py; here the page is played by what it
sends (a state update, a Run message carrying the panel's values)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

import nbstream
from nbstream.steering import Direction, SteeringUnavailable
from nbstream.widgets.blind import shown_state

torch = pytest.importorskip("torch")

PROMPT = "Tell me something."
GREEDY = {"max_new_tokens": 6, "temperature": 0}


@pytest.fixture(scope="module")
def pair(tiny_line):
    model, tokenizer = tiny_line
    return copy.deepcopy(model), tokenizer


@pytest.fixture(scope="module")
def sea(pair):
    vector = torch.randn(64, generator=torch.Generator().manual_seed(21))
    return Direction(vector=vector, layer=1)


def text(model: Any, tokenizer: Any, **settings: Any) -> str:
    run = nbstream.stream(model, tokenizer, PROMPT, **{**GREEDY, **settings})
    return run.wait(60)


@pytest.fixture
def widget(pair):
    w = nbstream.StreamWidget(*pair, **GREEDY)
    yield w
    w.close()


def test_the_slider_shows_only_while_the_widget_has_a_direction(widget, sea):
    assert widget.steer is None and widget.steer_direction is None
    assert widget.get_state()["steer_direction"] is None  # the page: no slider
    widget.steer = sea
    shown = widget.get_state()["steer_direction"]
    assert shown == {
        "layer": 1,
        "size": 64,
        "norm": pytest.approx(float(sea.vector.norm())),
        "digest": sea.digest,
        "limit": 10.0,
    }
    json.dumps(shown)
    assert widget.steer_strength is None  # off until moved
    widget.steer_strength = 25.0  # from Python, beyond the usual reach: the slider reaches it
    assert widget.steer_direction["limit"] == 25
    widget.steer = None
    assert widget.steer_direction is None and widget.steer_strength is None


def test_a_run_takes_the_sliders_strength_and_nothing_while_it_is_off(widget, pair, sea):
    widget.steer = sea
    assert widget.generate(PROMPT).wait(60) == text(*pair)  # off
    assert widget.run.record["settings"]["steer"] is None
    widget.set_state({"steer_strength": 6})  # the page moved the slider
    assert widget.steer_strength == 6
    assert widget.generate(PROMPT).wait(60) == text(*pair, steer=(sea, 6))
    assert widget.run.record["settings"]["steer"]["strength"] == 6.0
    # A call's own steer wins over the slider.
    assert widget.generate(PROMPT, steer=(sea, -6)).wait(60) == text(*pair, steer=(sea, -6))


def test_a_run_clicked_before_the_sliders_update_arrived_uses_the_pages_value(widget, pair, sea):
    widget.steer = sea
    message = {"type": "run", "settings": {"steer_strength": -6}, "prompt": PROMPT}
    widget._handle_message(widget, message, [])
    assert widget.input_error == ""
    widget.wait()
    assert widget.steer_strength == -6
    assert widget.run.result == text(*pair, steer=(sea, -6))


def test_the_slider_overrides_a_steer_the_widget_was_made_with(pair, sea):
    w = nbstream.StreamWidget(*pair, steer=(sea, 6), **GREEDY)
    try:
        assert w.generate(PROMPT).wait(60) == text(*pair, steer=(sea, 6))
        w.steer, w.steer_strength = sea, -6
        assert w.generate(PROMPT).wait(60) == text(*pair, steer=(sea, -6))
        w.steer_strength = None  # off: the widget's own steer again
        assert w.generate(PROMPT).wait(60) == text(*pair, steer=(sea, 6))
    finally:
        w.close()


def test_a_strength_that_is_not_a_number_is_shown_and_no_run_starts(widget, sea):
    widget.steer = sea
    widget.set_state({"steer_strength": "strong"})
    assert "finite number" in widget.settings_errors["steer_strength"]
    with pytest.raises(ValueError, match="fix the settings first"):
        widget.generate(PROMPT)
    assert widget.run is None
    widget.set_state({"steer_strength": 2})
    assert "steer_strength" not in widget.settings_errors


def test_a_direction_the_model_cannot_take_is_refused_when_given(widget, pair):
    with pytest.raises(TypeError, match=r"must be an nbstream\.Direction"):
        widget.steer = "the sea"
    narrow = Direction(vector=torch.ones(32), layer=0)
    with pytest.raises(SteeringUnavailable, match="has 32 numbers"):
        widget.steer = narrow
    assert widget.steer is None and widget.steer_direction is None


def test_a_server_or_a_replay_widget_refuses_a_direction(pair, sea, tmp_path):
    server = nbstream.Endpoint("http://127.0.0.1:9/v1", "some-model", server="vllm")
    run = nbstream.stream(*pair, PROMPT, **GREEDY)
    run.wait(60)
    recording = nbstream.load(run.save(tmp_path / "r.json"))
    for model in (server, recording):
        w = nbstream.StreamWidget(model)
        try:
            with pytest.raises(ValueError, match=r"steer: .* cannot"):
                w.steer = sea
        finally:
            w.close()


def test_a_hidden_blind_round_shows_no_slider():
    state = {"steer_strength": 4.0, "steer_direction": {"layer": 1, "digest": "ab"}}
    assert shown_state(state) == {"steer_strength": None, "steer_direction": None}
