"""The ``stop`` setting: the run ends complete at the first stop string, which is never shown.

Mostly on ``forced_model`` (a tiny model that answers a given text), so the text and its
token boundaries are known; one test on the tiny model's sampled gibberish and one on the
real default model.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbstream
from nbstream.streaming import StopFilter
from nbstream.testing import forced_model

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

ANSWER = "The answer is 42.\nEND of answer and more text"


def tokens_until(tokenizer, text: str, needle: str) -> int:
    """How many of ``text``'s tokens it takes until the decoded text contains ``needle``."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    for n in range(1, len(ids) + 1):
        if needle in tokenizer.decode(ids[:n]):
            return n
    raise AssertionError(f"{needle!r} not in {text!r}")


def test_stop_string_ends_the_run_complete_and_is_left_out():
    model, tokenizer = forced_model(ANSWER)
    run = nbstream.stream(model, tokenizer, "What is it?", max_new_tokens=40, stop=["END"])
    chunks = list(run)
    assert run.status == "complete"
    assert run.metrics["finish_reason"] == "stop"
    assert run.result == "The answer is 42.\n"
    assert "".join(chunks) == run.result == run.partial_text == run.wait()
    assert "END" not in "".join(chunks)


def test_generation_halts_at_the_token_that_completes_the_stop_string():
    model, tokenizer = forced_model(ANSWER)
    run = nbstream.stream(model, tokenizer, "What is it?", max_new_tokens=40, stop=["END"])
    run.wait()
    needed = tokens_until(tokenizer, ANSWER, "END")
    assert run.metrics["tokens"] == needed
    assert needed < len(tokenizer.encode(ANSWER, add_special_tokens=False))


def test_nobody_reading_still_halts_it():
    # No reader decodes while it runs (the worker only wait()s): the model itself stops.
    text = "ab " * 30 + "STOP" + " cd" * 200
    model, tokenizer = forced_model(text)
    run = nbstream.stream(model, tokenizer, "Go", max_new_tokens=400, stop=["STOP"])
    assert run.join(60)
    assert run.metrics["tokens"] == tokens_until(tokenizer, text, "STOP")
    assert run.result == "ab " * 30


def test_the_first_stop_string_to_end_wins():
    model, tokenizer = forced_model(ANSWER)
    run = nbstream.stream(
        model, tokenizer, "What is it?", max_new_tokens=40, stop=["is 42.", "42", "more"]
    )
    assert run.wait() == "The answer is "
    # Two ending at the same place: the longer one is cut (its start comes first).
    run = nbstream.stream(model, tokenizer, "What is it?", max_new_tokens=40, stop=["42", "s 42"])
    assert run.wait() == "The answer i"


def test_a_possible_start_of_a_stop_string_is_held_back_then_released(probe):
    text = "Status: ENTRY done"
    model, tokenizer = forced_model(text)
    steps = tokens_until(tokenizer, text, "Status: EN")
    p = probe(model)
    # Hold the model at the step after the one that produced "EN".
    p.on_call = lambda calls: p.hold() if calls == steps else None
    run = nbstream.stream(model, tokenizer, "Report", max_new_tokens=40, stop=["END"])
    assert p.held.wait(30)
    # "EN" could still become "END": it is not shown yet, and nothing after it exists.
    assert run.partial_text == "Status: "
    assert len(run.token_ids) == steps
    p.release()
    # "ENT" can no longer be a stop string: all of it is shown, and the run is not cut.
    assert run.wait() == text
    assert run.metrics["finish_reason"] == "eos"


def test_a_held_tail_is_released_when_the_text_ends():
    model, tokenizer = forced_model("waiting for EN")
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=40, stop=["END"])
    assert "".join(run) == run.result == "waiting for EN"
    assert run.metrics["finish_reason"] == "eos"


def test_a_stop_string_across_the_prompt_does_not_stop():
    # The chat template ends the prompt with "assistant\n"; only generated text counts.
    model, tokenizer = forced_model("fine, thanks")
    run = nbstream.stream(model, tokenizer, "How are you?", max_new_tokens=20, stop=["\nfine"])
    assert run.wait() == "fine, thanks"
    assert run.metrics["finish_reason"] == "eos"


def test_stop_string_at_the_very_start_gives_an_empty_complete_answer():
    model, tokenizer = forced_model("END right away")
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=20, stop=["END"])
    assert list(run) == []
    assert run.result == ""
    assert run.status == "complete"
    assert run.metrics["finish_reason"] == "stop"


def test_multibyte_stop_string():
    model, tokenizer = forced_model("café ☕ then 🎉 party")
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=30, stop=["🎉"])
    assert run.wait() == "café ☕ then "
    assert run.metrics["finish_reason"] == "stop"


def test_stop_on_the_tiny_models_sampled_text_cuts_the_same_text(tiny_line):
    model, tokenizer = tiny_line
    full = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=60, temperature=1.0, seed=5)
    text = full.wait()
    # A piece of the text whose first occurrence is well inside it.
    start = next(i for i in range(len(text) // 3, len(text)) if text.find(text[i : i + 5]) == i)
    stop = text[start : start + 5]
    run = nbstream.stream(
        model, tokenizer, "Hi", max_new_tokens=60, temperature=1.0, seed=5, stop=[stop]
    )
    assert run.wait() == text[:start]
    assert run.metrics["finish_reason"] == "stop"
    assert run.metrics["tokens"] < full.metrics["tokens"]
    assert run.token_ids == full.token_ids[: run.metrics["tokens"]]


def test_stop_after_a_user_stop_is_still_cancelled(tiny_line):
    model, tokenizer = tiny_line
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=4000, stop=["never there"])
    next(iter(run))
    run.stop()
    with pytest.raises(nbstream.GenerationCancelled):
        run.wait()
    assert run.result is None


@pytest.mark.model
def test_stop_string_on_the_default_model(real_model, greedy):
    model, tokenizer = real_model
    prompt = "Count from 1 to 10, separated by commas."
    reference = greedy(model, tokenizer, prompt, 30)[1]
    assert "5" in reference
    run = nbstream.stream(model, tokenizer, prompt, max_new_tokens=30, stop=["5"])
    assert run.wait() == reference[: reference.index("5")]
    assert run.metrics["finish_reason"] == "stop"
    assert run.metrics["tokens"] < 30


# -- the filter on its own --------------------------------------------------------------------

STOPS = ("END", "\n\n", "ab", "éé")


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet="aAbBEND \néx", max_size=60),
    cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=10),
)
def test_filter_output_does_not_depend_on_how_text_is_split(text, cuts):
    pieces = [
        text[i:j] for i, j in zip([0, *sorted(cuts)], [*sorted(cuts), len(text)], strict=True)
    ]
    shown = ""
    f = StopFilter(STOPS)
    for piece in pieces:
        shown += f.feed(piece)
        if f.found is None:
            seen = shown + f.held
            # Only a tail that could still begin a stop string is held back, and all of it.
            assert not f.held or any(s.startswith(f.held) for s in STOPS)
            for n in range(len(f.held) + 1, len(seen) + 1):
                assert not any(s.startswith(seen[-n:]) for s in STOPS)
    if f.found is None:
        shown += f.flush()
    one = StopFilter(STOPS)
    whole = one.feed(text) + (one.flush() if one.found is None else "")
    assert shown == whole
    assert f.found == one.found
    if f.found is None:
        assert shown == text
    else:
        assert text.startswith(shown + f.found)
        assert not any(s in shown + f.found[:-1] for s in STOPS)


def test_filter_rejects_empty_stop_strings():
    with pytest.raises(ValueError):
        StopFilter([])
    with pytest.raises(ValueError):
        StopFilter(["a", ""])


@pytest.mark.parametrize("read", ["wait", "iterate"])
def test_a_stop_string_in_a_branchs_forced_tokens_ends_it_before_generating(tiny_line, read):
    # The one-line model never writes a newline itself: the branch forces one at step 2.
    model, tokenizer = tiny_line
    (newline,) = tokenizer.encode("\n", add_special_tokens=False)
    parent = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=200, stop=["\n"])
    parent.wait()
    assert parent.metrics["finish_reason"] == "length"
    run = parent.branch(2, newline)
    text = run.wait() if read == "wait" else "".join(run)
    assert run.status == "complete" and run.metrics["finish_reason"] == "stop"
    assert text == tokenizer.decode(parent.token_ids[:2])
    # Whoever reads (or nobody), the model stops at once: nothing beyond the forced tokens.
    assert run.token_ids == [*parent.token_ids[:2], newline]


def test_a_stop_string_across_a_branchs_forced_tokens_and_its_first_new_one(tiny_line):
    model, tokenizer = tiny_line
    parent = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=12)
    parent.wait()
    (forced,) = tokenizer.encode(" Paris", add_special_tokens=False)
    free = parent.branch(2, forced)
    free.wait()
    prefix, first = free.token_ids[:3], free.token_ids[3]
    before = tokenizer.decode(prefix)
    new = tokenizer.decode([*prefix, first])[len(before) :]
    assert new
    # The shortest that starts in the forced text and is not all in it.
    stop = min(
        (before[-k:] + new[:m] for k in range(1, len(before) + 1) for m in (1, len(new))),
        key=lambda candidate: (candidate in before, len(candidate)),
    )
    assert stop not in before
    run = parent.branch(2, forced, stop=[stop])
    run.wait()
    assert run.metrics["finish_reason"] == "stop"
    assert run.token_ids == [*prefix, first]  # halted by the token that completed it
