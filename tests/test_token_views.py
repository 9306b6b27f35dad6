"""The kernel side of the teaching views: the toggles and the ``tokens`` messages.

The widgets are driven as their front end drives them (custom messages, trait changes);
what they send to their views is captured from ``send``. The browser side is covered by
tests/frontend/test_tokens_frontend.py and tests/browser/test_tokens_browser.py.
"""

from __future__ import annotations

import json
import math
import time

import pytest
from helpers import Recorder, tokens_of, wait_followers

import nbstream
from nbstream._tokens import TokenPieces
from nbstream.testing import tiny_model


@pytest.fixture
def tiny():
    return tiny_model(one_line=True)


def token_messages(recorder: Recorder) -> list[dict]:
    return [m for _, m in recorder.messages if m["type"] == "tokens"]


def test_no_token_message_while_every_view_is_off(tiny):
    w = nbstream.StreamWidget(*tiny, max_new_tokens=12)
    rec = Recorder(w)
    w.generate("Hello")
    w.wait()
    wait_followers()
    assert w.run.trace is None  # nothing captured either
    assert token_messages(rec) == []
    assert w.can_trace


def test_tokens_view_streams_every_token_with_its_id_and_text(tiny):
    model, tokenizer = tiny
    w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=40, show_tokens=True)
    rec = Recorder(w)
    w.generate("Hello")
    w.wait()
    wait_followers()
    held = tokens_of(rec, w.run_id)
    assert [t[0] for t in held] == w.run.token_ids
    assert len(held) == 40
    # Streamed in several frames, not only at the end.
    assert len([m for m in token_messages(rec) if m["run_id"] == w.run_id]) > 1
    for token_id, text, kind, logprob, rank, alts in held:
        assert kind in ("text", "bytes", "special")
        if kind == "text":
            assert text == tokenizer.decode([token_id])
        # Tokens only: no capture was asked for, so no probabilities.
        assert logprob is None and rank is None and alts is None
    assert w.run.trace is None


def test_probabilities_view_captures_the_next_run_and_sends_logprobs(tiny):
    w = nbstream.StreamWidget(*tiny, max_new_tokens=20)
    rec = Recorder(w)
    w.show_probabilities = True  # from Python, as the toggle in a view does
    w.generate("Hello")
    w.wait()
    wait_followers()
    trace = w.run.trace
    assert trace is not None and len(trace) == 20
    assert len(trace[0].alternatives) == nbstream.widgets.settings_panel.VIEW_ALTERNATIVES
    held = tokens_of(rec, w.run_id)
    assert [t[0] for t in held] == [step.id for step in trace]
    for entry, step in zip(held, trace, strict=True):
        assert entry[3] == pytest.approx(step.logprob, abs=1e-4)
        assert entry[4] == step.rank
        assert entry[5] is None  # alternatives only while that view is on


def test_alternatives_view_sends_candidates_with_cut_marks(tiny):
    w = nbstream.StreamWidget(
        *tiny, max_new_tokens=10, do_sample=True, top_k=2, seed=0, alternatives=4
    )
    rec = Recorder(w)
    w.show_alternatives = True
    w.generate("Hello")
    w.wait()
    wait_followers()
    held = tokens_of(rec, w.run_id)
    assert len(held) == 10
    for entry, step in zip(held, w.run.trace, strict=True):
        alts = entry[5]
        assert [a[0] for a in alts] == [a.id for a in step.alternatives]
        assert [a[4] for a in alts] == list(step.cut)
        # top_k=2: at most two candidates had a chance (which two is decided after the
        # model's own processors, so not always the raw top two).
        assert sum(not a[4] for a in alts) <= 2
        assert any(a[4] for a in alts)
        probs = [math.exp(a[3]) for a in alts]
        assert probs == sorted(probs, reverse=True)


def test_turning_a_view_on_after_the_run_sends_the_whole_list(tiny):
    w = nbstream.StreamWidget(*tiny, max_new_tokens=15, alternatives=3)
    rec = Recorder(w)
    w.generate("Hello")
    w.wait()
    wait_followers()
    assert token_messages(rec) == []
    w.show_tokens = True
    (message,) = token_messages(rec)
    assert message["offset"] == 0 and message["run_id"] == w.run_id
    assert [t[0] for t in message["tokens"]] == w.run.token_ids
    assert message["tokens"][0][3] is not None  # the run captured: logprobs come along
    # Turning on alternatives as well resends the list, now with candidates.
    w.show_alternatives = True
    last = token_messages(rec)[-1]
    assert last["offset"] == 0 and all(len(t[5]) == 3 for t in last["tokens"])
    # Turning everything off sends nothing more.
    count = len(token_messages(rec))
    w.show_tokens = w.show_alternatives = False
    assert len(token_messages(rec)) == count


def test_a_syncing_view_gets_the_tokens_after_the_text(tiny):
    w = nbstream.StreamWidget(*tiny, max_new_tokens=12, show_tokens=True)
    w.generate("Hello")
    w.wait()
    wait_followers()
    rec = Recorder(w)
    w._handle_message(w, {"type": "sync", "page": "p", "view": "v1"}, [])
    kinds = [m["type"] for _, m in rec.messages]
    assert kinds == ["reset", "tokens"]
    assert [t[0] for t in rec.messages[1][1]["tokens"]] == w.run.token_ids


def test_messages_are_plain_json(tiny):
    """No infinities or NaN: a browser's JSON.parse would reject the whole message."""
    w = nbstream.StreamWidget(
        *tiny, max_new_tokens=8, do_sample=True, top_k=1, seed=1, alternatives=100
    )
    rec = Recorder(w)
    w.show_alternatives = True
    w.generate("Hello")
    w.wait()
    wait_followers()
    for message in token_messages(rec):
        json.loads(json.dumps(message, allow_nan=False))


def test_view_toggles_are_checked_in_the_constructor(tiny):
    with pytest.raises(TypeError, match="show_tokens must be True or False"):
        nbstream.StreamWidget(*tiny, show_tokens="yes")


def test_explicit_alternatives_zero_means_no_capture(tiny):
    w = nbstream.StreamWidget(*tiny, max_new_tokens=5, show_probabilities=True)
    w.generate("Hello", alternatives=0)
    w.wait()
    assert w.run.trace is None


def test_a_bad_alternatives_value_is_refused_before_anything_starts(tiny):
    w = nbstream.StreamWidget(*tiny, max_new_tokens=5)
    w.alternatives = 1000
    assert "alternatives" in w.settings_errors
    with pytest.raises(ValueError, match="alternatives"):
        w.generate("Hello")
    assert w.run is None


def test_chat_views_get_every_answer_by_its_turn(tiny):
    chat = nbstream.ChatWidget(*tiny, max_new_tokens=6)
    chat.generate("Hi")
    chat.wait()
    first_run_id = chat.run_id
    chat.generate("Again")
    chat.wait()
    wait_followers()
    rec = Recorder(chat)  # its messages to the views go through send, as every widget's
    chat.show_tokens = True
    messages = token_messages(rec)
    assert {m["run_id"] for m in messages} == {first_run_id, chat.run_id}
    assert all(m["offset"] == 0 and len(m["tokens"]) == 6 for m in messages)


def test_pieces_show_partial_characters_as_bytes_and_special_tokens_as_such(tiny):
    _model, tokenizer = tiny
    pieces = TokenPieces(tokenizer)
    ids = tokenizer.encode("a 😀", add_special_tokens=False)
    shown = [pieces(i) for i in ids]
    kinds = [kind for _, kind in shown]
    assert "bytes" in kinds, shown  # the emoji is split across byte tokens
    raw = b"".join(
        bytes.fromhex(text) if kind == "bytes" else text.encode() for text, kind in shown
    )
    assert raw.decode() == "a 😀"  # nothing lost: the pieces add up to the text
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert pieces(end) == ("<|im_end|>", "special")


def test_pieces_keep_the_space_a_sentencepiece_decoder_drops():
    """Llama/Mistral-style decoders drop a lone token's leading space; the view must not."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "\u2581Hello": 1, "\u2581world": 2, "ly": 3}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    assert tokenizer.decode([2]) == "world"  # what decoding one token alone gives
    pieces = TokenPieces(tokenizer)
    assert pieces(2) == (" world", "text")
    assert pieces(3) == ("ly", "text")  # a piece without the marker gets no space
    # The pieces add up to the text (a text's first space is the decoder's to drop).
    assert "".join(pieces(i)[0] for i in (1, 2, 3)).strip() == tokenizer.decode([1, 2, 3])


def sentencepiece_model():
    """A tiny random Llama on a SentencePiece-style tokenizer (Metaspace: "▁" marks a space).

    Most pieces start a word, so the run's tokens include ones whose decoder drops the
    space when they are decoded alone; one special token, never generated (banned), shows
    up among the alternatives only.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["Hello", "world", "the", "cat", "sat", "on", "a", "mat", "and", "ran"]
    vocab = {"<unk>": 0, "</s>": 1}
    for word in words:
        vocab.setdefault("\u2581" + word, len(vocab))
    for suffix in ("ly", "ing", "s"):
        vocab.setdefault(suffix, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", eos_token="</s>", pad_token="</s>"
    )
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        bos_token_id=None,
        eos_token_id=1,
        pad_token_id=1,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    model.eval()
    model.generation_config.pad_token_id = 1
    model.generation_config.eos_token_id = 1
    # Exactly max_new_tokens: the end token and <unk> never win (they stay in the top k).
    model.generation_config.sequence_bias = [[[0], float("-inf")], [[1], float("-inf")]]
    return model, tokenizer


def test_trace_text_is_the_text_the_token_view_shows_on_a_sentencepiece_tokenizer():
    """``run.trace[i].text`` (and each alternative's) is what the views show, leading
    space included, though the decoder drops it from a token decoded alone."""
    model, tokenizer = sentencepiece_model()
    w = nbstream.StreamWidget(
        model, tokenizer, max_new_tokens=12, alternatives=len(tokenizer), do_sample=True, seed=0
    )
    rec = Recorder(w)
    w.show_alternatives = True
    w.generate("Hello world")
    w.wait()
    wait_followers()
    held = tokens_of(rec, w.run_id)
    trace = w.run.trace
    assert len(held) == len(trace) == 12
    kinds = set()
    for entry, step in zip(held, trace, strict=True):
        token_id, text = entry[:2]
        assert (token_id, text) == (step.id, step.text)
        assert [(a[0], a[1]) for a in entry[5]] == [(a.id, a.text) for a in step.alternatives]
        kinds.update(a[2] for a in entry[5])
    assert {"text", "special"} <= kinds  # every piece of the vocabulary, </s> included
    # The case is exercised: tokens whose lone decode loses the space the piece marks.
    dropped = [s for s in trace if tokenizer.decode([s.id]) != s.text]
    assert dropped, [s.text for s in trace]
    for step in dropped:
        assert step.text == " " + tokenizer.decode([step.id])
        assert tokenizer.convert_ids_to_tokens(step.id).startswith("\u2581")
    assert " world" in {step.text for step in trace} | {
        a.text for step in trace for a in step.alternatives
    }
    # The texts add up to the answer (a text's first space is the decoder's to drop).
    assert "".join(step.text for step in trace).lstrip() == w.run.partial_text.lstrip()


def test_a_probability_that_is_not_finite_is_sent_as_unknown():
    """JSON has no -inf: a browser's JSON.parse would reject the whole frame."""
    from types import SimpleNamespace

    from nbstream._tokens import token_entries

    _model, tokenizer = tiny_model(one_line=True)
    step = SimpleNamespace(
        logprob=float("-inf"),
        rank=7,
        cut=(False, True),
        alternative_ids=(5, 6),
        alternative_logprobs=(-0.5, float("nan")),
    )
    (entry,) = token_entries(TokenPieces(tokenizer), [9], [step], 0, 1, alternatives=True)
    assert entry[3] is None and entry[4] == 7
    assert entry[5][0][3] == -0.5 and entry[5][1][3] is None
    json.loads(json.dumps(entry, allow_nan=False))


def test_turning_a_view_on_mid_stream_leaves_no_gap_and_no_duplicate(tiny):
    """The toggle's full resend (main thread) and the follower's deltas (its thread) meet."""
    w = nbstream.StreamWidget(*tiny, max_new_tokens=3000)
    rec = Recorder(w)
    run = w.generate("Hello")
    deadline = time.monotonic() + 60
    while len(run.token_ids) < 50:
        assert time.monotonic() < deadline and not run.done, "the run made no tokens"
        time.sleep(0.005)
    w.show_tokens = True
    time.sleep(0.2)
    w.show_probabilities = True  # a second resend while it streams
    time.sleep(0.2)
    assert not run.done  # both happened mid-stream
    w.stop()  # a stopped run's tokens must line up just the same
    with pytest.raises(nbstream.GenerationCancelled):
        w.wait()
    wait_followers()
    held = tokens_of(rec, w.run_id)
    assert [t[0] for t in held] == run.token_ids
    assert token_messages(rec)[0]["offset"] == 0  # the first one was the full list


def test_compare_columns_take_the_view_keywords(tiny):
    cw = nbstream.CompareWidget(
        *tiny,
        "Hello",
        settings=[{"temperature": 0}, {"temperature": 0.7}],
        max_new_tokens=3,
        show_tokens=True,
        show_alternatives=True,
    )
    try:
        assert all(c.show_tokens and c.show_alternatives for c in cw.columns)
        assert not any(c.show_probabilities for c in cw.columns)
        assert cw.show_tokens and not cw.show_probabilities
        with pytest.raises(TypeError, match="show_tokens must be True or False"):
            nbstream.CompareWidget(*tiny, "Hi", settings=[{}, {}], show_tokens=1)
    finally:
        cw.close()


def test_tokens_that_made_the_stop_string_are_marked_not_part_of_the_answer():
    """The text is cut before a stop string; the tokens that made it were generated."""
    from nbstream.testing import forced_model

    model, tokenizer = forced_model("One two three END four five")
    ids = tokenizer.encode("One two three END four five", add_special_tokens=False)
    answer = next(n for n in range(len(ids)) if tokenizer.decode(ids[: n + 1]).endswith("END"))
    w = nbstream.StreamWidget(model, tokenizer, max_new_tokens=30, show_tokens=True)
    rec = Recorder(w)
    w.generate("Hello", stop=["END"])
    assert w.wait() == "One two three "
    wait_followers()
    assert w.metrics["finish_reason"] == "stop"
    held = tokens_of(rec, w.run_id)
    assert [t[0] for t in held] == w.run.token_ids
    # Every token up to the one that made "END" is the answer; that one and any after are
    # marked (generation stops within a step or two of the stop string).
    marks = [t[6] for t in held]
    assert marks[:answer] == [False] * answer and all(marks[answer:]) and len(marks) > answer
    # A run that ends otherwise has no such mark.
    w.generate("Hello")
    w.wait()
    wait_followers()
    assert all(len(t) == 6 for t in tokens_of(rec, w.run_id))
