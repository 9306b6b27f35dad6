"""RunFeed's pace: one wake and one read of the run per frame, whatever the model's speed.

The feed is driven with a scripted run (no model, no clock in the assertions): the model makes
text only while the feed waits, as a model faster than the frame rate does between frames.
"""

from __future__ import annotations

import threading
from typing import Any

from nbstream.widgets import feed as feed_module
from nbstream.widgets.feed import RunFeed


class ScriptedRun:
    """What the feed reads of a run; each wait of the feed is where the model makes a batch."""

    def __init__(self, batches: int) -> None:
        self._left = batches
        self._text = ""
        self.status = "running"
        self.thinking = None
        self.token_ids: list[int] = []
        self.trace = None
        self.reads = 0
        self.waits: list[str] = []

    @property
    def done(self) -> bool:
        return self.status == "complete"

    @property
    def progress(self) -> int:
        return len(self._text)

    @property
    def partial_text(self) -> str:
        self.reads += 1
        return self._text

    @property
    def metrics(self) -> dict[str, Any]:
        return {"tokens": len(self._text), "elapsed_s": 0.0, "thinking_tokens": None}

    def _make(self) -> None:
        if self._left:
            self._left -= 1
            self._text += "ab"
        if not self._left:
            self.status = "complete"

    def wait_done(self, timeout: float | None = None) -> bool:
        self.waits.append("frame")
        self._make()
        return self.done

    def wait_for_progress(self, seen: int, timeout: float | None = None) -> bool:
        # A wait that sleeps until the model's next token: a frame's worth is already there
        # for a feed that waited for its frame first.
        if seen != len(self._text):
            return True  # something new already: no wait, no time for the model
        self.waits.append("token")
        self._make()
        return True


def follow(run: ScriptedRun) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    ended = threading.Event()
    feed = RunFeed(
        lock=threading.RLock(),
        send=sent.append,
        is_open=lambda: True,
        tokenizer=None,
        token_options=lambda: None,
        on_state=lambda *args: None,
        on_end=lambda *args: None,
        after_end=lambda run: ended.set(),
    )
    with feed._lock:
        feed.follow(run, 1, "running")  # type: ignore[arg-type]
    assert ended.wait(60)
    return sent


def contiguous(deltas: list[dict[str, Any]]) -> str:
    text = ""
    for delta in deltas:
        assert delta["offset"] == len(text)
        text += delta["text"]
    return text


def test_one_read_and_no_wait_for_a_token_per_frame(monkeypatch):
    # Frames far apart: every frame's pause is still running when the feed computes it, however
    # slowly this machine runs the test (the scripted run never sleeps).
    monkeypatch.setattr(feed_module, "_FRAME_S", 1000.0)
    run = ScriptedRun(batches=30)
    deltas = [m for m in follow(run) if m["type"] == "delta"]
    assert contiguous(deltas) == "ab" * 30
    # From the first frame on, the feed waits for the next frame only: the text piled up
    # meanwhile, so it never sleeps waiting for a token (at most once, before any text).
    assert run.waits.count("token") <= 1
    # The text is read once a frame (and before the first text).
    assert run.reads <= len(deltas) + 2


def test_the_end_goes_out_at_once_with_the_whole_text(monkeypatch):
    monkeypatch.setattr(feed_module, "_FRAME_S", 1000.0)
    run = ScriptedRun(batches=3)
    deltas = [m for m in follow(run) if m["type"] == "delta"]
    # The run ended during a frame's pause: its last text was sent then, not a frame later.
    assert contiguous(deltas) == "ababab"
    assert run.waits[-1] == "frame"
