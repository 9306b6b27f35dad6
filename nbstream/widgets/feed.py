"""The transport from a widget's runs to its views: deltas, resets and tokens.

One :class:`RunFeed` per widget. It follows the widget's current run on a view thread and
sends its text to every view as deltas with an offset (at most ``FRAME_RATE`` a second,
coalesced), the run's tokens while a teaching view is on, and, when a view asks (``sync``),
a ``reset`` holding exactly the text already sent, so the next delta continues it without
a gap. A reasoning model's thinking travels the same way, apart from the answer: ``thinking``
messages (offset, text, live counters, ``done`` once the answer starts or the run ends) in
the same frames as the answer's deltas, and the ``reset`` carries the thinking sent so far.
A run that does not think sends none of it. The messages are defined in ``PROTOCOL.md``;
the widget decides what its traits say (through the two callbacks), the feed decides what
crosses the wire and when. The tokens for the teaching views are its
:class:`~.feed_tokens.TokenFeed`'s.

Everything the feed writes, and every decision whether a run is still the current one,
happens under the widget's lock, which the widget also holds when it starts a run: a
newer run never gets an older run's text, tokens or state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..generation import TERMINAL, Generation
from ..protocol import (
    DeltaMessage,
    FeedMessage,
    PullOffsets,
    ResetMessage,
    ThinkingCounters,
    ThinkingState,
)
from .feed_tokens import TokenFeed, TokenOptions

__all__ = ["FRAME_RATE", "VIEW_THREAD_PREFIX", "RunFeed", "thinking_state", "view_threads"]

logger = logging.getLogger(__name__)

#: Deltas per second, at most, per widget.
FRAME_RATE = 20
_FRAME_S = 1.0 / FRAME_RATE
# How long the view thread sleeps between checks while a run is queued (no tokens to wake it).
_POLL_S = 0.25
#: Names of the view threads (one per run), which publish a run's end state to the views
#: and to the saved output.
VIEW_THREAD_PREFIX = "nbstream-view-"


def view_threads() -> list[threading.Thread]:
    """The view threads still publishing a run (``%nbstream stop`` waits for them)."""
    return [t for t in threading.enumerate() if t.name.startswith(VIEW_THREAD_PREFIX)]


#: Called with the lock held: ``(run, run_id, status)`` changed state before its end
#: (queued to running); the widget sets its traits.
StateHook = Callable[[Generation, int, str], None]
#: Called with the lock held once the current run ``(run, run_id)`` has ended.
EndHook = Callable[[Generation, int], None]
#: Called without the lock after any followed run has ended (``on_complete`` callbacks).
AfterHook = Callable[[Generation], None]


@dataclass
class _Cursor:
    """How far a view thread has sent one run.

    The answer's characters, the thinking's characters and whether its end was sent, and when the
    last frame went out.
    """

    sent: int = 0
    thought: int = 0
    thought_done: bool = False
    last_frame: float = 0.0


class RunFeed:
    """Streams a widget's current run to its views; see the module docstring.

    ``send(content)`` sends one custom message to every view. ``is_open()`` says whether
    the widget still has views to send to (its comm).
    """

    def __init__(
        self,
        *,
        lock: threading.RLock,
        send: Callable[[FeedMessage], None],
        is_open: Callable[[], bool],
        tokenizer: Any,
        token_options: TokenOptions,
        on_state: StateHook,
        on_end: EndHook,
        after_end: AfterHook,
    ) -> None:
        self._lock = lock
        self._send = send
        self._is_open = is_open
        self._on_state = on_state
        self._on_end = on_end
        self._after_end = after_end
        self._run: Generation | None = None
        self._run_id = 0
        self._thread: threading.Thread | None = None
        # Characters of the current run's text already sent as deltas: a reset carries
        # exactly that much.
        self._sent = 0
        # The tokens, for the teaching views (and how many of the current run's were sent).
        self._tokens = TokenFeed(
            send=send, is_open=is_open, tokenizer=tokenizer, token_options=token_options
        )
        # The current run's thinking already sent: its characters, and the last thinking
        # message's counters (None: none sent, the run has not thought): a reset carries
        # exactly that.
        self._thinking_sent = 0
        self._thinking_last: ThinkingCounters | None = None

    # -- what the widget calls ---------------------------------------------------------------
    def follow(self, run: Generation, run_id: int, status: str) -> None:
        """Make ``run`` the current run and stream it (call with the lock held).

        ``status`` is the state the widget published as the run started: a change from it
        (queued to running) is published even if it happened before the thread ran.
        """
        self._run, self._run_id = run, run_id
        self._sent = 0
        self._tokens.sent = 0
        self._thinking_sent, self._thinking_last = 0, None
        self._thread = threading.Thread(
            target=self._follow,
            args=(run, run_id, status),
            name=f"{VIEW_THREAD_PREFIX}{run_id}",
            daemon=True,
        )
        self._thread.start()

    def forget(self, run_id: int) -> None:
        """No current run any more (a cleared chat); ``run_id`` is the widget's new id."""
        with self._lock:
            self._run, self._run_id = None, run_id
            self._sent = 0
            self._tokens.sent = 0
            self._thinking_sent, self._thinking_last = 0, None

    def use_tokenizer(self, tokenizer: Any) -> None:
        """The tokens' texts come from ``tokenizer`` from now on (a column serving another model).

        Args:
            tokenizer: The new model's tokenizer.
        """
        with self._lock:
            self._tokens.use_tokenizer(tokenizer)

    @property
    def thread(self) -> threading.Thread | None:
        """The view thread of the current run (read it with the lock held)."""
        return self._thread

    def reset(self, view: Any) -> None:
        """Answer a view's ``sync``: the text sent so far, then every shown run's tokens."""
        with self._lock:
            self._send(self._reset_message(view))

    def _reset_message(self, view: Any) -> ResetMessage:
        """The ``reset`` for ``view``: exactly the text and thinking sent so far (lock held)."""
        run = self._run
        message: ResetMessage = {
            "type": "reset",
            "run_id": self._run_id,
            "view": view,
            "text": run.partial_text[: self._sent] if run is not None else "",
        }
        thinking = self._thinking_reset(run)
        if thinking is not None:  # only a run that thought: others' resets stay as they were
            message["thinking"] = thinking
        return message

    def pull(self, view: Any, have: PullOffsets, runs: list[tuple[int, Generation]]) -> list[Any]:
        """What ``view`` lacks of the feed, given what it holds: the answer to a ``pull``.

        The same messages the views are pushed, from the view's own offsets up to what the
        feed has pushed so far, so that a push arriving as well is placed (or dropped) by the
        view's usual rules and no text is shown twice: the current run's ``thinking``,
        ``delta`` and ``tokens`` after those offsets, or a ``reset`` (and every shown run's
        tokens from 0) when the view holds another run or more than was sent. ``runs`` are
        the shown runs (``RunWidget._token_runs``).
        """
        with self._lock:
            run, run_id = self._run, self._run_id
            if have["run_id"] != run_id or have["text"] > self._sent:
                return [self._reset_message(view), *self._tokens.all_messages(runs)]
            if run is None:
                return []
            return self._pull_run(run, run_id, have)

    def _pull_run(self, run: Generation, run_id: int, have: PullOffsets) -> list[Any]:
        """The current run's messages after the view's offsets (lock held)."""
        out: list[Any] = []
        active = run.status not in TERMINAL
        if self._thinking_last is not None and have["thinking"] <= self._thinking_sent:
            start = have["thinking"]
            text = (run.thinking or "")[start : self._thinking_sent]
            message = {"type": "thinking", "run_id": run_id, "offset": start, "text": text}
            out.append({**message, **self._thinking_last})
        if have["text"] < self._sent or active:
            # While the run is active an empty one still brings the metrics line's counters.
            out.append(self._delta_message(run, run_id, have["text"], run.partial_text))
        return out + self._tokens.pull(run, run_id, have["tokens"])

    def send_all_tokens(self, runs: list[tuple[int, Generation]]) -> None:
        """Every run's tokens in full (a view turned on, or a view synced)."""
        if not self._tokens.shown() or not self._is_open():
            return
        with self._lock:
            self._tokens.send_all(runs, self._run_id)

    # -- the view thread ---------------------------------------------------------------------
    def _follow(self, run: Generation, run_id: int, status: str) -> None:
        """Send the run's text to the views as coalesced deltas, then its end state."""
        cursor = _Cursor()
        try:
            while True:
                finished = run.done
                status = self._publish_state(run, run_id, status, finished)
                # Read before the text: whatever the model makes after it wakes the wait.
                progress = run.progress
                text = run.partial_text
                # After the answer's text: once that has begun the thinking is whole.
                thinking = run.thinking
                # A token can come without new text (a special token, part of a
                # character, text held back while it may start a stop string).
                if (
                    len(text) > cursor.sent
                    or (run_id == self._run_id and self._tokens.behind(run))
                    or _thinking_behind(
                        thinking, cursor.thought, cursor.thought_done, bool(text) or finished
                    )
                ):
                    self._send_frame(run, run_id, cursor, text, thinking, finished)
                if finished:
                    break
                # One wake per frame: what the model makes in the rest of this frame piles up
                # unseen (no wake per token, no second read of the text), but the run's end
                # is sent at once rather than held back.
                pause = _FRAME_S - (time.perf_counter() - cursor.last_frame)
                if pause > 0 and run.wait_done(pause):
                    continue
                run.wait_for_progress(progress, _POLL_S)
        except Exception:
            logger.exception("nbstream: streaming to the view failed")
            # The views still get the run's real end (never a "running" left standing) and
            # on_complete still runs: wait for the end the run itself decides.
            run.wait_done()
        finally:
            self._publish_end(run, run_id)
        self._after_end(run)

    def _publish_state(self, run: Generation, run_id: int, status: str, finished: bool) -> str:
        """Publish a state before the end (queued → running); returns the state now shown.

        The end state is published by ``_on_end``, once the run is done (its result and last
        text exist), never here.
        """
        now = run.status
        if now != status and now not in TERMINAL and not finished:
            status = now
            with self._lock:
                if run_id == self._run_id:
                    self._on_state(run, run_id, status)
        return status

    def _send_frame(
        self,
        run: Generation,
        run_id: int,
        cursor: _Cursor,
        text: str,
        thinking: str | None,
        finished: bool,
    ) -> None:
        """Send what the views have not had as one frame, now (the caller paces the frames)."""
        with self._lock:
            if run_id == self._run_id:  # a newer run owns the views now
                if thinking is not None:
                    # Before the answer's delta: a view closes the thinking section as the
                    # answer starts.
                    cursor.thought_done = bool(text) or finished
                    self._send_thinking(run, run_id, thinking, cursor.thought_done)
                    cursor.thought = len(thinking)
                if len(text) > cursor.sent:
                    self._send_delta(run, run_id, cursor.sent, text[cursor.sent :])
                    self._sent = len(text)
                self._tokens.send_new(run, run_id)
        cursor.sent = len(text)
        cursor.last_frame = time.perf_counter()

    def _publish_end(self, run: Generation, run_id: int) -> None:
        """Mark the stop string's tokens, then publish the run's end (each failure logged)."""
        with self._lock:
            if run_id == self._run_id:
                try:
                    self._tokens.mark_stop(run, run_id)
                except Exception:  # never at the cost of the end state below
                    logger.exception("nbstream: marking the stop string's tokens failed")
                try:
                    self._on_end(run, run_id)
                except Exception:  # never at the cost of on_complete below
                    logger.exception("nbstream: publishing the run's end failed")

    def _send_thinking(self, run: Generation, run_id: int, thinking: str, done: bool) -> None:
        """Send the thinking the views have not had, with its counters (lock held).

        The counters are its tokens and its time (the run's so far; once done, the time to the
        answer).
        """
        if self._thinking_last is not None and self._thinking_last["done"]:
            return  # its end was sent: the thinking no longer changes
        offset = self._thinking_sent
        metrics = run.metrics
        seconds = metrics["elapsed_s"]
        if done and metrics["first_answer_s"] is not None:
            seconds = metrics["first_answer_s"]
        counters: ThinkingCounters = {
            "tokens": metrics["thinking_tokens"],
            # Rounded: the summary shows tenths, and every byte here is per frame.
            "elapsed_s": None if seconds is None else round(seconds, 2),
            "done": done,
        }
        if len(thinking) <= offset and counters == self._thinking_last:
            return
        self._thinking_sent, self._thinking_last = len(thinking), counters
        if self._is_open():
            self._send(
                {
                    "type": "thinking",
                    "run_id": run_id,
                    "offset": offset,
                    "text": thinking[offset:],
                    **counters,
                }
            )

    def _thinking_reset(self, run: Generation | None) -> ThinkingState | None:
        """The thinking a ``reset`` carries: exactly what was sent (lock held)."""
        if run is None or self._thinking_last is None:
            return None
        thinking = run.thinking or ""
        return {"text": thinking[: self._thinking_sent], **self._thinking_last}

    def _send_delta(self, run: Generation, run_id: int, offset: int, text: str) -> None:
        if not self._is_open():
            return
        self._send(self._delta_message(run, run_id, offset, text, whole=False))

    def _delta_message(
        self, run: Generation, run_id: int, offset: int, text: str, *, whole: bool = True
    ) -> DeltaMessage:
        """A ``delta`` from ``offset``; ``whole``: ``text`` is the run's, cut at what was sent."""
        metrics = run.metrics
        elapsed = metrics["elapsed_s"]
        return {
            "type": "delta",
            "run_id": run_id,
            "offset": offset,
            "text": text[offset : self._sent] if whole else text,
            "tokens": metrics["tokens"],
            # Rounded: the metrics line shows tenths, and every byte here is per frame.
            "elapsed_s": None if elapsed is None else round(elapsed, 2),
        }


def _thinking_behind(thinking: str | None, sent: int, done_sent: bool, done: bool) -> bool:
    """Whether the views should get more of a run's thinking: text, or its end."""
    if thinking is None:
        return False
    return len(thinking) > sent or (done and not done_sent)


def thinking_state(run: Generation) -> ThinkingState | None:
    """An ended run's thinking as the views show it (the chat's ``_messages``).

    ``{text, tokens, elapsed_s, done}``, or None for a run that did not think.
    """
    thinking = run.thinking
    if thinking is None:
        return None
    metrics = run.metrics
    seconds = metrics["first_answer_s"]
    if seconds is None:
        seconds = metrics["elapsed_s"]
    return {
        "text": thinking,
        "tokens": metrics["thinking_tokens"],
        "elapsed_s": None if seconds is None else round(seconds, 2),
        "done": True,
    }
