"""``expect="json"``: the stream as usual, then complete (with ``value``) only if the final
text parses; otherwise failed with where and why, the text kept."""

from __future__ import annotations

import json

import pytest

import nbstream
from nbstream.generation import InvalidJSON
from nbstream.testing import forced_model

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

VALID = '{"name": "Ada", "tags": ["math", 1843], "ok": true}'


def test_valid_json_completes_with_its_value():
    model, tokenizer = forced_model(VALID)
    run = nbstream.stream(model, tokenizer, "Describe Ada", max_new_tokens=60, expect="json")
    chunks = list(run)
    assert len(chunks) > 1  # streamed as usual, not held until the end
    assert run.status == "complete"
    assert "".join(chunks) == run.result == VALID
    assert run.value == {"name": "Ada", "tags": ["math", 1843], "ok": True}
    assert run.metrics["finish_reason"] == "eos"


@pytest.mark.parametrize("text, value", [("42", 42), (" [1, 2] ", [1, 2]), ("null", None)])
def test_any_json_value(text, value):
    model, tokenizer = forced_model(text)
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=20, expect="json")
    run.wait()
    assert run.status == "complete"
    assert run.value == value


def test_invalid_json_fails_with_where_and_keeps_the_text():
    text = '{"name": "Ada" "year": 1843}'
    model, tokenizer = forced_model(text)
    run = nbstream.stream(model, tokenizer, "Describe Ada", max_new_tokens=60, expect="json")
    with pytest.raises(nbstream.GenerationFailed) as info:
        run.wait()
    message = str(info.value)
    assert "not valid JSON" in message
    assert "line 1, column 16 (character 15)" in message
    assert info.value.partial_text == text
    assert run.status == "failed"
    assert run.result is None
    assert run.value is None
    assert run.partial_text == text
    assert isinstance(run.error, InvalidJSON)
    assert (run.error.lineno, run.error.colno, run.error.pos) == (1, 16, 15)
    assert isinstance(run.error.__cause__, json.JSONDecodeError)
    assert run.metrics["finish_reason"] == "error"


def test_json_cut_off_by_max_new_tokens_says_to_raise_it():
    model, tokenizer = forced_model(VALID)
    run = nbstream.stream(model, tokenizer, "Describe Ada", max_new_tokens=5, expect="json")
    with pytest.raises(nbstream.GenerationFailed, match="raise max_new_tokens"):
        run.wait()
    assert VALID.startswith(run.partial_text)


def test_json_in_a_code_fence_gets_a_hint():
    model, tokenizer = forced_model('```json\n{"a": 1}\n```')
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=30, expect="json")
    with pytest.raises(nbstream.GenerationFailed, match="code fence"):
        run.wait()


def test_partial_text_is_never_validated(probe):
    # Every prefix of VALID is invalid JSON; midway, the run is simply running.
    model, tokenizer = forced_model(VALID)
    p = probe(model)
    p.on_call = lambda calls: p.hold() if calls == 6 else None
    run = nbstream.stream(model, tokenizer, "Describe Ada", max_new_tokens=60, expect="json")
    assert p.held.wait(30)
    assert run.status == "running"
    assert run.error is None
    assert run.partial_text and VALID.startswith(run.partial_text)
    p.release()
    assert run.wait() == VALID


def test_expect_with_a_stop_string_parses_the_cut_text():
    model, tokenizer = forced_model('{"a": 1}\nEND and then some chatter')
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=40, expect="json", stop=["END"])
    assert run.wait() == '{"a": 1}\n'
    assert run.value == {"a": 1}
    assert run.metrics["finish_reason"] == "stop"


def test_value_is_none_without_expect():
    model, tokenizer = forced_model(VALID)
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=60)
    assert run.wait() == VALID
    assert run.value is None


def test_cancelled_run_with_expect_is_cancelled_not_invalid(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=4000, expect="json")
    next(iter(run))
    run.stop()
    with pytest.raises(nbstream.GenerationCancelled):
        run.wait()
    assert run.value is None
    assert run.error is None


def test_widget_value_mirrors_the_last_run():
    model, tokenizer = forced_model(VALID)
    w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=60)
    assert w.value is None
    w.generate("Describe Ada", expect="json")
    w.wait()
    assert w.value == json.loads(VALID)
    assert w.value == w.run.value
    # A later run without expect: no value.
    w.generate("Again")
    w.wait()
    assert w.result == VALID
    assert w.value is None
    w.close()
