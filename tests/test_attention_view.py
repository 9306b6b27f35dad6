"""The popover's attention view, kernel side (nbstream/widgets/attention_view.py).

The ``attention`` request a view sends when a token's "Where it looked" opens, and the reply to
that view: ``run.attention(step)``'s weights as sent (ten-thousandths, capped), or the words of
a refusal; computed on a worker thread of its own. The payload is compared with
``run.attention(step)`` on the tiny model; ``StandIn`` runs refuse or hold mid-computation.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import torch

import nbstream
from nbstream.attention import AttentionUnavailable
from nbstream.protocol import AttentionData, keys
from nbstream.widgets.attention_view import (
    CAP,
    SCALE,
    THREAD_NAME,
    AttentionViewer,
    attention_data,
    shown_positions,
)
from nbstream.widgets.token_views import NO_ATTENTION


class Sent:
    """The replies a viewer sends, waited for by request."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.cond = threading.Condition()

    def __call__(self, content: Any) -> None:
        with self.cond:
            self.items.append(dict(content))
            self.cond.notify_all()

    def reply(self, request: int, view: str = "v1", timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = [m for m in self.items if (m["view"], m["request"]) == (view, request)]
                if found:
                    return found[-1]
                left = deadline - time.monotonic()
                assert left > 0, f"no reply to request {request}: {self.items[-3:]}"
                self.cond.wait(left)


class StandIn:
    """A run whose ``attention`` refuses, or waits until ``hold`` is set."""

    def __init__(self, refuse: str = "") -> None:
        self.hold = threading.Event()
        self.hold.set()
        self.started = threading.Event()
        self.refuse = refuse
        self.calls = 0
        self.thread = ""

    def attention(self, step: int) -> Any:
        self.calls += 1
        self.thread = threading.current_thread().name
        self.started.set()
        assert self.hold.wait(60)
        raise AttentionUnavailable(self.refuse or f"step {step} is not a step of this run")


def ask(viewer: AttentionViewer, request: int, run_id: Any = 1, step: Any = 2, view: str = "v1"):
    viewer.request(
        {"type": "attention", "view": view, "request": request, "run_id": run_id, "step": step}
    )


@pytest.fixture(scope="module")
def finished(tiny: tuple[Any, Any]) -> Any:
    run = nbstream.stream(*tiny, "Say hello", max_new_tokens=6, temperature=0)
    run.wait(60)
    assert len(run.token_ids) >= 4
    return run


def sent_weights(weights: Any) -> list[Any]:
    """The weights as the reply carries them."""
    return (weights * SCALE).round().long().tolist()


def test_the_payload_is_run_attention_as_sent(finished: Any) -> None:
    seen = finished.attention(3)
    data = attention_data(seen)
    assert set(data) == set(keys(AttentionData))
    assert data["weights"] == sent_weights(seen.weights)
    assert data["shown"] == list(range(seen.positions)) and data["positions"] == seen.positions
    assert data["rest"] == [[0] * seen.heads] * seen.layers
    assert data["tokens"] == seen.tokens
    assert (data["layers"], data["heads"], data["step"]) == (seen.layers, seen.heads, 3)
    assert (data["token"], data["prompt_tokens"]) == (seen.token, seen.prompt_tokens)
    assert (data["sink"], data["sink_heads"]) == (seen.sink, seen.sink_heads)
    assert data["sink_share"] == pytest.approx(seen.sink_share, abs=1e-4)
    assert (data["scale"], data["cap"]) == (SCALE, CAP)
    # The sharpest heads beyond the first position, as describe() names them.
    beyond = seen.weights[..., 1:]
    best = beyond.max(-1).values.flatten()
    top = best.topk(len(data["strongest"]))
    for (layer, head, position, weight, text), i, value in zip(
        data["strongest"], top.indices.tolist(), top.values, strict=True
    ):
        assert (layer, head) == (i // seen.heads, i % seen.heads)
        assert weight == int((value * SCALE).round())
        assert seen.weights[layer, head, position] == value and text == seen.tokens[position]


def test_a_long_input_keeps_its_first_position_and_its_last(finished: Any) -> None:
    seen = finished.attention(3)
    cap = 5
    data = attention_data(seen, cap=cap)
    kept = [0, *range(seen.positions - cap + 1, seen.positions)]
    assert data["shown"] == kept == shown_positions(seen.positions, cap)
    assert data["weights"] == sent_weights(seen.weights[..., torch.tensor(kept)])
    left_out = seen.weights[..., 1 : seen.positions - cap + 1].sum(-1)
    assert data["rest"] == sent_weights(left_out)
    assert data["tokens"] == [seen.tokens[p] for p in kept]
    assert data["cap"] == cap and data["positions"] == seen.positions
    # What is sent and what is left out make up each head's whole row, to rounding.
    for layer in range(seen.layers):
        for head in range(seen.heads):
            total = sum(data["weights"][layer][head]) + data["rest"][layer][head]
            assert abs(total - SCALE) <= cap + 1


def test_shown_positions() -> None:
    assert shown_positions(3, cap=4) == [0, 1, 2]
    assert shown_positions(4, cap=4) == [0, 1, 2, 3]
    assert shown_positions(6, cap=4) == [0, 3, 4, 5]


def test_a_widget_answers_on_its_own_thread_with_run_attention(tiny: tuple[Any, Any]) -> None:
    w = nbstream.StreamWidget(*tiny, max_new_tokens=5, temperature=0)
    try:
        w.generate("Hi")
        w.wait(60)
        assert w.can_lens
        sent = Sent()
        w._send_msg = sent  # type: ignore[method-assign]
        handler = threading.current_thread().name
        w._handle_message(
            w, {"type": "attention", "view": "v1", "request": 1, "run_id": w.run_id, "step": 1}, []
        )
        reply = sent.reply(1)
        assert reply["type"] == "attention" and reply["error"] is None
        assert (reply["run_id"], reply["step"]) == (w.run_id, 1)
        assert reply["attention"] == attention_data(w.run.attention(1))
        assert reply["words"] == w.run.attention(1).describe()
        assert reply["elapsed_s"] >= 0
        assert handler != THREAD_NAME
        # A step the run does not have: the run's own words.
        w._handle_message(
            w, {"type": "attention", "view": "v1", "request": 2, "run_id": w.run_id, "step": 99}, []
        )
        assert "step 99 is not a step of this run" in sent.reply(2)["error"]
        # A blind round before Reveal (can_lens false): refused, nothing computed.
        computed = w._attention.computed
        w.can_lens = False
        w._handle_message(
            w, {"type": "attention", "view": "v1", "request": 3, "run_id": w.run_id, "step": 2}, []
        )
        assert sent.reply(3)["error"] == NO_ATTENTION
        assert w._attention.computed == computed
    finally:
        w.close()
    assert w._attention.close() is True


def test_a_refusal_is_answered_with_its_words_on_the_worker() -> None:
    sent = Sent()
    why = "a replayed recording has no model: it keeps the tokens it recorded, not the attention"
    run = StandIn(refuse=why)
    viewer = AttentionViewer(lambda: {1: run}, sent, lambda: None)
    ask(viewer, 1)
    reply = sent.reply(1)
    viewer.close()
    assert reply["error"] == why and "attention" not in reply
    assert run.thread == THREAD_NAME


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"run_id": 7}, "no longer shown"),
        ({"run_id": "1"}, "run_id must be a run's id"),
        ({"step": 1.5}, "step must be a whole number"),
        ({"step": True}, "step must be a whole number"),
    ],
)
def test_a_bad_request_is_answered_with_words(fields: dict[str, Any], words: str) -> None:
    sent = Sent()
    viewer = AttentionViewer(lambda: {1: StandIn()}, sent, lambda: None)
    ask(viewer, 1, **fields)
    reply = sent.reply(1)
    viewer.close()
    assert words in reply["error"]


def test_a_run_without_attention_is_refused_in_words() -> None:
    sent = Sent()
    viewer = AttentionViewer(lambda: {1: object()}, sent, lambda: None)
    ask(viewer, 1)
    assert "cannot show where its tokens looked" in sent.reply(1)["error"]
    viewer.close()


def test_a_step_asked_again_is_answered_from_what_was_kept(finished: Any) -> None:
    sent = Sent()
    viewer = AttentionViewer(lambda: {1: finished}, sent, lambda: None)
    ask(viewer, 1)
    first = sent.reply(1)
    ask(viewer, 2)
    second = sent.reply(2)
    viewer.close()
    assert viewer.computed == 1
    assert first == {**second, "request": 1}


def test_the_comm_handler_never_waits_and_an_overtaken_request_is_skipped() -> None:
    sent, run = Sent(), StandIn()
    run.hold.clear()
    viewer = AttentionViewer(lambda: {1: run}, sent, lambda: None)
    ask(viewer, 1, step=0)
    assert run.started.wait(30)  # the worker is inside attention(), held
    ask(viewer, 2, step=1)  # queued behind 1, then overtaken by 3
    ask(viewer, 3, step=2)
    assert sent.items == []
    run.hold.set()
    sent.reply(3)
    viewer.close()
    assert [m["request"] for m in sent.items] == [1, 3]
    assert run.calls == 2


def test_close_drops_what_waits_and_bounds_its_wait() -> None:
    sent, run = Sent(), StandIn()
    run.hold.clear()
    viewer = AttentionViewer(lambda: {1: run}, sent, lambda: None)
    ask(viewer, 1)
    ask(viewer, 1, view="v2")  # waits behind the first: dropped by close
    assert run.started.wait(30)
    assert viewer.close(timeout=0.05) is False
    run.hold.set()
    for worker in [t for t in threading.enumerate() if t.name == THREAD_NAME]:
        worker.join(30)
    assert sent.items == [] and run.calls == 1
    assert viewer.close() is True
    ask(viewer, 2)  # after close: ignored, no thread
    assert not [t for t in threading.enumerate() if t.name == THREAD_NAME]
