"""One run: its worker thread, its states, stop, budget, metrics, and reading its text.

A run is ``queued`` while another run holds the same model (FIFO, never interleaved),
``running`` once it has the model, then exactly one of ``complete``, ``failed`` or
``cancelled``. The end state is decided by the worker from what actually happened: the end
of the token stream is never taken as success on its own.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures.thread  # noqa: F401 (its exit hook first: see below)
import contextlib
import copy
import json
import logging
import os
import pathlib
import sys
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, Final, cast

from . import recording
from ._errors import input_checked
from .backends import RunControl, resolve_backend
from .backends.base import Backend, Job
from .backends.replay import RECORDING_HAS_NO_LOGITS, ReplayBackend, ReplayJob, check_speed
from .distribution import Distribution
from .lens import Attribution, Lens, attribution_at, lens_at
from .protocol import FinishReason, Metrics, RunRecord, Status
from .record import build_record, replay_arguments, warn_if_different
from .settings import DEFAULT_THINKING_TAGS, validate_settings
from .streaming import StopFilter, ThinkingSplitter, TokenBuffer
from .trace import RemoteTrace, TokenTrace

__all__ = [
    "CANCELLED",
    "COMPLETE",
    "FAILED",
    "METRIC_KEYS",
    "QUEUED",
    "RUNNING",
    "RUN_THREAD_PREFIX",
    "TERMINAL",
    "Generation",
    "GenerationCancelled",
    "GenerationError",
    "GenerationFailed",
    "InvalidJSON",
    "active_runs",
    "replay",
    "rerun",
    "stream",
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
# A reader woken more often than this only sees one more token each time; waiting a little
# lets a fast model's tokens pile up so they are decoded and handed on together (50 wakes
# a second at most: on a small CPU each wake takes the GIL from the generating thread).
_MIN_WAKE_INTERVAL_S = 0.02
# After a KeyboardInterrupt in wait(), how long to wait for the worker to acknowledge Stop.
_INTERRUPT_GRACE_S = 10.0
#: Every thread nbstream starts for a run (its worker, its budget's timer) is named so.
RUN_THREAD_PREFIX = "nbstream-run-"
#: The reason a run gives when a KeyboardInterrupt (Ctrl-C, the kernel's interrupt button)
#: reached the code following it.
INTERRUPTED = "interrupted (Ctrl-C, or the kernel's interrupt button)"


class GenerationError(Exception):
    """A run did not complete. ``partial_text`` holds what it produced before it ended.

    Args:
        message: What happened, in one sentence.
        generation: The run that ended, kept as ``generation``.

    Example:
        >>> try:
        ...     run.wait()
        ... except nbstream.GenerationError as error:
        ...     print(error.partial_text)
    """

    def __init__(self, message: str, generation: Generation | None = None) -> None:
        super().__init__(message)
        self.generation = generation

    @property
    def thinking(self) -> str | None:
        """The run's thinking so far (a reasoning model), kept apart from its text."""
        return self.generation.thinking if self.generation is not None else None

    @property
    def partial_text(self) -> str:
        """The text the run had produced before it ended (empty without a run)."""
        return self.generation.partial_text if self.generation is not None else ""


class GenerationCancelled(GenerationError):
    """The run was stopped (``stop()``, a Stop click, or a kernel interrupt).

    Args:
        message: What happened, with the stop's reason when one was given.
        generation: The run that was stopped.
    """

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for it in a notebook: one line, not the library's frames.

        A run that was stopped on purpose has no bug to find in nbstream's code, and IPython
        shows the lines this returns instead of a traceback (a script still gets the whole
        traceback).
        """
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]


class GenerationFailed(GenerationError):
    """The run raised, or overran its budget. The original exception is ``__cause__``.

    Args:
        message: What happened.
        generation: The run that failed.
    """


class InvalidJSON(ValueError):
    """The final text of a run with ``expect="json"`` does not parse as JSON.

    ``lineno``, ``colno`` and ``pos`` say where (as :class:`json.JSONDecodeError`, which
    is the ``__cause__``); the text itself stays the run's ``partial_text``.
    """

    def __init__(self, message: str, error: json.JSONDecodeError) -> None:
        super().__init__(message)
        self.lineno = error.lineno
        self.colno = error.colno
        self.pos = error.pos


def _drop_locals(error: BaseException) -> None:
    """Let ``error`` (and its causes and contexts) keep where it was raised, not what was there.

    A traceback holds its frames, and the frames their locals and functions (a closure's
    cells too, which clearing a frame does not reach): for an error raised inside
    ``generate()`` that is the KV cache, the logits and the inputs, kept for as long as the
    run, a widget, a chat turn or a caught ``GenerationFailed`` keeps the error (on a GPU,
    the memory the next try needs after running out of it). So each traceback becomes text,
    kept as a note (which ``traceback.format_exception`` and IPython show with the message),
    and the frames are let go.
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


def _parse_json(text: str, finish_reason: str | None, settings: dict[str, Any]) -> Any:
    """The value of ``text``; raises :class:`InvalidJSON` saying where and what to do."""
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


class _Ticket:
    """A place in a model's queue for work that is not a run.

    Such work is, for example, a forward pass that explains a step: it waits its turn as a run does,
    so it never runs beside one.
    """

    def __init__(self) -> None:
        self._turn = threading.Event()


class _ModelQueue:
    """FIFO access to one model: one run at a time, in the order they were started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holder: Generation | _Ticket | None = None
        self._waiting: deque[Generation | _Ticket] = deque()

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Hold the model for the block: after the runs queued before, before later ones."""
        ticket = _Ticket()
        if not self.try_acquire(ticket):
            try:
                ticket._turn.wait()
            except BaseException:
                if not self.withdraw(ticket):  # the model came meanwhile: pass it on
                    self.release(ticket)
                raise
        try:
            yield
        finally:
            self.release(ticket)

    def try_acquire(self, run: Generation | _Ticket) -> bool:
        with self._lock:
            if self._holder is None and not self._waiting:
                self._holder = run
                return True
            self._waiting.append(run)
            return False

    def withdraw(self, run: Generation | _Ticket) -> bool:
        """Take a queued run out of the line; False if it already got the model."""
        with self._lock:
            try:
                self._waiting.remove(run)
            except ValueError:
                return False
            return True

    def release(self, run: Generation | _Ticket) -> None:
        with self._lock:
            if self._holder is not run:
                return
            self._holder = self._waiting.popleft() if self._waiting else None
            if self._holder is not None:
                self._holder._turn.set()

    def snapshot(self) -> tuple[Generation | _Ticket | None, list[Generation | _Ticket]]:
        with self._lock:
            return self._holder, list(self._waiting)


_queues: weakref.WeakKeyDictionary[Any, _ModelQueue] = weakref.WeakKeyDictionary()
_strong_queues: dict[Any, _ModelQueue] = {}
_queues_lock = threading.Lock()
# Runs are added by whichever thread starts them and dropped by the garbage collector: a
# WeakSet iterated while another thread adds to it raises, so every use holds the lock.
_live: weakref.WeakSet[Generation] = weakref.WeakSet()
_live_lock = threading.Lock()


def _queue_for(key: Any) -> _ModelQueue:
    with _queues_lock:
        try:
            table: Any = _queues
            queue: _ModelQueue | None = table.get(key)
        except TypeError:  # not weak-referenceable: keep it for the process
            table = _strong_queues
            queue = table.get(key)
        if queue is None:
            queue = table[key] = _ModelQueue()
        return queue


def active_runs() -> list[Generation]:
    """Runs in this process that are queued or running."""
    with _live_lock:
        runs = list(_live)
    return [run for run in runs if run.status not in TERMINAL]


#: How long the interpreter's exit waits for the runs it stops: a decode step or two.
EXIT_JOIN_S = 10.0


def _stop_runs_at_exit() -> None:
    """Stop every run still going when the interpreter exits, and wait for its worker.

    A run's worker is a daemon thread; torch aborts the whole process (SIGABRT,
    "terminate called without an active exception") when one is inside an operation while
    the interpreter shuts down, so a script that ends before its run would die instead of
    exiting. Stopped here, each run ends ``cancelled`` within a decode step.

    Called before the interpreter joins its non-daemon threads (see below): work waiting in
    a model's queue on such a thread (a compare mark, the sampling panel's) would otherwise
    wait there for every run ahead of it to end on its own.
    """
    runs = active_runs()
    for run in runs:
        run.stop("the interpreter is exiting")
    deadline = time.monotonic() + EXIT_JOIN_S
    for run in runs:
        if not run.join(max(0.0, deadline - time.monotonic())):
            logger.warning("a run was still working when the interpreter exited")


# threading's own exit hooks run before it joins the non-daemon threads; atexit's run only
# after. They run last registered first: concurrent.futures joins its workers (the sampling
# panel's) from one, so it is imported first (above) to register before this one. Private
# API, hence the guard.
_at_threading_exit = getattr(threading, "_register_atexit", None)
if callable(_at_threading_exit):
    _at_threading_exit(_stop_runs_at_exit)
else:  # pragma: no cover (an interpreter without it: runs are still stopped, later)
    atexit.register(_stop_runs_at_exit)


class Generation:
    """A streamed run, started by :func:`stream`. Never blocks unless you ask it to.

    Made by :func:`stream`, :func:`rerun`, :meth:`branch` and the widgets, not directly.

    Args:
        backend: What produces the tokens (:mod:`nbstream.backends`).
        job: The prepared, checked run (``backend.prepare``).
        settings: The validated settings.

    Example:
        >>> import nbstream
        >>> model, tokenizer = nbstream.load_model()
        >>> run = nbstream.stream(model, tokenizer, "Name two colors.", max_new_tokens=20)
        >>> for chunk in run:
        ...     print(chunk, end="")
        >>> run.status, run.result == run.partial_text
        ('complete', True)
    """

    def __init__(self, backend: Backend, job: Job, settings: dict[str, Any]) -> None:
        self._backend = backend
        self._job = job
        #: The settings this run was asked for (after validation).
        self.settings = dict(job.settings)
        #: The prompt as given: a string or a list of messages.
        self.prompt = job.prompt
        #: The exact text the model sees (chat template and special tokens included).
        self.prompt_text = job.prompt_text
        #: How many tokens ``prompt_text`` is.
        self.prompt_tokens = job.prompt_tokens
        self._lock = threading.Lock()
        self._status: Status = QUEUED
        # The end state once decided, before it is published (see _publish_end): readers
        # see only _status, written last, so an end they see is an end with all its parts.
        self._end: Status | None = None
        self._error: BaseException | None = None
        self._finish_reason: FinishReason | None = None
        self._control = RunControl(settings.get("budget_s"))
        self._buffer = TokenBuffer()
        self._decoder = job.decoder()
        # A backend that captures the trace (alternatives > 0) gives its job one.
        self._trace_capture = job.trace_capture
        stops = self.settings.get("stop")
        self._stops = StopFilter(stops) if stops else None
        self._value: Any = None
        self._record: RunRecord | None = None
        self._created_at = time.time()
        self._init_text(job)
        self._created = time.perf_counter()
        self._started: float | None = None
        self._ended: float | None = None
        self._turn = threading.Event()
        self._done = threading.Event()
        self._callbacks: list[Callable[[Generation], Any]] = []
        # The worker is inside the job (generating); the budget's watchdog may end the run
        # only then, and once it has, the worker no longer decides the end state.
        self._generating = False
        self._abandoned = False
        # stop() was called (cancel_event is also set by a failing decoder and the watchdog).
        self._stopped_by_user = False
        # Why, when the caller said (stop(reason=...)): kept for the message and the record.
        self._cancel_reason: str | None = None
        self._watchdog: threading.Timer | None = None
        # Set by branch(): the run this one branched from, and where (see branch_info).
        self._parent: Generation | None = None
        #: A rerun branch's parent, as its record has it (the run itself is not at hand).
        self._parent_record: Any = None
        self._branch: dict[str, Any] | None = None
        self._start(backend.queue_key())

    def _init_text(self, job: Job) -> None:
        """The reader side's state: the decoded text, its thinking, and their times."""
        self._decode_lock = threading.Lock()
        self._decoded = 0
        # The text is kept as its chunks; joined on demand (see _text): appending to one
        # growing string would copy the whole answer on every chunk.
        self._chunks: list[str] = []
        # (text, how many chunks it joins): one attribute, so readers replace it atomically.
        self._joined: tuple[str, int] = ("", 0)
        self._finalized = False
        self._decode_error: Exception | None = None
        self._first_chunk_at: float | None = None
        # A reasoning model's thinking, split from the answer on the reader side: its
        # chunks, how many tokens it took, and when the answer's first text came.
        self._thinker = _thinking_splitter(job, self.settings)
        self._thinking_chunks: list[str] = []
        self._thinking_tokens: int | None = None
        self._first_answer_at: float | None = None
        # What the decoder emitted, before splitting and stop strings (for its finish()).
        self._raw: list[str] = []

    def _start(self, queue_key: Any) -> None:
        """Take this run's place in its model's queue and start the worker.

        The run takes the model at once if it is free; a run that cannot start leaves no trace.
        """
        self._queue = _queue_for(queue_key)
        if self._queue.try_acquire(self):
            self._status = RUNNING
            self._started = self._created
            self._turn.set()
        self._thread = threading.Thread(
            target=self._work, name=f"{RUN_THREAD_PREFIX}{id(self):x}", daemon=True
        )
        try:
            self._thread.start()
        except BaseException:
            # No worker (the process is out of threads): leave no trace of this run, above
            # all no place in the model's queue, which would stall every later run.
            if not self._queue.withdraw(self):
                self._queue.release(self)
            raise
        with _live_lock:
            _live.add(self)

    # -- the worker ------------------------------------------------------------------------
    def _work(self) -> None:
        holds_model = False
        try:
            self._turn.wait()
            # Woken either with the model, or (stopped while queued) withdrawn from the line.
            holds_model = self._holder_is_self()
            if not self._begin():
                return
            self._control.start_clock()
            self._arm_watchdog()
            try:
                # A backend ends a run by its model's end, its length or a stop string.
                reason = cast(FinishReason, self._job.run(self._buffer, self._control))
            finally:
                with self._lock:
                    self._generating = False
                    abandoned = self._abandoned
            if abandoned:
                return  # the budget's watchdog already ended the run; only the model was busy
            self._decide_end(reason)
        except BaseException as exc:  # any failure of the worker is a failed run, kept
            logger.debug("run failed", exc_info=True)
            with self._lock:
                if not self._abandoned:
                    self._finish(FAILED, "error", exc)
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()
            if holds_model:
                self._queue.release(self)
            if not self._abandoned:
                self._publish_end()

    def _begin(self) -> bool:
        """The run has its turn: running from now.

        False if it was stopped while queued (it then ends cancelled, never having had the model).
        """
        with self._lock:
            if self._control.cancel_event.is_set():
                self._finish(CANCELLED, "cancelled", None)
                return False
            if self._started is None:
                self._started = time.perf_counter()
            self._status = RUNNING
            self._generating = True
        return True

    def _decide_end(self, reason: FinishReason) -> None:
        """Decide the end state once the job has returned ``reason``."""
        # Decode all of the text here, before the end state is decided: a decoder that
        # fails (here or in a reader) fails the run, and a complete run's text is final.
        self._pump(final=True)
        if self._stops is not None and self._stops.found is not None:
            reason = "stop"
        # A stop string in the text means the answer was over, whatever came after it
        # (a Stop click, the budget running out): the run is complete.
        ended_by_stop = reason == "stop"
        value, invalid = None, None
        if self.settings.get("expect") == "json" and self._decode_error is None:
            # Only ever the final text: a partial answer is not expected to parse.
            try:
                value = _parse_json(self._text(), reason, self.settings)
            except InvalidJSON as exc:
                invalid = exc
        with self._lock:
            cancelled = self._control.cancel_event.is_set()
            if self._decode_error is not None:
                self._finish(FAILED, "error", self._decode_error)
            elif ended_by_stop or not (cancelled or self._control.timed_out):
                if invalid is not None:
                    self._finish(FAILED, "error", invalid)
                else:
                    self._value = value
                    self._finish(COMPLETE, reason, None)
            elif cancelled:
                if not self._stopped_by_user:
                    # Ended cancelled by the job itself (a replay of a cancelled run).
                    self._cancel_reason = self._control.cancel_reason
                self._finish(CANCELLED, "cancelled", None)
            else:
                budget = self._control.budget_s
                self._finish(
                    FAILED, "timeout", TimeoutError(f"the run overran its budget of {budget} s")
                )

    def _publish_end(self) -> None:
        """Make the decided end visible: text final, then ``done``, then wake every reader.

        In this order, so that whoever sees the end (an iterator woken by the buffer's
        close, a ``wait()``) finds the whole text, ``result``, ``value`` and ``record``.
        """
        self._pump(final=True)  # a no-op unless the job raised before the text was final
        if self._error is not None:
            # Before the error is published (run.error), outside the lock (it reads sources).
            _drop_locals(self._error)
        with self._lock:  # with add_done_callback's check: no callback is ever missed
            if self._end is None:  # cannot happen: every way out of the worker decides
                self._finish(FAILED, "error", RuntimeError("the run ended without an end state"))
            # The one write that makes the end visible, after the text, the error and the
            # reason: a reader that sees a terminal status (``done`` is read from it too)
            # finds everything as that status says.
            end = self._end
            assert end is not None
            self._status = end
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        self._buffer.close()
        self._run_callbacks(callbacks)

    def _arm_watchdog(self) -> None:
        # generate() checks the budget only between decode steps: a long prefill or a hung
        # step would hold the run (and wait()) past its budget. A timer ends the run at the
        # deadline whatever the model is doing; the model's queue stays held until the job
        # really returns, since the model is still busy until then.
        budget = self._control.budget_s
        if budget is None:
            return
        self._watchdog = threading.Timer(budget, self._budget_spent)
        self._watchdog.name = f"{RUN_THREAD_PREFIX}budget-{id(self):x}"
        self._watchdog.daemon = True
        self._watchdog.start()

    def _budget_spent(self) -> None:
        budget = self._control.budget_s
        with self._lock:
            if not self._generating or self._end is not None:
                return  # the job already returned: the worker decides, as usual
            # From here on this thread decides the end; the worker only releases the model
            # when its step finally returns.
            self._abandoned = True
            self._control.timed_out = True
        self._control.cancel_event.set()  # halt at the next step, if there is one
        logger.debug("run %x: budget of %s s spent while the model was busy", id(self), budget)
        self._pump(final=True)  # the text is closed on what was generated by the deadline
        found = self._stops is not None and self._stops.found is not None
        with self._lock:
            if self._decode_error is not None:
                self._finish(FAILED, "error", self._decode_error)
            elif found or self._control.stop_found.is_set():
                # The answer was over (a stop string) before the step hung: complete, as
                # the worker would have decided.
                self._finish(COMPLETE, "stop", None)
            elif self._stopped_by_user:
                # Stopped, and the budget says not to wait any longer for the step to end.
                self._finish(CANCELLED, "cancelled", None)
            else:
                # The same words as an overrun seen between steps: the user's fact is the same.
                self._finish(
                    FAILED, "timeout", TimeoutError(f"the run overran its budget of {budget} s")
                )
        self._publish_end()

    def _holder_is_self(self) -> bool:
        holder, _ = self._queue.snapshot()
        return holder is self

    def _finish(self, status: Status, reason: FinishReason, error: BaseException | None) -> None:
        # Called with self._lock held: the end state, its reason and its error change together.
        # Decided here, published by _publish_end once the text is final.
        if self._end is not None:
            return  # exactly one end state: the first one decided stays
        self._ended = time.perf_counter()
        self._finish_reason = reason
        self._error = error
        self._end = status

    def _run_callbacks(self, callbacks: list[Callable[[Generation], Any]]) -> None:
        for callback in callbacks:
            try:
                callback(self)
            except Exception:
                logger.exception("an nbstream done-callback raised; the run's state is unchanged")

    def _remove_done_callback(self, callback: Callable[[Generation], Any]) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._callbacks.remove(callback)

    def add_done_callback(self, callback: Callable[[Generation], Any]) -> None:
        """Call ``callback(run)`` once the run has ended.

        It runs on the worker thread (or the budget's timer thread for a run ended at its
        deadline), or at once if the run has already ended. Its exceptions are logged and
        never change the run's state.

        Args:
            callback: Called with the run.
        """
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        try:
            callback(self)
        except Exception:
            logger.exception("an nbstream done-callback raised; the run's state is unchanged")

    # -- state -------------------------------------------------------------------------------
    @property
    def status(self) -> Status:
        """``"queued"``, ``"running"``, ``"complete"``, ``"failed"`` or ``"cancelled"``."""
        return self._status

    @property
    def done(self) -> bool:
        """True once the run has ended (its state is final and its text complete)."""
        # Read from the status, so that the two never disagree (see _publish_end).
        return self._status in TERMINAL

    def wait_done(self, timeout: float | None = None) -> bool:
        """Block until the run has ended; never raises.

        Unlike :meth:`wait`, it neither returns the text nor raises the run's error: for
        code that only needs to know when the run is over.

        Args:
            timeout: At most this many seconds; ``None`` waits as long as it takes.

        Returns:
            :attr:`done`.
        """
        self._done.wait(timeout)
        return self.done

    @property
    def error(self) -> BaseException | None:
        """The exception that ended a failed run (a ``TimeoutError`` for a budget overrun)."""
        return self._error if self._status in TERMINAL else None

    @property
    def cancel_reason(self) -> str | None:
        """Why the run was stopped, as given to :meth:`stop`.

        ``None`` if no reason was given, or the run was not stopped. Also in :attr:`record`
        (``cancel_reason``).
        """
        return self._cancel_reason if self._status == CANCELLED else None

    @property
    def value(self) -> Any:
        """The parsed JSON of a complete run with ``expect="json"``; ``None`` otherwise."""
        if self._status != COMPLETE:
            return None
        return self._value

    @property
    def record(self) -> RunRecord | None:
        """What reproduces this run, once it has ended (any end state); ``None`` before.

        A JSON-serializable dict: ``model``, ``prompt``, ``prompt_tokens``, ``settings``
        (every setting in effect), ``seed`` (the one sampling used, drawn if none was
        given), ``status``, ``metrics``, ``versions`` and more; see :mod:`nbstream.record`.
        ``cancel_reason`` is :attr:`cancel_reason` (``None`` unless a cancelled run's
        stop gave one). :func:`nbstream.rerun` starts the same run again from it.

        Example::

            >>> run = nbstream.stream(model, tokenizer, "Hi", temperature=0.8)
            >>> text = run.wait()
            >>> nbstream.rerun(run.record, model, tokenizer).wait() == text
            True
        """
        status = self._status
        if status not in TERMINAL:
            return None
        record = self._record
        if record is None:
            # Built once, on first use, off the generating thread; whole before it is kept,
            # as another reader may copy the kept one at any moment.
            record = build_record(
                backend=self._backend,
                job=self._job,
                status=status,
                metrics=self.metrics,
                error=self._error,
                created_at=self._created_at,
            )
            record["cancel_reason"] = self.cancel_reason
            record["branch"] = self._branch_record()
            # A reasoning model's thinking, kept apart from the text (None: it did not think).
            record["thinking"] = self.thinking
            self._record = record
        return copy.deepcopy(record)  # each caller may edit its own copy

    @property
    def result(self) -> str | None:
        """The final text, only when the run completed; ``None`` otherwise."""
        if self._status != COMPLETE:
            return None  # once it is, the text is final (see _publish_end)
        self._pump()
        return self._text()

    @property
    def thinking(self) -> str | None:
        """A reasoning model's thinking (``None`` for a run that did not think).

        While it streams, the thinking so far; after any end, all of it (a cancelled or failed run
        keeps its partial thinking here, never in ``result``). The answer alone is in ``result``,
        ``partial_text`` and the chunks the run yields.
        """
        self._pump()
        thinker = self._thinker
        if thinker is None or not thinker.opened:
            return None
        return "".join(self._thinking_chunks)

    @property
    def thinking_tags(self) -> tuple[str, str] | None:
        """The tags this run looked for around a reasoning model's thinking (None: off)."""
        thinker = self._thinker
        return (thinker.open_tag, thinker.close_tag) if thinker is not None else None

    @property
    def partial_text(self) -> str:
        """The text decoded so far (all of it once the run has ended)."""
        self._pump()
        return self._text()

    @property
    def token_ids(self) -> list[int]:
        """The generated token ids so far (local models); a new list on each call."""
        self._pump()
        ids: list[int] | None = getattr(self._decoder, "ids", None)  # already a copy
        return ids if ids is not None else []

    @property
    def seed(self) -> int | None:
        """The seed sampling uses: the one given, or one drawn for a sampled run given none.

        ``None`` for a greedy run. Known from the start; the record keeps it after.
        """
        return self._job.seed

    @property
    def progress(self) -> int:
        """How many items (tokens; a server's events) the model has produced so far.

        Only ever grows. With :meth:`wait_for_progress`, a reader that polls the run sleeps
        until there is something new instead of on a timer.
        """
        return len(self._buffer.items)

    def wait_for_progress(self, seen: int, timeout: float | None = None) -> bool:
        """Block until :attr:`progress` exceeds ``seen`` or the run has ended.

        Read ``progress`` *before* reading the text, then pass it here: nothing produced
        in between is missed.

        Args:
            seen: The :attr:`progress` read before the text.
            timeout: At most this many seconds; ``None`` waits as long as it takes.

        Returns:
            True if there is something new to read.
        """
        return self._buffer.wait_for_more(seen, timeout)

    @property
    def trace(self) -> list[TokenTrace] | RemoteTrace | None:
        """One :class:`~nbstream.trace.TokenTrace` per generated token so far, or ``None``.

        ``None`` unless the run was started with ``alternatives=k`` (k > 0). A snapshot:
        readable while the run streams and after any end (a stopped run keeps the trace of
        the tokens it made); ``trace[i].id == token_ids[i]``. Each record has ``id``,
        ``text``, ``logprob`` (the model's own, from the raw logits), ``alternatives`` (the
        top k as ``(id, text, logprob)``, best first), ``cut`` and ``rank``: see
        :mod:`nbstream.trace`. On a server (:class:`~nbstream.Endpoint`) it is a
        :class:`~nbstream.trace.RemoteTrace` of what the server sent: no token ids, and
        ``run.trace.incomplete`` says why when it stops short of the text.

        Example::

            >>> run = nbstream.stream(model, tokenizer, "Hi", alternatives=3, temperature=0.8)
            >>> text = run.wait()
            >>> steps = [(step.text, round(step.prob, 2), step.rank) for step in run.trace]
        """
        capture = self._trace_capture
        if capture is None:
            return None
        records: list[TokenTrace] | RemoteTrace = capture.records(self.token_ids)
        return records

    # -- what if: branches and the sampling explainer ---------------------------------------
    @input_checked
    def branch(self, step: int, token: Any, **settings: Any) -> Generation:
        """A new run that keeps this run's first ``step`` tokens, takes ``token``, goes on.

        Returned at once, like :func:`stream`, with this run's settings (its seed too)
        unless overridden. Its ``token_ids`` start with those ``step + 1`` tokens (they
        count toward ``max_new_tokens``); its record names this run's as its parent, so
        :func:`rerun` repeats it. On a server that continues an answer (see
        :mod:`nbstream.backends.servers`), the answer so far goes as text
        (``record["branch"]["prefix_text"]``).

        Args:
            step: Where the answer takes another token (0-based, into ``token_ids``).
            token: A token id, or one of ``run.trace[step].alternatives`` (a text too, on
                a server).
            **settings: Override this run's settings for the branch.

        Raises:
            RuntimeError: This run has not ended (wait for it, or stop it, first).
            ValueError: A backend that cannot branch says why, before anything is sent.

        Example:
            >>> run = nbstream.stream(model, tokenizer, "Name a color.", alternatives=5)
            >>> text = run.wait()
            >>> other = run.trace[0].alternatives[1]       # the model's second choice
            >>> branch = run.branch(0, other)
            >>> branch.wait(); branch.token_ids[0] == other.id
            True
        """
        backend = self._backend
        if not backend.is_server:
            why = backend.why_no_branch()
            if why is not None:
                raise ValueError(why)
        if not self._done.is_set():
            raise RuntimeError(
                "this run has not ended: wait() for it, or stop() it, before branching"
            )
        if backend.is_server:
            # A server (nbstream.Endpoint): the answer so far goes as text for it to continue.
            clean = self._branch_settings(settings)
            job, info = backend.branch_job(self, step, token, clean)
            return self._branched(job, clean, info)
        ids = self.token_ids
        step = self._check_step(step, len(ids))
        token_id = getattr(token, "id", token)
        if isinstance(token_id, bool) or not isinstance(token_id, int):
            raise TypeError(
                f"token must be a token id or one of run.trace[{step}].alternatives, "
                f"got {token!r:.80}"
            )
        clean = self._branch_settings(settings)
        job = backend.prepare(self.prompt, clean, prefix_ids=[*ids[:step], token_id])
        return self._branched(
            job, clean, {"step": step, "token": token_id, "parent_token": ids[step]}
        )

    def _branch_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        """A branch's settings: this run's as asked, then ``settings`` over them."""
        asked = validate_settings(settings)
        clean = {**self._asked_settings(), **asked}
        if "seed" not in asked and self.seed is not None:
            clean["seed"] = self.seed  # the same dice: a sampled branch is reproducible too
        return clean

    def _branched(self, job: Job, settings: dict[str, Any], info: dict[str, Any]) -> Generation:
        """Start the branch ``job`` of this run; ``info`` is what its ``branch_info`` says."""
        run = Generation(self._backend, job, settings)
        run._parent = self
        run._branch = info
        return run

    def _asked_settings(self) -> dict[str, Any]:
        """What this run was given, not what it resolved from them and the model's defaults.

        Resolved values such as ``do_sample`` and ``max_new_tokens`` are not here: a branch inherits
        these, so that its own settings mean what they mean on a fresh run.
        """
        asked = self._job.asked
        return dict(asked if asked is not None else self.settings)

    @property
    def branch_info(self) -> dict[str, Any] | None:
        """Where a branch left its parent; ``None`` for a run not made by :meth:`branch`.

        For a run made by :meth:`branch`: ``{"parent": the run, "step", "token", "parent_token",
        "prefix_ids"}``.
        """
        if self._branch is None:
            return None
        if "prefix_text" in self._branch:  # a branch on a server: text, no token ids
            return {"parent": self._parent, **self._branch}
        prefix = list(self._job.prefix_ids)
        return {"parent": self._parent, **self._branch, "prefix_ids": prefix}

    def _branch_record(self) -> dict[str, Any] | None:
        info = self.branch_info
        if info is None:
            return None
        parent = info.pop("parent")
        return {**info, "parent": parent.record if parent is not None else self._parent_record}

    @input_checked
    def distribution(
        self,
        step: int,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        *,
        logits: Any = None,
    ) -> Distribution:
        """What the sampling sliders do at ``step``.

        The model's next-token distribution there, then after each logits processor the run applied,
        in transformers' order (penalties, bans, then temperature, top-k, top-p and any other filter
        of the model's generation config; ``d.stages`` names them; see
        :mod:`nbstream.distribution`).

        A value left ``None`` is the run's own (a greedy run's temperature is 0); pass
        ``top_k=0`` or ``top_p=1.0`` to turn a filter off. Computed exactly, with one
        forward pass on the calling thread, which waits its turn in the model's queue.
        Needs a local model.

        Args:
            step: The step (0-based, into ``token_ids``).
            temperature: The temperature to try; ``None`` for the run's.
            top_k: The top-k to try; ``None`` for the run's, 0 for off.
            top_p: The top-p to try; ``None`` for the run's, 1.0 for off.
            logits: ``run.step_logits(step)``, to ask about one step several times with
                one forward pass.

        Returns:
            A :class:`~nbstream.distribution.Distribution`.

        Example:
            >>> d = run.distribution(3, temperature=0.7, top_p=0.9)
            >>> d.kept("top_p"), float(d.probs["top_p"].sum())
            (4, 1.0)
            >>> print(d.describe())
            >>> logits = run.step_logits(3)      # one forward pass, then any number of views
            >>> [run.distribution(3, temperature=t, logits=logits).kept("top_p") for t in (0.5, 2)]
        """
        self._require_logits()
        step = self._check_step(step, len(self.token_ids))
        asked = validate_settings({"temperature": temperature, "top_k": top_k, "top_p": top_p})
        if logits is None:
            logits = self.step_logits(step)
        elif getattr(logits, "ndim", None) != 1:
            raise ValueError(
                f"logits must be run.step_logits({step}): a 1-D tensor over the vocabulary, "
                f"got {type(logits).__name__} of shape {tuple(getattr(logits, 'shape', ()))}"
            )
        return self._distribution_at(step, asked, logits)

    def _require_logits(self) -> None:
        if isinstance(self._backend, ReplayBackend):
            raise ValueError(RECORDING_HAS_NO_LOGITS)
        if not self._backend.supports_step_logits:
            raise ValueError(
                f"{type(self._backend).__name__} does not give the model's logits (a model "
                "server streams text); the distribution needs a local transformers model"
            )

    @input_checked
    def step_logits(self, step: int) -> Any:
        """The model's raw next-token logits at ``step``, recomputed exactly.

        One forward pass of the prompt and the tokens before ``step``, waiting its turn in
        the model's queue as a run does. Give it to :meth:`distribution` (``logits=``) to
        try many settings on one step. Needs a local model.

        Args:
            step: The step (0-based, into ``token_ids``).

        Returns:
            A 1-D float tensor over the vocabulary, on the CPU.
        """
        self._require_logits()
        step = self._check_step(step, len(self.token_ids))
        ids = self.token_ids[:step]
        with self._queue.turn():
            return self._job.step_logits(ids, step)[0].detach().float().cpu()

    def _distribution_at(self, step: int, asked: dict[str, Any], logits: Any) -> Distribution:
        """:meth:`distribution` from ``logits`` already computed for ``step``.

        The widget's sampling panel keeps them, so a slider move needs no forward pass.
        """
        # The job knows what the run applied (the model's processors, as generate() builds
        # them), so the stages are those, in its order.
        self._require_logits()
        return self._job.distribution(step, self.token_ids, asked, logits)

    # -- why this token: the logit lens and attribution (nbstream.lens) -----------------------
    @input_checked
    def lens(self, step: int) -> Lens:
        """What each layer of the model would have said at ``step``: the logit lens.

        One forward pass on the calling thread, beside any run of the model (it never waits for
        the run, nor delays its Stop). See :mod:`nbstream.lens`.

        Args:
            step: The step (0-based, into ``token_ids``); the run may still be going.

        Returns:
            A :class:`~nbstream.lens.Lens`: ``probs``, ``ranks``, ``top(layer, n)``, ``describe()``.

        Raises:
            LensUnavailable: A run on a server, a replayed recording, an unknown model family, or
                a step the run does not have.

        Example:
            >>> lens = run.lens(3)
            >>> lens.probs[-1] == run.trace[3].prob  # the trace's own number
            >>> print(lens.describe())
        """
        trace = self.trace
        record = trace[step] if isinstance(trace, list) and step < len(trace) else None
        return lens_at(self._backend, self._job, self.token_ids, step, self._queue.turn, record)

    @input_checked
    def attribution(self, step: int) -> Attribution:
        """Each earlier token's share of the push toward the token at ``step``.

        Signed gradient · input on the input embeddings (one forward and one backward pass,
        beside any run of the model, as :meth:`lens`). See :mod:`nbstream.lens` for the method
        and its limits.

        Args:
            step: The step (0-based, into ``token_ids``).

        Returns:
            An :class:`~nbstream.lens.Attribution`: ``tokens``, ``shares`` (signed; sizes sum to 1).

        Raises:
            LensUnavailable: As :meth:`lens`.

        Example:
            >>> attr = run.attribution(3)
            >>> print(attr.describe())
        """
        return attribution_at(self._backend, self._job, self.token_ids, step, self._queue.turn)

    @staticmethod
    def _check_step(step: Any, length: int) -> int:
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"step must be an int (an index into run.token_ids), got {step!r:.80}")
        if not 0 <= step < length:
            raise ValueError(
                f"step {step} is not a step of this run: it has {length} token"
                f"{'' if length == 1 else 's'} (steps 0 to {length - 1})"
            )
        return step

    @property
    def metrics(self) -> Metrics:
        """Timings and counts; every key is present from the start, ``None`` until known.

        Timings start when the run gets the model. ``tokens`` counts the run's token ids
        (not chunks); ``tokens_per_s`` is the decode rate after the first token. For a
        branch, ``forced_tokens`` says how many of them were given (its answer so far, read
        as prefill, not generated): ``ttft_s`` is the time to the first token generated
        after them, and ``tokens_per_s`` counts only the generated ones.
        """
        self._pump()
        times = self._buffer.times
        started, ended = self._started, self._ended
        tokens = self._job.count_tokens(self._buffer)
        if self._abandoned and self._finalized:
            # Ended by the budget while a step went on: count what the run kept, not the
            # tokens the model put after its end.
            times = times[: self._decoded]
            if tokens is not None and tokens > self._decoded:
                tokens = self._decoded
        forced_items, forced_tokens, counted = self._forced()
        generated_times = times[forced_items:]
        generated = tokens - counted if tokens is not None else None
        metrics = cast(Metrics, dict.fromkeys(METRIC_KEYS))
        if started is not None:
            metrics["queued_s"] = started - self._created
            now = ended if ended is not None else time.perf_counter()
            metrics["elapsed_s"] = now - started
            if generated_times:
                metrics["ttft_s"] = generated_times[0] - started
            if self._first_chunk_at is not None:
                metrics["first_chunk_s"] = self._first_chunk_at - started
        elif ended is not None:
            metrics["queued_s"] = ended - self._created
        metrics["tokens"] = tokens
        metrics["forced_tokens"] = forced_tokens
        first, last = generated_times[:1], generated_times[-1:]
        if generated and generated >= 2 and len(generated_times) >= 2 and last[0] > first[0]:
            metrics["tokens_per_s"] = (generated - 1) / (last[0] - first[0])
        # Published with the end state, as the rest of the end.
        metrics["finish_reason"] = self._finish_reason if self._status in TERMINAL else None
        thinker = self._thinker
        if thinker is not None and thinker.opened:
            # Still thinking: every token so far is thinking.
            metrics["thinking_tokens"] = (
                self._thinking_tokens if self._thinking_tokens is not None else tokens
            )
            if started is not None and self._first_answer_at is not None:
                metrics["first_answer_s"] = self._first_answer_at - started
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

    # -- decoding on the reader side ---------------------------------------------------------
    def _pump(self, final: bool = False) -> None:
        """Decode whatever the worker has produced since the last call (any thread).

        ``final`` (only the thread that decides the end state passes it): decode the rest
        and close the text; items put after that are ignored (a step that ends after the
        budget's deadline). A decoder that raises never raises into a reader: the run ends
        failed with it.
        """
        if self._finalized:
            return
        with self._decode_lock:
            if self._finalized:
                return
            items = self._buffer.items
            n = len(items)
            if self._decode_error is None:
                try:
                    if n > self._decoded:
                        new = items[self._decoded : n]
                        if self._needs_item_timing():
                            self._feed_one_by_one(new)
                        else:
                            self._append(self._decoder.feed(new))
                    if final:
                        self._finish_text()
                except Exception as exc:
                    logger.debug("decoding failed", exc_info=True)
                    self._decode_error = exc
                    self._control.cancel_event.set()  # stop the model; the run ends failed
            self._decoded = n
            if final:
                self._finalized = True

    def _needs_item_timing(self) -> bool:
        """Whether a time is still to be taken per token.

        The first visible text's, or (a reasoning model's) the end of its thinking and its answer's
        first text.
        """
        if self._first_chunk_at is None:
            return True
        thinker = self._thinker
        return thinker is not None and not thinker.answering and self._first_answer_at is None

    def _feed_one_by_one(self, new: list[Any]) -> None:
        # One item at a time while a time is to be taken, so first_chunk_s (first_answer_s)
        # is the time of the token that completed the first visible text (answer), whoever
        # decodes it and whenever.
        base = self._decoded
        for offset, item in enumerate(new):
            answered = self._first_answer_at is not None
            if self._append(self._decoder.feed([item])) and self._first_chunk_at is None:
                self._first_chunk_at = self._buffer.times[base + offset]
            thinker = self._thinker
            if (
                thinker is not None
                and thinker.opened
                and self._thinking_tokens is None
                and thinker.state in ("gap", "answer")
            ):
                self._thinking_tokens = base + offset + 1  # the close tag's token too
            if not answered and self._first_answer_at is not None:
                self._first_answer_at = self._buffer.times[base + offset]
            if self._stops is not None and self._stops.found is not None:
                self._decoder.feed(new[offset + 1 :])  # no text will follow; keep the ids
                return
            if not self._needs_item_timing():
                self._append(self._decoder.feed(new[offset + 1 :]))
                return

    def _finish_text(self) -> None:
        stops = self._stops
        if stops is not None and stops.found is not None:
            return
        shown = self._append(self._decoder.finish("".join(self._raw)))
        if self._thinker is not None:
            thinking, answer = self._thinker.flush()
            shown = self._think(thinking) or shown
            shown = self._answer(answer) or shown
        if stops is not None and stops.found is None:
            # No token will follow: what was held back can no longer begin a stop string.
            shown = self._release(stops.flush()) or shown
        if shown and self._first_chunk_at is None and self._buffer.times:
            # Text held back to the end (an answer of blanks, which might still have opened
            # a thinking section; the start of a stop string): first seen with the last token.
            self._first_chunk_at = self._buffer.times[-1]

    def _append(self, text: str) -> bool:
        """Add decoded text: its thinking part, then its answer through the stop strings if any.

        True if any became visible.
        """
        if not text:
            return False
        self._raw.append(text)
        if self._thinker is None:
            return self._answer(text)
        thinking, answer = self._thinker.feed(text)
        shown = self._think(thinking)
        return self._answer(answer) or shown

    def _think(self, text: str) -> bool:
        if text:
            self._thinking_chunks.append(text)
            return True
        return False

    def _answer(self, text: str) -> bool:
        """Answer text, through the stop strings if any; True if any became visible."""
        stops = self._stops
        if stops is not None and text:
            text = stops.feed(text)
            if stops.found is not None:
                # Halt the model if the worker has not noticed yet (see _StopStringWatch).
                self._control.stop_found.set()
        return self._release(text)

    def _release(self, text: str) -> bool:
        if text:
            if self._first_answer_at is None and self._thinker is not None:
                # Taken per token while it matters (see _feed_one_by_one); this is a floor.
                self._first_answer_at = self._buffer.times[-1] if self._buffer.times else None
            self._chunks.append(text)
            return True
        return False

    def _text(self) -> str:
        """The chunks so far, joined; each chunk is copied into the join once."""
        text, joined = self._joined
        count = len(self._chunks)  # only ever appended: the first `count` stay as they are
        if count != joined:
            text += "".join(self._chunks[joined:count])
            # Two readers may join at once: either pair is right for its own count.
            self._joined = (text, count)
        return text

    def _raise_for_end(self) -> None:
        if self._status == CANCELLED:
            reason = self._cancel_reason
            why = f" because {reason}" if reason else ""
            raise GenerationCancelled(f"the run was cancelled{why}", self)
        if self._status == FAILED:
            error = self._error
            detail = f"{type(error).__name__}: {error}" if error is not None else "unknown error"
            raise GenerationFailed(f"the run failed: {detail}", self) from error

    # -- reading -----------------------------------------------------------------------------
    def _ready(self, index: int) -> tuple[list[str], int, bool]:
        """For an iterator at chunk ``index``: the chunks ready from there, their items, the end.

        The chunks ready from there, how many items they cover (wait for more than that), and
        whether the run had ended before they were read (then they are the last).
        """
        # Seen before the read: once done is set, the text is final and the state, result
        # and record are published (see _publish_end).
        ended = self._status in TERMINAL
        self._pump()
        # Everything up to `seen` is decoded and its chunks are in the list, whoever decoded
        # them (another reader may have: then the iterator does not sleep on them).
        seen = self._decoded
        return self._chunks[index:], seen, ended

    def __iter__(self) -> Iterator[str]:
        """Yield text chunks: replays from the first chunk, then follows the run live.

        Ends normally after a complete run; raises ``GenerationCancelled`` or
        ``GenerationFailed`` after any other end, once every chunk has been yielded.
        """
        index = 0
        last_wake = 0.0
        try:
            while True:
                chunks, seen, ended = self._ready(index)
                yield from chunks
                index += len(chunks)
                if ended:
                    break
                pause = _MIN_WAKE_INTERVAL_S - (time.perf_counter() - last_wake)
                if pause > 0:
                    time.sleep(pause)
                self._buffer.wait_for_more(seen)
                last_wake = time.perf_counter()
        except KeyboardInterrupt:
            # Ctrl-C (the kernel's interrupt) while following the run: stop it too, as
            # wait() does, rather than leave the model generating for nobody.
            self.stop(INTERRUPTED)
            raise
        self._raise_for_end()

    async def __aiter__(self) -> AsyncIterator[str]:
        """``async for chunk in run``: the same chunks as iteration, without blocking the loop."""
        index = 0
        try:
            while True:
                chunks, seen, ended = self._ready(index)
                for chunk in chunks:
                    yield chunk
                index += len(chunks)
                if ended:
                    break
                await self._buffer.wait_for_more_async(seen)
        except KeyboardInterrupt:
            self.stop(INTERRUPTED)
            raise
        except asyncio.CancelledError:
            # The task following the run was cancelled: nobody reads it any more.
            self.stop("the task following it was cancelled")
            raise
        self._raise_for_end()

    def wait(self, timeout: float | None = None) -> str:
        """Block until the run ends; return the final text if it completed.

        A ``KeyboardInterrupt`` (the kernel's interrupt button) stops the run, then
        propagates.

        Args:
            timeout: At most this many seconds; ``None`` waits as long as it takes.

        Returns:
            The run's text.

        Raises:
            GenerationCancelled: The run was stopped.
            GenerationFailed: The run raised or overran its budget.
            TimeoutError: ``timeout`` expired; the run goes on.
        """
        try:
            finished = self._done.wait(timeout) or self.done
        except KeyboardInterrupt:
            self.stop(INTERRUPTED)
            self._done.wait(_INTERRUPT_GRACE_S)
            raise
        if not finished:
            raise TimeoutError(
                f"the run is still {self._status} after {timeout} s; it goes on "
                "(call stop() to cancel it)"
            )
        self._raise_for_end()
        result = self.result
        assert result is not None
        return result

    async def wait_async(self, timeout: float | None = None) -> str:
        """``await run.wait_async()``: like :meth:`wait`, without blocking the event loop.

        No thread waits on the run's behalf (the worker wakes the loop when the run ends),
        so any number of runs can be awaited at once. A cancelled await stops the run.

        Args:
            timeout: At most this many seconds; ``None`` waits as long as it takes.

        Returns:
            The run's text, or raises as :meth:`wait` does.
        """
        if not self._done.is_set():
            loop = asyncio.get_running_loop()
            ended = asyncio.Event()

            def wake(_run: Generation) -> None:
                # A closed loop raises: then nobody is waiting any more.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(ended.set)

            self.add_done_callback(wake)
            try:
                await asyncio.wait_for(ended.wait(), timeout)
            except asyncio.TimeoutError:
                raise TimeoutError(
                    f"the run is still {self._status} after {timeout} s; it goes on"
                ) from None
            except asyncio.CancelledError:
                self.stop()
                raise
            finally:
                self._remove_done_callback(wake)
        return self.wait(0)

    def stop(self, reason: str | None = None) -> bool:
        """Stop the run cooperatively; generation halts within one decode step.

        Args:
            reason: Why, in words that follow "cancelled because" (e.g. ``"the widget was
                closed"``): it becomes :attr:`cancel_reason`. The first stop's reason stays.

        Returns:
            True if the run was queued or running (it will end ``cancelled``); False if it
            had already ended or was already stopped.
        """
        with self._lock:
            if self._end is not None or self._control.cancel_event.is_set():
                return False
            self._control.cancel_event.set()
            self._stopped_by_user = True
            self._cancel_reason = reason
            queued = self._status == QUEUED
        if queued and self._queue.withdraw(self):
            self._turn.set()  # wake the worker so it ends cancelled without the model
        return True

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the worker thread itself to exit.

        Args:
            timeout: At most this many seconds; ``None`` waits as long as it takes.

        Returns:
            True if the thread has exited.
        """
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def save(self, path: str | os.PathLike[str]) -> pathlib.Path:
        """Write this run's recording: a JSON file that ``nbstream.replay`` plays again.

        Args:
            path: Where to write it (see :mod:`nbstream.recording` for the format).

        Returns:
            The path written.

        Raises:
            RuntimeError: The run has not ended.

        Example:
            >>> run = nbstream.stream(model, tokenizer, "Hi", max_new_tokens=10)
            >>> text = run.wait()
            >>> nbstream.load(run.save("hi.json")).text == text
            True
        """
        return recording.save_run(self.to_recording(), path)

    def to_recording(self) -> recording.Recording:
        """This run's recording, in memory: what :meth:`save` writes (``ChatWidget.save`` too).

        Returns:
            A :class:`~nbstream.recording.Recording`, as ``nbstream.load`` reads it back.

        Raises:
            RuntimeError: The run has not ended.

        Example:
            >>> nbstream.replay(run.to_recording(), speed=None).wait() == run.result
            True
        """
        if not self._done.is_set():
            raise RuntimeError("this run has not ended: wait() for it, or stop() it, before saving")
        # Each kept token decoded on its own turn, as the stream showed it; the decoder's
        # last words (a cut character) go with the last token.
        count = self._decoded
        decoder = self._job.decoder()
        pieces = [decoder.feed([item]) for item in self._buffer.items[:count]]
        rest = decoder.finish("".join(pieces))
        if pieces and rest:
            pieces[-1] += rest
        start = self._started if self._started is not None else self._created
        times = [max(0.0, at - start) for at in self._buffer.times[:count]]
        if isinstance(self._job, ReplayJob):
            # A replay keeps the recorded pace and figures, whatever speed it played at:
            # played through, it is the recording it played; stopped, that recording's start.
            source = self._job.recording
            if self._status == source.status and count == len(source.tokens):
                return source
            times = [token.time_s for token in source.tokens[:count]]
        return recording.from_run(self, pieces=pieces, times=times)

    @property
    def is_replay(self) -> bool:
        """Whether this run replays a recording (``nbstream.replay``), not a live model."""
        return isinstance(self._backend, ReplayBackend)

    # -- display -----------------------------------------------------------------------------
    def __repr__(self) -> str:
        metrics = self.metrics
        text = self.partial_text
        preview = text[:40] + ("…" if len(text) > 40 else "")
        elapsed = metrics["elapsed_s"]
        elapsed_txt = f"{elapsed:.1f}s" if elapsed is not None else "-"
        count = f"tokens={metrics['tokens']}"
        if metrics["tokens"] is None and metrics.get("text_chunks") is not None:
            count = f"chunks={metrics['text_chunks']} (no token count)"
        kind = "Generation replay" if self.is_replay else "Generation"
        return f"<{kind} {self._status} {count} elapsed={elapsed_txt} text={preview!r}>"

    def _repr_markdown_(self) -> str:
        text = self.partial_text
        head = "*replay of a recorded run, not a live model*\n\n" if self.is_replay else ""
        if self._status == COMPLETE:
            return f"{head}{text}"
        state = f"**{self._status}** (partial)\n\n{text}" if text else f"**{self._status}**"
        return f"{head}{state}"


def _thinking_splitter(job: Job, settings: Mapping[str, Any]) -> ThinkingSplitter | None:
    """The splitter for a run's thinking.

    Its tags are the setting's, else the job's, else the usual ``<think>``/``</think>``; it starts
    inside when the prompt opened the thinking.
    """
    tags = settings.get("thinking_tags")
    if tags is None:
        tags = job.thinking_tags or DEFAULT_THINKING_TAGS
    if not tags:
        return None  # thinking_tags=[]: detection off
    open_tag, close_tag = tags
    prompt_text = job.prompt_text or ""
    inside = prompt_text.rstrip().endswith(open_tag)
    return ThinkingSplitter(open_tag, close_tag, inside=inside)


@input_checked
def stream(model: Any, tokenizer: Any, prompt: Any, **settings: Any) -> Generation:
    r"""Start generating ``prompt`` on a background thread and return the run at once.

    Every check happens before the thread starts. ``stop=["\n\n", "END"]`` ends the run
    ``complete`` as soon as the text holds one of them (never shown); ``expect="json"``
    completes it only if its text parses (``run.value``); ``alternatives=k`` captures
    ``run.trace``, each token's probability and its top k candidates (on an
    :class:`~nbstream.Endpoint`, the server's logprobs).

    Args:
        model: A loaded causal LM, or an :class:`~nbstream.Endpoint`.
        tokenizer: The model's tokenizer (``None`` with an Endpoint).
        prompt: A string (for a chat model: one user message, through the chat
            template), or a list of ``{"role": ..., "content": ...}`` messages.
        **settings: ``max_new_tokens``, ``temperature``, ``top_p``, ``top_k``,
            ``repetition_penalty``, ``do_sample``, ``seed``, ``budget_s``, ``stop``,
            ``expect``, ``alternatives``, ``thinking_tags``, ``enable_thinking`` (the
            settings reference); unset ones fall back to the model's generation config.

    Returns:
        The run, a :class:`Generation`.

    Raises:
        ValueError: Bad input, before anything starts (``TypeError`` for a wrong type).

    Example:
        >>> import nbstream
        >>> model, tokenizer = nbstream.load_model()
        >>> run = nbstream.stream(model, tokenizer, "Name two colors.", max_new_tokens=30)
        >>> text = run.wait()
    """
    clean = validate_settings(settings)
    backend = resolve_backend(model, tokenizer)
    if clean.get("alternatives"):
        # Refused here, before prepare, by a backend that cannot capture them (a server of
        # a family that sends no logprobs too): nothing is sent.
        backend.check_alternatives(clean["alternatives"])
    job = backend.prepare(prompt, clean)
    return Generation(backend, job, clean)


def _rerun_branch(run: Generation, branch: Mapping[str, Any], keys: tuple[str, ...]) -> None:
    """A rerun of a branch is that branch again.

    Its record says so (``branch``, with the parent's record), so that a rerun of the rerun starts
    from the same answer so far.
    """
    run._branch = {key: branch.get(key) for key in keys}
    run._parent_record = branch.get("parent")


def _rerun_of_branch(
    backend: Backend, branch: Any, prompt: Any, settings: dict[str, Any]
) -> Generation:
    """A rerun of a branch's record: the same answer so far, then generated on."""
    if isinstance(branch, Mapping) and isinstance(branch.get("prefix_text"), str):
        # A branch on a server: the same answer so far, sent for it to continue again.
        if not backend.is_server:
            raise ValueError("record is of a branch made on a server: rerun it on an Endpoint")
        step = branch.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError("record['branch'] must hold the branch's 'step' (an int >= 0)")
        job = backend.prepare(
            prompt, settings, assistant_prefix=branch["prefix_text"], prefix_steps=step + 1
        )
        run = Generation(backend, job, settings)
        _rerun_branch(run, branch, ("step", "token", "parent_token", "prefix_text"))
        return run
    # A branch of a local model: the same forced prefix again.
    if not isinstance(branch, Mapping) or not isinstance(branch.get("prefix_ids"), list):
        raise ValueError("record['branch'] must hold the branch's 'prefix_ids' (a list)")
    if not backend.supports_branching:
        raise ValueError("record is of a branch, which needs a local transformers model")
    job = backend.prepare(prompt, settings, prefix_ids=branch["prefix_ids"])
    run = Generation(backend, job, settings)
    _rerun_branch(run, branch, ("step", "token", "parent_token"))
    return run


def rerun(record: Mapping[str, Any], model: Any, tokenizer: Any = None) -> Generation:
    """Start the run described by ``record`` again: same prompt, same settings, same seed.

    Returns the new :class:`~nbstream.Generation` at once, as :func:`nbstream.stream` does.
    On the same machine (same model, versions and device) it reproduces the text of a
    greedy run, of a seeded run, and of a sampled run that was given no seed. A model,
    generation config or version different from the record's is logged as a warning (the
    text may differ).

    Args:
        record: A run's ``record`` (or that record after a JSON round trip).
        model: The model to run it on, as for :func:`stream`.
        tokenizer: The model's tokenizer.

    Returns:
        The new run.

    Raises:
        ValueError: ``record`` is not a run's record; nothing starts.

    Example:
        >>> import json, nbstream
        >>> model, tokenizer = nbstream.load_model()
        >>> run = nbstream.stream(model, tokenizer, "Name a color.", temperature=0.9)
        >>> text = run.wait()
        >>> saved = json.dumps(run.record)
        >>> nbstream.rerun(json.loads(saved), model, tokenizer).wait() == text
        True
    """
    prompt, settings = replay_arguments(record)
    backend = resolve_backend(model, tokenizer)
    warn_if_different(record, backend)
    branch = record.get("branch")
    if branch is None:
        run = stream(model, tokenizer, prompt, **settings)
    else:
        run = _rerun_of_branch(backend, branch, prompt, settings)
    # Either count may be unknown: a record from a server that sent no usage has None, and
    # a run on a server has None until the server counts the prompt (after it has started).
    then, now = record["prompt_tokens"], run.prompt_tokens
    if then is not None and now is not None and now != then:
        logger.warning(
            "the prompt is %s tokens now but %s in the record: the tokenizer or its chat "
            "template differs, so the text may differ",
            now,
            then,
        )
    return run


def replay(
    recording_or_path: recording.Recording | str | os.PathLike[str], speed: float | None = 1.0
) -> Generation:
    """Stream a recorded run again, without its model: a run like any other, marked a replay.

    The recorded text pieces arrive at their recorded pace divided by ``speed``; the run
    ends as the recording did (``complete`` with the same ``result``, ``cancelled``, or
    ``failed`` with the recorded failure), unless it is stopped first (``cancelled``).
    Its ``trace`` is the recorded trace; its ``record`` has ``"replay"``.

    Args:
        recording_or_path: A :class:`~nbstream.recording.Recording` (``nbstream.load``), or
            the path of a recording's file.
        speed: How many times faster than recorded (``None``: instant, all at once).

    Returns:
        The replay, a :class:`Generation`.

    Raises:
        ValueError: A file that is not a recording, or a ``speed`` that is not > 0.

    Example:
        >>> run = nbstream.replay("answer.json", speed=2.0)
        >>> for chunk in run:
        ...     print(chunk, end="")
    """
    pace = check_speed(speed)  # before the file is read
    loaded = recording.as_recording(recording_or_path)
    backend = ReplayBackend(loaded, pace)
    job = backend.prepare(loaded.prompt, dict(loaded.settings))
    return Generation(backend, job, job.settings)
