"""The core invariant on the real embedded default model (SmolLM2-135M-Instruct).

Few and short: each token costs tens of milliseconds on this machine's CPU.
"""

from __future__ import annotations

import pytest

import nbstream

pytestmark = [pytest.mark.model, pytest.mark.usefixtures("no_leftover_runs")]

JAPANESE = 'How do you say "thank you" in Japanese? Answer in Japanese script.'


@pytest.mark.parametrize(
    "prompt, max_new_tokens, finish",
    [
        ("Name two colors.", 60, "eos"),
        (
            [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": 'Say "China" in Chinese characters, then explain.'},
            ],
            24,
            "length",
        ),
    ],
    ids=["string", "messages"],
)
def test_streamed_text_equals_greedy_generate(real_model, greedy, prompt, max_new_tokens, finish):
    model, tokenizer = real_model
    assert not model.generation_config.do_sample  # so default settings are greedy
    run = nbstream.stream(model, tokenizer, prompt, max_new_tokens=max_new_tokens)
    chunks = list(run)
    ids, text = greedy(model, tokenizer, prompt, max_new_tokens)
    assert text.strip()
    assert run.status == "complete"
    assert "".join(chunks) == run.result == text
    assert run.token_ids == ids
    assert run.metrics["tokens"] == len(ids)
    assert run.metrics["finish_reason"] == finish
    assert not any("\ufffd" in c for c in chunks)
    if finish == "eos":
        assert len(ids) < max_new_tokens
        assert ids[-1] == model.generation_config.eos_token_id
        assert "<|im_end|>" not in text  # the end token is special: never shown
    else:
        assert len(ids) == max_new_tokens


def test_japanese_cut_at_the_length_limit(real_model):
    # The model answers in kana; 40 tokens end in the middle of a character. Chunks are whole
    # characters; the end shows what the full decode shows.
    model, tokenizer = real_model
    run = nbstream.stream(model, tokenizer, JAPANESE, max_new_tokens=40)
    chunks = list(run)
    full = tokenizer.decode(run.token_ids, skip_special_tokens=True)
    assert run.result == "".join(chunks) == full
    assert any("\u3040" <= ch <= "\u30ff" for ch in full)  # kana arrived
    assert run.metrics["finish_reason"] == "length"
    for chunk in chunks[:-1]:
        assert "\ufffd" not in chunk
    assert full.count("\ufffd") == "".join(chunks).count("\ufffd")


def test_stop_mid_stream(real_model, greedy):
    model, tokenizer = real_model
    prompt = "Write a long story about a dragon."
    run = nbstream.stream(model, tokenizer, prompt, max_new_tokens=60)
    seen = []
    for chunk in run:
        seen.append(chunk)
        break
    assert run.stop() is True
    at_stop = run.metrics["tokens"]
    with pytest.raises(nbstream.GenerationCancelled):
        run.wait()
    assert run.status == "cancelled"
    assert run.result is None
    assert run.metrics["tokens"] - at_stop <= 1
    assert run.metrics["tokens"] < 60
    # What was shown is the start of what the model would have said.
    reference = greedy(model, tokenizer, prompt, run.metrics["tokens"])[1]
    assert run.partial_text == reference
    assert run.partial_text.startswith("".join(seen))
