"""One run: the handle a caller holds, made of the parts that do its work.

:class:`Generation` is the run: its states, Stop, budget and metrics, and reading its text
(iteration, ``wait``). It composes small parts, each in its own module:
:mod:`~nbstream.run_lifecycle` (the worker thread and the one end state),
:mod:`~nbstream.run_text` (decoding on the reader side), :mod:`~nbstream.run_steps` (the
trace, a step's logits and distribution, the lens, attribution, attention),
:mod:`~nbstream.run_branches` (branching) and :mod:`~nbstream.run_record` (the record and
the recording). The public methods of the last three live there too, each with its
docstring: ``Generation`` inherits them from :class:`~nbstream.run_steps.StepsView`,
:class:`~nbstream.run_branches.BranchesView` and :class:`~nbstream.run_record.RecordView`.

A run is ``queued`` while another run holds the same model (FIFO, never interleaved),
``running`` once it has the model, then exactly one of ``complete``,
``failed`` or ``cancelled``.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures.thread  # noqa: F401 (its exit hook first: see below)
import contextlib
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

from . import recording
from ._errors import input_checked
from .backends import RunControl, resolve_backend
from .backends.base import Backend, Job
from .backends.replay import ReplayBackend, check_speed
from .model_queue import ModelQueue
from .protocol import Metrics, RunRecord, Status
from .record import replay_arguments, warn_if_different
from .run_branches import BranchesView, BranchOrigin, rerun_branch_job
from .run_lifecycle import (
    CANCELLED,
    COMPLETE,
    FAILED,
    METRIC_KEYS,
    QUEUED,
    RUN_THREAD_PREFIX,
    RUNNING,
    TERMINAL,
    InvalidJSON,
    RunLifecycle,
)
from .run_record import RecordView
from .run_steps import RunSteps, StepsView
from .run_text import RunText
from .settings import validate_settings
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

# A reader woken more often than this only sees one more token each time; waiting a little
# lets a fast model's tokens pile up so they are decoded and handed on together. 20 wakes a
# second at most, a widget's frame rate (widgets/feed.py): on a small CPU each wake takes the
# GIL from the generating thread, and at 50 a second a 1,500-token run of the tiny model
# spent 21 ms of the reader's CPU against 14 at 20. The first text is never held back.
_MIN_WAKE_INTERVAL_S = 0.05
# After a KeyboardInterrupt in wait(), how long to wait for the worker to acknowledge Stop.
_INTERRUPT_GRACE_S = 10.0
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


# Each model's queue (see nbstream.model_queue), by the backend's queue_key().
_queues: weakref.WeakKeyDictionary[Any, ModelQueue] = weakref.WeakKeyDictionary()
_strong_queues: dict[Any, ModelQueue] = {}
_queues_lock = threading.Lock()
# Runs are added by whichever thread starts them and dropped by the garbage collector: a
# WeakSet iterated while another thread adds to it raises, so every use holds the lock.
_live: weakref.WeakSet[Generation] = weakref.WeakSet()
_live_lock = threading.Lock()


def _queue_for(key: Any) -> ModelQueue:
    with _queues_lock:
        try:
            table: Any = _queues
            queue: ModelQueue | None = table.get(key)
        except TypeError:  # not weak-referenceable: keep it for the process
            table = _strong_queues
            queue = table.get(key)
        if queue is None:
            queue = table[key] = ModelQueue()
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


class Generation(StepsView, BranchesView, RecordView):
    """A streamed run, started by :func:`stream`. Never blocks unless you ask it to.

    Made by :func:`stream`, :func:`rerun`, :meth:`branch` and the widgets, not directly.

    Args:
        backend: What produces the tokens (:mod:`nbstream.backends`).
        job: The prepared, checked run (``backend.prepare``).
        settings: The validated settings.
        branch_of: Where a branch left its parent (:meth:`branch` and :func:`rerun` say).

    Example:
        >>> import nbstream
        >>> model, tokenizer = nbstream.load_model()
        >>> run = nbstream.stream(model, tokenizer, "Name two colors.", max_new_tokens=20)
        >>> for chunk in run:
        ...     print(chunk, end="")
        >>> run.status, run.result == run.partial_text
        ('complete', True)
    """

    def __init__(
        self,
        backend: Backend,
        job: Job,
        settings: dict[str, Any],
        *,
        branch_of: BranchOrigin | None = None,
    ) -> None:
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
        self._control = RunControl(settings.get("budget_s"))
        self._buffer = TokenBuffer()
        # The parts (composed, each in its own module): the text on the reader side, the
        # worker and its end state, the looks at the model's steps, where a branch began.
        self._text = RunText(job, self.settings, self._buffer, self._control)
        self._queue = _queue_for(backend.queue_key())
        self._lifecycle = RunLifecycle(
            job, self.settings, self._buffer, self._control, self._text, self._queue
        )
        self._steps = RunSteps(backend, job, self._queue, self._text)
        self._origin = branch_of
        self._record: RunRecord | None = None
        self._thread = self._lifecycle.start(self)
        with _live_lock:
            _live.add(self)

    def add_done_callback(self, callback: Callable[[Generation], Any]) -> None:
        """Call ``callback(run)`` once the run has ended.

        It runs on the worker thread (or the budget's timer thread for a run ended at its
        deadline), or at once if the run has already ended. Its exceptions are logged and
        never change the run's state.

        Args:
            callback: Called with the run.
        """
        if not self._lifecycle.add_done_callback(callback):
            RunLifecycle.run_callbacks(self, [callback])

    # -- state -------------------------------------------------------------------------------

    @property
    def status(self) -> Status:
        """``"queued"``, ``"running"``, ``"complete"``, ``"failed"`` or ``"cancelled"``."""
        return self._lifecycle.status

    @property
    def done(self) -> bool:
        """True once the run has ended (its state is final and its text complete)."""
        # Read from the status, so that the two never disagree (see RunLifecycle.publish_end).
        return self._lifecycle.status in TERMINAL

    def wait_done(self, timeout: float | None = None) -> bool:
        """Block until the run has ended; never raises.

        Unlike :meth:`wait`, it neither returns the text nor raises the run's error: for
        code that only needs to know when the run is over.

        Args:
            timeout: At most this many seconds; ``None`` waits as long as it takes.

        Returns:
            :attr:`done`.
        """
        self._lifecycle.done.wait(timeout)
        return self.done

    @property
    def error(self) -> BaseException | None:
        """The exception that ended a failed run (a ``TimeoutError`` for a budget overrun)."""
        life = self._lifecycle
        return life.error if life.status in TERMINAL else None

    @property
    def cancel_reason(self) -> str | None:
        """Why the run was stopped, as given to :meth:`stop`.

        ``None`` if no reason was given, or the run was not stopped. Also in :attr:`record`
        (``cancel_reason``).
        """
        life = self._lifecycle
        return life.cancel_reason if life.status == CANCELLED else None

    @property
    def value(self) -> Any:
        """The parsed JSON of a complete run with ``expect="json"``; ``None`` otherwise."""
        life = self._lifecycle
        return life.value if life.status == COMPLETE else None

    @property
    def result(self) -> str | None:
        """The final text, only when the run completed; ``None`` otherwise."""
        if self._lifecycle.status != COMPLETE:
            return None  # once it is, the text is final (see RunLifecycle.publish_end)
        self._text.pump()
        return self._text.text()

    @property
    def thinking(self) -> str | None:
        """A reasoning model's thinking (``None`` for a run that did not think).

        While it streams, the thinking so far; after any end, all of it (a cancelled or failed run
        keeps its partial thinking here, never in ``result``). The answer alone is in ``result``,
        ``partial_text`` and the chunks the run yields.
        """
        self._text.pump()
        return self._text.thinking()

    @property
    def thinking_tags(self) -> tuple[str, str] | None:
        """The tags this run looked for around a reasoning model's thinking (None: off)."""
        return self._text.thinking_tags

    @property
    def partial_text(self) -> str:
        """The text decoded so far (all of it once the run has ended)."""
        self._text.pump()
        return self._text.text()

    @property
    def token_ids(self) -> list[int]:
        """The generated token ids so far (local models); a new list on each call."""
        self._text.pump()
        return self._text.token_ids()

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
    def metrics(self) -> Metrics:
        """Timings and counts; every key is present from the start, ``None`` until known.

        Timings start when the run gets the model. ``tokens`` counts the run's token ids
        (not chunks); ``tokens_per_s`` is the decode rate after the first token. For a
        branch, ``forced_tokens`` says how many of them were given (its answer so far, read
        as prefill, not generated): ``ttft_s`` is the time to the first token generated
        after them, and ``tokens_per_s`` counts only the generated ones.
        """
        return self._lifecycle.metrics()

    # -- reading -----------------------------------------------------------------------------
    def _raise_for_end(self) -> None:
        status = self._lifecycle.status
        if status == CANCELLED:
            reason = self._lifecycle.cancel_reason
            why = f" because {reason}" if reason else ""
            raise GenerationCancelled(f"the run was cancelled{why}", self)
        if status == FAILED:
            error = self._lifecycle.error
            detail = f"{type(error).__name__}: {error}" if error is not None else "unknown error"
            raise GenerationFailed(f"the run failed: {detail}", self) from error

    def _ready(self, index: int) -> tuple[list[str], int, bool]:
        """For an iterator at chunk ``index``: the chunks ready from there, their items, the end.

        The chunks ready from there, how many items they cover (wait for more than that), and
        whether the run had ended before they were read (then they are the last).
        """
        # Seen before the read: once done is set, the text is final and the state, result
        # and record are published (see RunLifecycle.publish_end).
        ended = self._lifecycle.status in TERMINAL
        chunks, seen = self._text.ready(index)
        return chunks, seen, ended

    def __iter__(self) -> Iterator[str]:
        """Yield text chunks: replays from the first chunk, then follows the run live.

        Ends normally after a complete run; raises ``GenerationCancelled`` or
        ``GenerationFailed`` after any other end, once every chunk has been yielded.
        """
        index = 0
        last_wake = -math.inf  # the first wait never pauses, whatever the clock's origin
        try:
            while True:
                chunks, seen, ended = self._ready(index)
                yield from chunks
                index += len(chunks)
                if ended:
                    break
                # The pause lets tokens pile up, but the run's end is read at once rather
                # than held back to the end of the pause (as the widget's feed does).
                pause = _MIN_WAKE_INTERVAL_S - (time.perf_counter() - last_wake)
                if pause <= 0 or not self.wait_done(pause):
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
            finished = self._lifecycle.done.wait(timeout) or self.done
        except KeyboardInterrupt:
            self.stop(INTERRUPTED)
            self._lifecycle.done.wait(_INTERRUPT_GRACE_S)
            raise
        if not finished:
            raise TimeoutError(
                f"the run is still {self.status} after {timeout} s; it goes on "
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
        if not self._lifecycle.done.is_set():
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
                    f"the run is still {self.status} after {timeout} s; it goes on"
                ) from None
            except asyncio.CancelledError:
                self.stop()
                raise
            finally:
                self._lifecycle.remove_done_callback(wake)
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
        return self._lifecycle.stop(reason)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the worker thread itself to exit.

        Args:
            timeout: At most this many seconds; ``None`` waits as long as it takes.

        Returns:
            True if the thread has exited.
        """
        self._thread.join(timeout)
        return not self._thread.is_alive()

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
        return f"<{kind} {self.status} {count} elapsed={elapsed_txt} text={preview!r}>"

    def _repr_markdown_(self) -> str:
        text = self.partial_text
        head = "*replay of a recorded run, not a live model*\n\n" if self.is_replay else ""
        status = self.status
        if status == COMPLETE:
            return f"{head}{text}"
        state = f"**{status}** (partial)\n\n{text}" if text else f"**{status}**"
        return f"{head}{state}"


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
    # Likewise steering: a backend that cannot reach its model's layers (a user's own
    # Backend too) refuses it here rather than run unsteered.
    backend.check_steer(clean.get("steer"))
    job = backend.prepare(prompt, clean)
    return Generation(backend, job, clean)


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
        job, origin = rerun_branch_job(backend, branch, prompt, settings)
        run = Generation(backend, job, settings, branch_of=origin)
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
