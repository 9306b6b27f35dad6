"""The settings panel's kernel side (nbstream/widgets/settings_panel.py) where the page meets
it: a whole number too large for a JavaScript number travels as its digits, both ways."""

from __future__ import annotations

import pytest

import nbstream

BIG = 2**64 - 1  # the largest seed a torch generator takes


def test_a_seed_the_page_sends_as_digits_is_the_integer_and_a_run_uses_it(tiny_line):
    model, tokenizer = tiny_line
    w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=3, temperature=1.0)
    # The page's Run carries the panel's values; a seed past 2**53 - 1 as its digits.
    w._handle_message(w, {"type": "run", "settings": {"seed": str(BIG)}, "prompt": "Hi"}, [])
    assert w.seed == BIG and isinstance(w.seed, int)
    assert w.settings_errors == {}
    assert w.input_error == ""
    w.wait()
    assert w.run is not None and w.run.settings["seed"] == BIG
    # A state update from the page (the field saved on blur) is read the same way.
    w.set_state({"seed": "+9007199254740993"})
    assert w.seed == 2**53 + 1


def test_a_big_integer_reaches_the_page_exactly_and_other_text_stays_refused(tiny_line):
    model, tokenizer = tiny_line
    w = nbstream.StreamWidget(model, tokenizer)
    w.seed = 2**63 + 1
    # JSON would round it to a float (which a Run would then send back): its digits go.
    assert w.get_state()["seed"] == str(2**63 + 1)
    w.seed = 42
    assert w.get_state()["seed"] == 42
    # Only a number JSON cannot carry is read from text: other text is still refused.
    w.seed = "12"
    assert w.settings_errors["seed"] == "seed must be an int, got '12'"
    w.max_new_tokens = str(2**60)
    assert w.max_new_tokens == 2**60
    assert "absurd" in w.settings_errors["max_new_tokens"]


def test_a_max_new_tokens_over_the_context_is_refused_by_the_kernel_too(tiny):
    """The page refuses it at the field; the kernel holds the same verdict (one state), so
    a run from code is refused as a run from the panel is."""
    model, tokenizer = tiny
    context = model.config.max_position_embeddings
    w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=context + 1)
    message = w.settings_errors["max_new_tokens"]
    assert message == (
        f"max_new_tokens={context + 1} is more than the model's whole context ({context} "
        f"tokens, the prompt included); use less than {context}"
    )
    with pytest.raises(ValueError, match="more than the model's whole context"):
        w.generate("Hi")
    w.max_new_tokens = 5
    assert "max_new_tokens" not in w.settings_errors
    assert w.generate("Hi").wait(60) is not None
