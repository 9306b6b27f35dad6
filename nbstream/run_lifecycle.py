"""A run's lifecycle: its worker thread, its states, Stop, its budget, and its one end state.

A run is ``queued`` while another run holds the same model (FIFO, never interleaved),
``running`` once it has the model, then exactly one of ``complete``, ``failed`` or
``cancelled``. The end state is decided by the worker from what actually happened: the end
of the token stream is never taken as success on its own. :class:`RunLifecycle` is that
machinery for one :class:`~nbstream.Generation`, which owns it and shows it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any, Final, cast

from .backends.base import Job, RunControl
from .cpus import release_idle_openmp_threads
from .model_queue import ModelQueue
from .protocol import FinishReason, Metrics, Status
from .run_text import RunText
from .streaming import TokenBuffer

__all__ = [
    "CANCELLED",
    "COMPLETE",
    "FAILED",
    "METRIC_KEYS",
    "QUEUED",
    "RUNNING",
    "RUN_THREAD_PREFIX",
    "TERMINAL",
    "InvalidJSON",
    "RunLifecycle",
    "drop_locals",
    "parse_json",
]

logger = logging.getLogger(__name__)

QUEUED: Final = "queued"
RUNNING: Final = "running"
COMPLETE: Final = "complete"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"
TERMINAL: frozenset[Status] = frozenset({COMPLETE, FAILED, CANCELLED})
METRIC_KEYS = (
    "queued_s",
    "ttft_s",
    "first_chunk_s",
    "tokens",
    # A branch's forced start (0 for any other run): tokens it was given, not generated;
    # ttft_s and tokens_per_s count only the tokens generated after them.
    "forced_tokens",
    "tokens_per_s",
    "elapsed_s",
    "finish_reason",
    # A reasoning model's thinking (None for a run that did not think): how many tokens it
    # took, and when the answer's first text appeared.
    "thinking_tokens",
    "first_answer_s",
)
#: Every thread nbstream starts for a run (its worker, its budget's timer) is named so.
RUN_THREAD_PREFIX = "nbstream-run-"


class InvalidJSON(ValueError):
    """The final text of a run with ``expect="json"`` does not parse as JSON.

    ``lineno``, ``colno`` and ``pos`` say where (as :class:`json.JSONDecodeError`, which
    is the ``__cause__``); the text itself stays the run's ``partial_text``.

    Args:
        message: What is wrong, and what to do.
        error: The parser's error.

    Example:
        >>> try:
        ...     nbstream.stream(model, tokenizer, "Hi", expect="json").wait()
        ... except nbstream.GenerationFailed as failed:
        ...     print(failed.__cause__)  # an InvalidJSON
    """

    def __init__(self, message: str, error: json.JSONDecodeError) -> None:
        super().__init__(message)
        self.lineno = error.lineno
        self.colno = error.colno
        self.pos = error.pos


def drop_locals(error: BaseException) -> None:
    """Let ``error`` (and its causes and contexts) keep where it was raised, not what was there.

    A traceback holds its frames, and the frames their locals and functions (a closure's
    cells too, which clearing a frame does not reach): for an error raised inside
    ``generate()`` that is the KV cache, the logits and the inputs, kept for as long as the
    run, a widget, a chat turn or a caught ``GenerationFailed`` keeps the error (on a GPU,
    the memory the next try needs after running out of it). So each traceback becomes text,
    kept as a note (which ``traceback.format_exception`` and IPython show with the message),
    and the frames are let go.

    Args:
        error: The exception that ended a run.

    Example:
        >>> drop_locals(error)
        >>> error.__traceback__ is None  # Python 3.11 and later
        True
    """
    pending: list[BaseException | None] = [error]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        pending += [current.__cause__, current.__context__]
        frames = current.__traceback__
        if frames is None:
            continue
        if sys.version_info < (3, 11):
            # No notes to keep the text in (format_exception shows them from 3.11): the
            # frames stay, without their locals.
            traceback.clear_frames(frames)
            continue
        where = "".join(traceback.format_tb(frames)).rstrip("\n")
        current.add_note(
            "Traceback (most recent call last), kept as text (its frames held the model's "
            f"tensors):\n{where}"
        )
        current.__traceback__ = None


def parse_json(text: str, finish_reason: str | None, settings: Mapping[str, Any]) -> Any:
    """The value of ``text``; raises :class:`InvalidJSON` saying where and what to do.

    Args:
        text: A run's final text.
        finish_reason: Why the run ended (``"length"`` gets its own hint).
        settings: The run's settings (``max_new_tokens``, for that hint).

    Returns:
        The parsed value.

    Example:
        >>> parse_json('{"a": 1}', "stop", {})
        {'a': 1}
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        near = text[max(0, exc.pos - 20) : exc.pos + 20]
        where = f"line {exc.lineno}, column {exc.colno} (character {exc.pos})"
        message = f"the answer is not valid JSON (expect='json'): {exc.msg} at {where}"
        if near:
            message += f", near {near!r}"
        if not text.strip():
            hint = "the answer is empty"
        elif finish_reason == "length":
            hint = (
                f"the answer was cut off at max_new_tokens={settings.get('max_new_tokens')}; "
                "raise max_new_tokens"
            )
        elif text.lstrip().startswith("```"):
            hint = "the answer is wrapped in a Markdown code fence; ask for bare JSON"
        else:
            hint = "ask the model for JSON only (an example in the prompt helps)"
        raise InvalidJSON(
            f"{message}. Hint: {hint}; the text is kept as partial_text", exc
        ) from exc


class RunLifecycle:
    """One run's worker thread and states, from its place in the model's queue to its end.

    The worker (:meth:`start`) waits for the model, runs the job, decides the one end state
    and publishes it (:meth:`publish_end`); the budget's timer may decide it first when a step
    hangs past the deadline. Made and owned by :class:`~nbstream.Generation`, which passes
    itself as ``owner`` (what done-callbacks are called with, and what names the threads).

    Args:
        job: The run's prepared job.
        settings: The run's settings (``expect``).
        buffer: Where the job puts the run's items.
        control: What the job consults to stop.
        text: The run's text, decoded on the reader side.
        queue: The model's queue, where the run waits for the model.

    Example:
        >>> lifecycle = RunLifecycle(job, settings, buffer, control, text, queue)
        >>> lifecycle.start(run)
        >>> lifecycle.done.wait(); lifecycle.status
        'complete'
    """

    def __init__(
        self,
        job: Job,
        settings: Mapping[str, Any],
        buffer: TokenBuffer,
        control: RunControl,
        text: RunText,
        queue: ModelQueue,
    ) -> None:
        self._job = job
        self._settings = settings
        self._buffer = buffer
        self._control = control
        self._text = text
        self._lock = threading.Lock()
        #: ``queued``, ``running``, then the end state, written last (see publish_end).
        self.status: Status = QUEUED
        # The end state once decided, before it is published (see publish_end): readers
        # see only status, written last, so an end they see is an end with all its parts.
        self._end: Status | None = None
        #: The exception of a failed run (read it once ``status`` is terminal).
        self.error: BaseException | None = None
        #: Why the run ended, as ``metrics["finish_reason"]`` says.
        self.finish_reason: FinishReason | None = None
        #: The parsed JSON of a complete run with ``expect="json"``.
        self.value: Any = None
        #: When the run was made: wall clock (for the record), then ``perf_counter``.
        self.created_at = time.time()
        self.created = time.perf_counter()
        #: When it got the model, and when its end was decided (``perf_counter``).
        self.started: float | None = None
        self.ended: float | None = None
        #: Set when the model is this run's (or it was withdrawn from the line, stopped).
        self.turn = threading.Event()
        #: Set once the end is published.
        self.done = threading.Event()
        self._callbacks: list[Callable[[Any], Any]] = []
        # The worker is inside the job (generating); the budget's watchdog may end the run
        # only then, and once it has, the worker no longer decides the end state.
        self._generating = False
        #: Ended by the budget's timer while a step went on (the worker then decides nothing).
        self.abandoned = False
        # stop() was called (cancel_event is also set by a failing decoder and the watchdog).
        self._stopped_by_user = False
        #: Why the run was stopped (stop's reason, or a replayed run's): kept for the message
        #: and the record; the run shows it only once it ended cancelled.
        self.cancel_reason: str | None = None
        self._watchdog: threading.Timer | None = None
        self.queue = queue

    def start(self, owner: Any) -> threading.Thread:
        """Take the run's place in its model's queue and start the worker.

        The run takes the model at once if it is free; a run that cannot start leaves no trace.

        Args:
            owner: The run (done-callbacks get it; the worker keeps it alive while it works).

        Returns:
            The worker thread, started.
        """
        # The worker's OpenMP team would otherwise share the CPUs with this thread's idle one.
        release_idle_openmp_threads()
        queue = self.queue
        if queue.try_acquire(self):
            self.status = RUNNING
            self.started = self.created
            self.turn.set()
        thread = threading.Thread(
            target=self._work, args=(owner,), name=f"{RUN_THREAD_PREFIX}{id(owner):x}", daemon=True
        )
        try:
            thread.start()
        except BaseException:
            # No worker (the process is out of threads): leave no trace of this run, above
            # all no place in the model's queue, which would stall every later run.
            if not queue.withdraw(self):
                queue.release(self)
            raise
        return thread

    # -- the worker ------------------------------------------------------------------------
    def _work(self, owner: Any) -> None:
        holds_model = False
        try:
            self.turn.wait()
            # Woken either with the model, or (stopped while queued) withdrawn from the line.
            holds_model = self.queue.snapshot()[0] is self
            if not self._begin():
                return
            self._control.start_clock()
            self._arm_watchdog(owner)
            try:
                # A backend ends a run by its model's end, its length or a stop string.
                reason = cast(FinishReason, self._job.run(self._buffer, self._control))
            finally:
                with self._lock:
                    self._generating = False
                    abandoned = self.abandoned
            if abandoned:
                return  # the budget's watchdog already ended the run; only the model was busy
            self._decide_end(reason)
        except BaseException as exc:  # any failure of the worker is a failed run, kept
            logger.debug("run failed", exc_info=True)
            with self._lock:
                if not self.abandoned:
                    self._finish(FAILED, "error", exc)
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()
            if holds_model:
                self.queue.release(self)
            if not self.abandoned:
                self.publish_end(owner)

    def _begin(self) -> bool:
        """The run has its turn: running from now.

        False if it was stopped while queued (it then ends cancelled, never having had the model).
        """
        with self._lock:
            if self._control.cancel_event.is_set():
                self._finish(CANCELLED, "cancelled", None)
                return False
            if self.started is None:
                self.started = time.perf_counter()
            self.status = RUNNING
            self._generating = True
        return True

    def _decide_end(self, reason: FinishReason) -> None:
        """Decide the end state once the job has returned ``reason``."""
        # Decode all of the text here, before the end state is decided: a decoder that
        # fails (here or in a reader) fails the run, and a complete run's text is final.
        text = self._text
        text.pump(final=True)
        if text.stop_found:
            reason = "stop"
        # A stop string in the text means the answer was over, whatever came after it
        # (a Stop click, the budget running out): the run is complete.
        ended_by_stop = reason == "stop"
        value, invalid = None, None
        if self._settings.get("expect") == "json" and text.decode_error is None:
            # Only ever the final text: a partial answer is not expected to parse.
            try:
                value = parse_json(text.text(), reason, self._settings)
            except InvalidJSON as exc:
                invalid = exc
        with self._lock:
            cancelled = self._control.cancel_event.is_set()
            if text.decode_error is not None:
                self._finish(FAILED, "error", text.decode_error)
            elif ended_by_stop or not (cancelled or self._control.timed_out):
                if invalid is not None:
                    self._finish(FAILED, "error", invalid)
                else:
                    self.value = value
                    self._finish(COMPLETE, reason, None)
            elif cancelled:
                if not self._stopped_by_user:
                    # Ended cancelled by the job itself (a replay of a cancelled run).
                    self.cancel_reason = self._control.cancel_reason
                self._finish(CANCELLED, "cancelled", None)
            else:
                self._finish(FAILED, "timeout", self._overrun())

    def _overrun(self) -> TimeoutError:
        return TimeoutError(f"the run overran its budget of {self._control.budget_s} s")

    def publish_end(self, owner: Any) -> None:
        """Make the decided end visible: text final, then ``done``, then wake every reader.

        In this order, so that whoever sees the end (an iterator woken by the buffer's
        close, a ``wait()``) finds the whole text, ``result``, ``value`` and ``record``.

        Args:
            owner: The run, for its done-callbacks.
        """
        self._text.pump(final=True)  # a no-op unless the job raised before the text was final
        if self.error is not None:
            # Before the error is published (run.error), outside the lock (it reads sources).
            drop_locals(self.error)
        with self._lock:  # with add_done_callback's check: no callback is ever missed
            if self._end is None:  # cannot happen: every way out of the worker decides
                self._finish(FAILED, "error", RuntimeError("the run ended without an end state"))
            # The one write that makes the end visible, after the text, the error and the
            # reason: a reader that sees a terminal status (``done`` is read from it too)
            # finds everything as that status says.
            end = self._end
            assert end is not None
            self.status = end
            self.done.set()
            callbacks, self._callbacks = self._callbacks, []
        self._buffer.close()
        self.run_callbacks(owner, callbacks)

    # -- the budget --------------------------------------------------------------------------
    def _arm_watchdog(self, owner: Any) -> None:
        # generate() checks the budget only between decode steps: a long prefill or a hung
        # step would hold the run (and wait()) past its budget. A timer ends the run at the
        # deadline whatever the model is doing; the model's queue stays held until the job
        # really returns, since the model is still busy until then.
        budget = self._control.budget_s
        if budget is None:
            return
        self._watchdog = threading.Timer(budget, self._budget_spent, args=(owner,))
        self._watchdog.name = f"{RUN_THREAD_PREFIX}budget-{id(owner):x}"
        self._watchdog.daemon = True
        self._watchdog.start()

    def _budget_spent(self, owner: Any) -> None:
        budget = self._control.budget_s
        with self._lock:
            if not self._generating or self._end is not None:
                return  # the job already returned: the worker decides, as usual
            # From here on this thread decides the end; the worker only releases the model
            # when its step finally returns.
            self.abandoned = True
            self._control.timed_out = True
        self._control.cancel_event.set()  # halt at the next step, if there is one
        logger.debug("run %x: budget of %s s spent while the model was busy", id(owner), budget)
        text = self._text
        text.pump(final=True)  # the text is closed on what was generated by the deadline
        with self._lock:
            if text.decode_error is not None:
                self._finish(FAILED, "error", text.decode_error)
            elif text.stop_found or self._control.stop_found.is_set():
                # The answer was over (a stop string) before the step hung: complete, as
                # the worker would have decided.
                self._finish(COMPLETE, "stop", None)
            elif self._stopped_by_user:
                # Stopped, and the budget says not to wait any longer for the step to end.
                self._finish(CANCELLED, "cancelled", None)
            else:
                # The same words as an overrun seen between steps: the user's fact is the same.
                self._finish(FAILED, "timeout", self._overrun())
        self.publish_end(owner)

    def _finish(self, status: Status, reason: FinishReason, error: BaseException | None) -> None:
        # Called with self._lock held: the end state, its reason and its error change together.
        # Decided here, published by publish_end once the text is final.
        if self._end is not None:
            return  # exactly one end state: the first one decided stays
        self.ended = time.perf_counter()
        self.finish_reason = reason
        self.error = error
        self._end = status

    # -- the end's callbacks, Stop -----------------------------------------------------------
    @staticmethod
    def run_callbacks(owner: Any, callbacks: list[Callable[[Any], Any]]) -> None:
        """Call each of ``callbacks`` with ``owner``; log what raises, change nothing.

        Args:
            owner: The run.
            callbacks: The done-callbacks.
        """
        for callback in callbacks:
            try:
                callback(owner)
            except Exception:
                logger.exception("an nbstream done-callback raised; the run's state is unchanged")

    def add_done_callback(self, callback: Callable[[Any], Any]) -> bool:
        """Keep ``callback`` for the end; False if the run has already ended (call it now).

        Args:
            callback: Called with the run once it has ended.

        Returns:
            Whether it was kept.
        """
        with self._lock:
            if not self.done.is_set():
                self._callbacks.append(callback)
                return True
        return False

    def remove_done_callback(self, callback: Callable[[Any], Any]) -> None:
        """Forget ``callback``, if it is still kept.

        Args:
            callback: One given to :meth:`add_done_callback`.
        """
        with self._lock, contextlib.suppress(ValueError):
            self._callbacks.remove(callback)

    def stop(self, reason: str | None = None) -> bool:
        """Stop the run cooperatively (see :meth:`nbstream.Generation.stop`).

        Args:
            reason: Why, kept as :attr:`cancel_reason`; the first stop's reason stays.

        Returns:
            True if the run was queued or running; False if it had ended or was stopped.
        """
        with self._lock:
            if self._end is not None or self._control.cancel_event.is_set():
                return False
            self._control.cancel_event.set()
            self._stopped_by_user = True
            self.cancel_reason = reason
            queued = self.status == QUEUED
        if queued and self.queue.withdraw(self):
            self.turn.set()  # wake the worker so it ends cancelled without the model
        return True

    # -- the figures ---------------------------------------------------------------------------
    def metrics(self) -> Metrics:
        """Timings and counts (see :attr:`nbstream.Generation.metrics`); the text pumped first.

        Returns:
            Every key of :data:`METRIC_KEYS`, ``None`` until known, then the job's own.
        """
        text = self._text
        text.pump()
        started, ended = self.started, self.ended
        tokens = self._job.count_tokens(self._buffer)
        # Counted after the tokens (a time is put before its token): every token counted
        # has its time. Read by index, never sliced: a widget reads the metrics with every
        # frame, and a copy of every token's time grows with the answer.
        times = self._buffer.times
        kept = len(times)
        if self.abandoned and text.finalized:
            # Ended by the budget while a step went on: count what the run kept, not the
            # tokens the model put after its end.
            kept = min(kept, text.decoded)
            if tokens is not None and tokens > text.decoded:
                tokens = text.decoded
        forced_items, forced_tokens, counted = self._forced()
        timed = kept - forced_items  # the generated items' times: times[forced_items:kept]
        generated = tokens - counted if tokens is not None else None
        metrics = cast(Metrics, dict.fromkeys(METRIC_KEYS))
        if started is not None:
            metrics["queued_s"] = started - self.created
            now = ended if ended is not None else time.perf_counter()
            metrics["elapsed_s"] = now - started
            if timed > 0:
                metrics["ttft_s"] = times[forced_items] - started
            if text.first_chunk_at is not None:
                metrics["first_chunk_s"] = text.first_chunk_at - started
        elif ended is not None:
            metrics["queued_s"] = ended - self.created
        metrics["tokens"] = tokens
        metrics["forced_tokens"] = forced_tokens
        if generated and generated >= 2 and timed >= 2:
            first, last = times[forced_items], times[kept - 1]
            if last > first:
                metrics["tokens_per_s"] = (generated - 1) / (last - first)
        # Published with the end state, as the rest of the end.
        metrics["finish_reason"] = self.finish_reason if self.status in TERMINAL else None
        if text.thought:
            # Still thinking: every token so far is thinking.
            metrics["thinking_tokens"] = (
                text.thinking_tokens if text.thinking_tokens is not None else tokens
            )
            if started is not None and text.first_answer_at is not None:
                metrics["first_answer_s"] = text.first_answer_at - started
        else:
            metrics["first_answer_s"] = metrics["first_chunk_s"]
        # Counts only a backend knows (a server's received chunks), after the common keys.
        metrics.update(cast(Metrics, self._job.extra_metrics()))
        return metrics

    def _forced(self) -> tuple[int, int | None, int]:
        """A branch's forced start: how many buffer items, tokens and counted tokens it is.

        How many of the buffer's first items it is, how many tokens (None: a server's, not counted),
        and how many of them ``count_tokens`` counts (a local model counts its ids; a server counts
        what it generated).
        """
        ids = self._job.prefix_ids
        if ids:
            return len(ids), len(ids), len(ids)
        if self._job.assistant_prefix:
            # Sent as one text, put as one item; as long as the parent's trace records.
            return 1, self._job.prefix_steps, 0
        return 0, 0, 0
