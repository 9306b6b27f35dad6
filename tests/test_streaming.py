"""Incremental decoding (never half a code point) and the token hand-off buffer."""

from __future__ import annotations

import threading

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nbstream
from nbstream.streaming import TextDecoder, TokenBuffer, TokenDecoder

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

SAMPLE = "你好世界 🎉👍🏽 café"


@pytest.fixture(scope="module")
def tokenizer(tiny):
    return tiny[1]


class SlowTokenizer:
    """A tokenizer with no ``tokenizers`` backend (like a pure-Python one): only decode().

    It takes TokenDecoder down its other path, the offset window over full decodes.
    """

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def decode(self, ids, skip_special_tokens=False, clean_up_tokenization_spaces=None):
        # As transformers' slow tokenizers: the cleanup is an argument of decode.
        return self._tokenizer.decode(
            ids,
            skip_special_tokens=skip_special_tokens,
            clean_up_tokenization_spaces=clean_up_tokenization_spaces,
        )


def decoders(tokenizer):
    return [TokenDecoder(tokenizer), TokenDecoder(SlowTokenizer(tokenizer))]


def test_sample_is_cut_by_its_tokens(tokenizer):
    # The premise of the next tests: single tokens of SAMPLE are not whole characters.
    ids = tokenizer.encode(SAMPLE, add_special_tokens=False)
    assert any("\ufffd" in tokenizer.decode([i]) for i in ids)
    assert tokenizer.decode(ids) == SAMPLE


@pytest.mark.parametrize("path", ["tokenizers", "offset-window"])
def test_one_id_at_a_time_never_splits_a_code_point(tokenizer, path):
    ids = tokenizer.encode(SAMPLE, add_special_tokens=False)
    decoder = decoders(tokenizer)[path == "offset-window"]
    chunks = [decoder.feed([i]) for i in ids]
    chunks = [c for c in chunks if c]
    tail = decoder.finish("".join(chunks))
    assert "".join(chunks) + tail == SAMPLE
    assert tail == ""
    assert not any("\ufffd" in c for c in chunks)
    # Each CJK character arrives whole, in one chunk.
    for char in "你好世界":
        assert any(char in c for c in chunks)
    # 👍🏽 is two code points: they may come in two chunks, but each one whole.
    assert "🎉" in "".join(chunks)
    for c in chunks:
        c.encode("utf-8")  # no lone surrogates either
    assert decoder.ids == ids


def test_feed_accepts_tensors_and_ints(tokenizer):
    import torch

    ids = tokenizer.encode(SAMPLE, add_special_tokens=False)
    decoder = TokenDecoder(tokenizer)
    # transformers' streamer hands over a tensor of shape (1,) per step; batches of them too.
    text = decoder.feed([torch.tensor([i]) for i in ids[:5]])
    text += decoder.feed(ids[5:9])
    text += decoder.feed([torch.tensor(ids[9:])])
    assert text + decoder.finish(text) == SAMPLE
    assert decoder.ids == ids


@pytest.mark.parametrize("cuts", [(1, 2, 3, 5, 8, 13), (4,), (len(SAMPLE) * 4,)])
def test_a_batch_decodes_as_its_ids_one_by_one(tokenizer, cuts):
    # The reader decodes whatever piled up since it last woke in one call: the text and
    # where each character whole first shows must not depend on how the ids were batched.
    ids = tokenizer.encode(SAMPLE + " " + SAMPLE[::-1], add_special_tokens=False)
    one_by_one = TokenDecoder(tokenizer)
    expected = "".join(one_by_one.feed([i]) for i in ids)
    batched, chunks, start = TokenDecoder(tokenizer), [], 0
    for size in cuts * len(ids):
        if start >= len(ids):
            break
        chunks.append(batched.feed(ids[start : start + size]))
        start += size
    assert "".join(chunks) == expected
    assert not any("\ufffd" in chunk for chunk in chunks)
    assert batched.ids == ids


def test_feed_takes_every_shape_the_streamer_puts(tokenizer):
    import torch

    ids = tokenizer.encode("Hello there", add_special_tokens=False)
    decoder = TokenDecoder(tokenizer)
    # 0-d, (1,), (1, n) and plain ints: all read without a tensor op per item.
    items = [torch.tensor(ids[0]), torch.tensor([ids[1]]), torch.tensor([ids[2:]]), *ids[:0]]
    text = decoder.feed(items)
    assert text + decoder.finish(text) == "Hello there"
    assert decoder.ids == ids


def test_finish_flushes_a_character_cut_at_the_end(tokenizer):
    # A run stopped mid-character ends with what the full decode shows (U+FFFD), so the
    # streamed text still equals tokenizer.decode(ids).
    ids = tokenizer.encode("你好", add_special_tokens=False)[:-1]
    for decoder in decoders(tokenizer):
        text = decoder.feed(ids)
        assert "\ufffd" not in text
        full = tokenizer.decode(ids, skip_special_tokens=True)
        assert full.endswith("\ufffd")
        assert text + decoder.finish(text) == full


def test_special_tokens_are_skipped(tokenizer):
    ids = [
        tokenizer.convert_tokens_to_ids("<|im_start|>"),
        *tokenizer.encode("Hi there", add_special_tokens=False),
        tokenizer.eos_token_id,
    ]
    for decoder in decoders(tokenizer):
        text = decoder.feed(ids)
        assert text + decoder.finish(text) == "Hi there"


def test_text_decoder_passes_text_through():
    decoder = TextDecoder()
    assert decoder.feed(["Hel", "lo"]) == "Hello"
    assert decoder.finish("Hello") == ""


# -- the property ----------------------------------------------------------------------------


_pools: dict[int, tuple] = {}


def _vocab_pools(tokenizer):
    if id(tokenizer) in _pools:
        return _pools[id(tokenizer)]
    vocab = tokenizer.get_vocab()
    byte_ids = sorted(i for token, i in vocab.items() if len(token) == 1)
    cut_ids = tokenizer.encode(SAMPLE + " ⚙️ 𝔘𝔫𝔦 👩‍👩‍👧", add_special_tokens=False)
    _pools[id(tokenizer)] = byte_ids, cut_ids, list(tokenizer.all_special_ids)
    return _pools[id(tokenizer)]


@st.composite
def id_sequences(draw, tokenizer):
    byte_ids, cut_ids, special_ids = _vocab_pools(tokenizer)
    one_id = st.one_of(
        st.sampled_from(byte_ids),  # single bytes: continuation bytes, lead bytes, ASCII
        st.sampled_from(cut_ids),  # pieces of CJK, emoji, ZWJ sequences, accents
        st.sampled_from(special_ids),
        st.integers(0, len(tokenizer) - 1),  # anything at all
    )
    kind = draw(st.sampled_from(["random", "window"]))
    if kind == "random":
        return draw(st.lists(one_id, max_size=40))
    # A window of real text's ids: starts and ends may cut multi-byte characters.
    text = draw(st.text(min_size=1, max_size=30))
    ids = tokenizer.encode(text, add_special_tokens=False)
    start = draw(st.integers(0, len(ids)))
    end = draw(st.integers(start, len(ids)))
    return ids[start:end]


def _feed_in_pieces(decoder, ids, sizes):
    chunks, i, k = [], 0, 0
    while i < len(ids):
        size = sizes[k % len(sizes)] if sizes else 1
        chunk = decoder.feed(ids[i : i + size])
        if chunk:
            chunks.append(chunk)
        i += size
        k += 1
    return chunks


@pytest.mark.parametrize("path", ["tokenizers", "offset-window"])
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_incremental_decode_equals_full_decode(tokenizer, path, data):
    ids = data.draw(id_sequences(tokenizer), label="ids")
    sizes = data.draw(st.lists(st.integers(1, 4), max_size=5), label="feed sizes")
    decoder = decoders(tokenizer)[path == "offset-window"]
    chunks = _feed_in_pieces(decoder, ids, sizes)
    emitted = "".join(chunks)
    full = tokenizer.decode(ids, skip_special_tokens=True)
    assert emitted + decoder.finish(emitted) == full
    if "\ufffd" not in full:
        assert not any("\ufffd" in c for c in chunks)
    assert emitted.count("\ufffd") <= full.count("\ufffd")
    assert decoder.ids == ids


@pytest.mark.parametrize("path", ["tokenizers", "offset-window"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_pieces_are_what_feeding_one_id_at_a_time_gives(tokenizer, path, data):
    # A recording's pieces: each token's own text, cut characters held back to the token
    # that completes them, the same with the tensors generate puts as with ids.
    ids = data.draw(id_sequences(tokenizer), label="ids")
    one_by_one = decoders(tokenizer)[path == "offset-window"]
    expected = [one_by_one.feed([token_id]) for token_id in ids]
    for items in (ids, [torch.tensor([token_id]) for token_id in ids]):
        decoder = decoders(tokenizer)[path == "offset-window"]
        pieces = decoder.pieces(items)
        assert pieces == expected
        assert decoder.ids == ids
        assert decoder.finish("".join(pieces)) == one_by_one.finish("".join(expected))


@pytest.mark.parametrize("path", ["tokenizers", "offset-window"])
def test_pieces_of_items_holding_several_ids_or_none_are_each_items_text(tokenizer, path):
    ids = tokenizer.encode(SAMPLE, add_special_tokens=False)
    items = [torch.tensor(ids[:2]), torch.tensor([], dtype=torch.long), *ids[2:]]
    one_by_one = decoders(tokenizer)[path == "offset-window"]
    expected = [one_by_one.feed([item]) for item in items]
    decoder = decoders(tokenizer)[path == "offset-window"]
    assert decoder.pieces(items) == expected
    assert len(expected) == len(items) and "".join(expected) == tokenizer.decode(ids)
    assert decoder.ids == ids


def test_a_decoder_with_only_feed_and_finish_still_gives_a_timeline(tiny):
    # A backend's own decoder needs no pieces(): the recording feeds it one item at a time.
    from nbstream.backends.local import LocalJob

    class FeedOnly:
        def __init__(self, inner):
            self._inner = inner

        def feed(self, items):
            return self._inner.feed(items)

        def finish(self, emitted):
            return self._inner.finish(emitted)

    model, tokenizer = tiny
    run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=12, do_sample=False)
    run.wait()
    plain = run.timeline()
    original = LocalJob.decoder
    try:
        LocalJob.decoder = lambda job: FeedOnly(original(job))
        assert run.timeline() == plain
    finally:
        LocalJob.decoder = original


def test_text_pieces_are_the_pieces_as_they_came():
    assert TextDecoder().pieces(["Hel", "", "lo"]) == ["Hel", "", "lo"]


# -- end to end: the model emits exactly these ids, a reader decodes after every step ---------


def test_stream_of_cut_characters_arrives_whole(tiny, probe):
    model, tokenizer = tiny
    target = tokenizer.encode(SAMPLE, add_special_tokens=False)
    steps: list[int] = []
    box: dict = {}

    def force(module, args, output):
        steps.append(1)
        if len(steps) <= len(target):
            output.logits[..., target[len(steps) - 1]] += 1000.0
        return output

    handle = model.register_forward_hook(force)
    p = probe(model)  # after force: reads once the step's logits are settled
    ready = threading.Event()
    p.on_call = lambda n: ready.wait(30) and box["chunks"].append(box["run"].partial_text)
    box["chunks"] = []
    try:
        box["run"] = run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=len(target))
        ready.set()
        chunks = list(run)
    finally:
        handle.remove()
    assert run.token_ids == target
    assert run.result == "".join(chunks) == SAMPLE
    assert not any("\ufffd" in c for c in chunks)
    # The text seen after every decode step was always whole characters, a prefix of SAMPLE.
    for seen in box["chunks"]:
        assert "\ufffd" not in seen
        assert SAMPLE.startswith(seen)
    assert "你" in box["chunks"] and "你好" in box["chunks"]


# -- the buffer ------------------------------------------------------------------------------


def test_buffer_skips_the_prompt_and_keeps_order():
    buffer = TokenBuffer()
    buffer.put("prompt ids")
    for i in range(5):
        buffer.put(i)
    buffer.end()
    assert buffer.items == [0, 1, 2, 3, 4]
    assert len(buffer.times) == 5
    assert buffer.times == sorted(buffer.times)
    assert not buffer.closed  # end() is generate's; the run's end is close()


def test_buffer_wakes_a_sleeping_reader():
    buffer = TokenBuffer(skip_first=False)
    assert buffer.wait_for_more(0, timeout=0.01) is False
    woke = []
    reader = threading.Thread(target=lambda: woke.append(buffer.wait_for_more(0, timeout=60)))
    reader.start()
    while not buffer._sleepers:
        threading.Event().wait(0.001)
    buffer.put(1)
    reader.join(60)
    assert woke == [True]
    closer = threading.Thread(target=lambda: woke.append(buffer.wait_for_more(1, timeout=60)))
    closer.start()
    while not buffer._sleepers:
        threading.Event().wait(0.001)
    buffer.close()
    closer.join(60)
    assert woke == [True, True]
    assert buffer.wait_for_more(5) is True  # closed: never blocks again
