"""The popover's "Inside the model", kernel side (nbstream/widgets/lens_view.py).

The ``lens`` request a view sends when a token's section opens, and the reply to that view:
both dicts, their words, or an error in words; computed on a worker thread of its own, so the
comm handler (Stop) never waits for it. ``StandIn`` runs give known numbers and can be held
mid-computation; a StreamWidget on the tiny model checks the routing and the capability.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import nbstream
from nbstream.protocol import AttributionData, LensData, keys
from nbstream.widgets.lens_view import CACHE_STEPS, THREAD_NAME, LensViewer

LAYERS = 3


class StandInLens:
    def __init__(self, step: int) -> None:
        self.step = step

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "token": " b",
            "layers": LAYERS,
            "probs": [0.1, 0.4, 0.8],
            "ranks": [5, 2, 1],
            "top": [[[" a", 0.3]], [[" a", 0.5]], [[" b", 0.8]]],
            "changed": [2],
        }

    def describe(self) -> str:
        return "' b' becomes the favourite at layer 3."


class StandInAttribution:
    def __init__(self, step: int) -> None:
        self.step = step

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "token": " b",
            "tokens": ["x", "y"] + [" a"] * self.step,
            "shares": [0.6, 0.4] + [0.0] * self.step,
            "prompt_tokens": 2,
            "method": "gradient x input",
        }

    def describe(self) -> str:
        return "'x' pushed most."


class StandIn:
    """A run with ``lens`` and ``attribution``; ``hold`` keeps ``lens`` waiting until set."""

    def __init__(self, attribution_fails: bool = False, refuse: str = "") -> None:
        self.hold = threading.Event()
        self.hold.set()
        self.started = threading.Event()
        self.calls = 0
        self.attribution_calls = 0
        self.attribution_fails = attribution_fails
        self.refuse = refuse

    def lens(self, step: int) -> StandInLens:
        self.calls += 1
        self.started.set()
        assert self.hold.wait(60)
        if self.refuse:
            raise ValueError(self.refuse)
        return StandInLens(step)

    def attribution(self, step: int) -> StandInAttribution:
        self.attribution_calls += 1
        if self.attribution_fails:
            raise RuntimeError("out of memory")
        return StandInAttribution(step)


class Sent:
    """The replies a viewer sends, waited for by request."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.cond = threading.Condition()

    def __call__(self, content: Any) -> None:
        with self.cond:
            self.items.append(dict(content))
            self.cond.notify_all()

    def replies(self, request: int, view: str = "v1") -> list[dict[str, Any]]:
        with self.cond:
            return [m for m in self.items if m["request"] == request and m["view"] == view]

    def reply(self, request: int, view: str = "v1", timeout: float = 60) -> dict[str, Any]:
        """The last reply to a request (its attribution's, or its error)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = [m for m in self.replies(request, view) if not m.get("pending")]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                assert left > 0, f"no reply to request {request}: {self.items[-3:]}"
                self.cond.wait(left)


def ask(viewer: LensViewer, request: int, run_id: Any = 1, step: Any = 2, view: str = "v1") -> None:
    viewer.request(
        {"type": "lens", "view": view, "request": request, "run_id": run_id, "step": step}
    )


def test_the_lens_comes_first_then_both_with_their_words_and_the_time():
    sent, run = Sent(), StandIn()
    viewer = LensViewer(lambda: {1: run}, sent)
    ask(viewer, 1)
    reply = sent.reply(1)
    viewer.close()
    first, last = sent.replies(1)
    assert first["pending"] is True and first["attribution"] is None
    assert first["lens"] == StandInLens(2).to_dict()
    assert first["words"] == "' b' becomes the favourite at layer 3."
    assert last is reply and reply["pending"] is False
    assert reply["type"] == "lens" and reply["error"] is None
    assert (reply["run_id"], reply["step"]) == (1, 2)
    assert reply["lens"] == StandInLens(2).to_dict()
    assert reply["attribution"] == StandInAttribution(2).to_dict()
    assert reply["attribution_error"] is None
    assert reply["words"] == "' b' becomes the favourite at layer 3. 'x' pushed most."
    assert reply["elapsed_s"] >= first["elapsed_s"] >= 0
    assert set(reply["lens"]) == set(keys(LensData))
    assert set(reply["attribution"]) == set(keys(AttributionData))


def test_a_step_asked_again_is_answered_from_what_was_kept():
    sent, run = Sent(), StandIn()
    viewer = LensViewer(lambda: {1: run}, sent)
    ask(viewer, 1)
    first = sent.reply(1)  # answered before the second is asked: nothing overtakes it
    ask(viewer, 2)
    second = sent.reply(2)
    viewer.close()
    assert run.calls == 1 and viewer.computed == 1
    assert first == {**second, "request": 1}
    assert len(sent.replies(2)) == 1  # a kept step: one reply, both parts


def test_what_is_kept_is_bounded():
    sent, run = Sent(), StandIn()
    viewer = LensViewer(lambda: {1: run}, sent)
    for k in range(CACHE_STEPS + 2):  # one view each: none overtakes another
        ask(viewer, 1, step=k, view=f"v{k}")
        sent.reply(1, view=f"v{k}")
    ask(viewer, 2, step=0, view="v0")  # the first step was dropped: computed again
    sent.reply(2, view="v0")
    ask(viewer, 3, step=CACHE_STEPS + 1, view="v0")  # the last one was kept
    sent.reply(3, view="v0")
    viewer.close()
    assert run.calls == CACHE_STEPS + 3


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"run_id": 7}, "no longer shown"),
        ({"run_id": "1"}, "run_id must be a run's id"),
        ({"step": 1.5}, "step must be a whole number"),
        ({"step": True}, "step must be a whole number"),
    ],
)
def test_a_bad_request_is_answered_with_words(fields, words):
    sent = Sent()
    viewer = LensViewer(lambda: {1: StandIn()}, sent)
    ask(viewer, 1, **fields)
    reply = sent.reply(1)
    viewer.close()
    assert words in reply["error"]
    assert "lens" not in reply


def test_a_run_the_lens_refuses_is_answered_with_its_reason():
    sent = Sent()
    why = "a run on a server has no hidden states: the lens needs a local model"
    viewer = LensViewer(lambda: {1: StandIn(refuse=why)}, sent)
    ask(viewer, 1)
    reply = sent.reply(1)
    viewer.close()
    assert reply["error"] == why
    assert sent.replies(1) == [reply]


def test_a_run_without_a_lens_is_refused_in_words():
    sent = Sent()
    viewer = LensViewer(lambda: {1: object()}, sent)
    ask(viewer, 1)
    reply = sent.reply(1)
    viewer.close()
    assert "cannot show what its layers said" in reply["error"]


def test_an_attribution_that_fails_leaves_the_lens_shown():
    sent = Sent()
    viewer = LensViewer(lambda: {1: StandIn(attribution_fails=True)}, sent)
    ask(viewer, 1)
    reply = sent.reply(1)
    viewer.close()
    assert reply["error"] is None
    assert reply["lens"]["probs"] == [0.1, 0.4, 0.8]
    assert reply["attribution"] is None
    assert reply["attribution_error"] == "RuntimeError: out of memory"


def test_the_comm_handler_never_waits_for_a_lens():
    """request() returns while the lens is still computing (held until the test lets it go)."""
    sent, run = Sent(), StandIn()
    run.hold.clear()
    viewer = LensViewer(lambda: {1: run}, sent)
    ask(viewer, 1)
    assert run.started.wait(30)  # the worker is inside lens(), held
    ask(viewer, 1, step=3, view="v2")  # and the handler takes another request meanwhile
    assert sent.items == []
    run.hold.set()
    assert sent.reply(1)["error"] is None and sent.reply(1, view="v2")["error"] is None
    viewer.close()


def test_a_request_overtaken_by_a_newer_one_of_its_view_is_skipped():
    sent, run = Sent(), StandIn()
    run.hold.clear()
    viewer = LensViewer(lambda: {1: run}, sent)
    ask(viewer, 1, step=0)
    assert run.started.wait(30)
    ask(viewer, 2, step=1)  # queued behind 1, then overtaken by 3
    ask(viewer, 3, step=2)
    ask(viewer, 1, step=5, view="v2")  # another view's are its own
    run.hold.set()
    sent.reply(3)
    sent.reply(1, view="v2")
    viewer.close()
    # 1's lens was sent before 3 came; its attribution, overtaken, was not computed.
    assert sorted((m["view"], m["request"], m["pending"]) for m in sent.items) == [
        ("v1", 1, True),
        ("v1", 3, False),
        ("v1", 3, True),
        ("v2", 1, False),
        ("v2", 1, True),
    ]


def test_a_request_after_close_starts_no_thread():
    sent = Sent()
    viewer = LensViewer(lambda: {1: StandIn()}, sent)
    viewer.close()
    before = {t.name for t in threading.enumerate()}
    ask(viewer, 1)
    assert not any(
        t.name.startswith("nbstream-lens") and t.name not in before for t in threading.enumerate()
    )
    assert sent.items == []


def lens_workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def test_close_drops_what_waits_skips_the_attribution_and_bounds_its_wait():
    sent, run = Sent(), StandIn()
    run.hold.clear()
    viewer = LensViewer(lambda: {1: run}, sent)
    ask(viewer, 1)
    ask(viewer, 1, view="v2")  # waits behind the first: dropped by close
    assert run.started.wait(30)
    assert viewer.close(timeout=0.05) is False  # a lens under way: close does not wait it out
    run.hold.set()
    for worker in lens_workers():
        worker.join(30)
    assert not lens_workers()
    assert sent.items == []  # the widget is gone: no reply
    assert (run.calls, run.attribution_calls) == (1, 0)
    assert viewer.close() is True


def test_the_worker_ends_once_no_request_waits():
    sent, run = Sent(), StandIn()
    viewer = LensViewer(lambda: {1: run}, sent)
    ask(viewer, 1)
    assert sent.reply(1)["error"] is None
    for worker in lens_workers():
        worker.join(30)
    assert not lens_workers()  # nothing left running, though the widget is still open
    ask(viewer, 2, step=3)  # a new request starts a new worker
    assert sent.reply(2)["step"] == 3
    assert viewer.close() is True and not lens_workers()


def test_a_request_without_view_or_id_is_ignored():
    sent = Sent()
    viewer = LensViewer(lambda: {1: StandIn()}, sent)
    viewer.request({"type": "lens", "request": 1, "run_id": 1, "step": 0})
    viewer.request({"type": "lens", "view": "v1", "request": True, "run_id": 1, "step": 0})
    viewer.request("not a dict")  # type: ignore[arg-type]
    viewer.close()
    assert sent.items == []


def test_a_local_model_offers_the_lens_and_its_widget_answers_lens_requests(tiny):
    w = nbstream.StreamWidget(*tiny, max_new_tokens=4, temperature=0)
    try:
        assert w.can_lens is True
        sent = Sent()
        w._lens._send = sent  # the replies, as the page would get them
        w.generate("Hi")
        w.wait(60)
        w._handle_message(
            w, {"type": "lens", "view": "v1", "request": 1, "run_id": w.run_id, "step": 1}, []
        )
        reply = sent.reply(1)
        assert (reply["type"], reply["run_id"], reply["step"]) == ("lens", w.run_id, 1)
        assert reply["error"] is None and reply["attribution_error"] is None
        assert reply["lens"] == w.run.lens(1).to_dict()
        attribution = reply["attribution"]
        assert len(attribution["shares"]) == attribution["prompt_tokens"] + 1
    finally:
        w.close()
    assert w._lens._requests.closed


def test_a_run_streams_and_stops_while_its_lens_is_computed(tiny_line):
    """A lens held mid-computation: the run keeps making tokens, and Stop ends it at once."""
    w = nbstream.StreamWidget(*tiny_line, max_new_tokens=4000, temperature=0)
    try:
        run = w.generate("Hi")
        deadline = time.monotonic() + 60
        while len(run.token_ids) < 2:
            assert time.monotonic() < deadline, "the run made no tokens"
            time.sleep(0.01)
        held, inside = threading.Event(), threading.Event()

        def lens(step: int) -> Any:  # the real one, held until the test lets it go
            inside.set()
            assert held.wait(60)
            return type(run).lens(run, step)

        run.lens = lens  # type: ignore[method-assign]
        sent = Sent()
        w._lens._send = sent
        w._handle_message(
            w, {"type": "lens", "view": "v1", "request": 1, "run_id": w.run_id, "step": 0}, []
        )
        assert inside.wait(30)
        at_request = len(run.token_ids)
        while len(run.token_ids) <= at_request + 5:
            assert time.monotonic() < deadline, "the run stopped making tokens"
            time.sleep(0.01)
        w._handle_message(w, {"type": "stop"}, [])
        with pytest.raises(nbstream.GenerationCancelled):
            run.wait(30)
        assert run.status == "cancelled" and len(run.token_ids) < 4000
        held.set()
        assert sent.reply(1)["error"] is None
    finally:
        w.close()
