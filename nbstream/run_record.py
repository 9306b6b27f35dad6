"""What an ended run leaves: its record (what reproduces it) and its recording (what it showed).

:class:`RecordView` is the part of :class:`~nbstream.Generation` that gives them:
``run.record`` (built by :func:`run_record`), ``run.to_recording()`` (built by
:func:`run_recording`), ``run.timeline()`` (only its tokens' pieces and times, built by
:func:`run_timeline`), ``run.save(path)``, which writes it, and ``run.is_replay`` (see
:mod:`nbstream.record` and :mod:`nbstream.recording` for the two formats).
"""

from __future__ import annotations

import copy
import os
import pathlib
from typing import Any

from . import recording
from .backends.base import Backend, Job
from .backends.replay import ReplayBackend, ReplayJob
from .protocol import RunRecord
from .record import build_record
from .run_branches import BranchOrigin
from .run_lifecycle import TERMINAL, RunLifecycle
from .run_text import RunText
from .streaming import TokenBuffer

__all__ = ["RecordView", "run_record", "run_recording", "run_timeline"]


def run_record(
    run: Any, backend: Backend, job: Job, created_at: float, branch: dict[str, Any] | None
) -> RunRecord:
    """The record of ``run``, which has ended.

    Args:
        run: The run (a :class:`~nbstream.Generation`).
        backend: Its backend.
        job: Its job.
        created_at: When it was made (``time.time()``).
        branch: Where it branched (``None`` for a run that is no branch).

    Returns:
        A new, JSON-serializable record.

    Example:
        >>> run_record(run, backend, job, time.time(), None)["status"]
        'complete'
    """
    record = build_record(
        backend=backend,
        job=job,
        status=run.status,
        metrics=run.metrics,
        error=run.error,
        created_at=created_at,
    )
    record["cancel_reason"] = run.cancel_reason
    record["branch"] = branch
    # A reasoning model's thinking, kept apart from the text (None: it did not think).
    record["thinking"] = run.thinking
    return record


def run_timeline(
    job: Job, buffer: TokenBuffer, count: int, start: float
) -> tuple[list[str], list[float]]:
    """Each of an ended run's ``count`` kept tokens: its piece of the stream and when it came.

    The pieces are each token decoded on its own turn, as the stream showed it (the decoder's
    last words, a cut character, go with the last token); the times are seconds after the
    run got the model (a replay's: the recorded ones, whatever speed it played at).

    Args:
        job: The run's job (a fresh decoder; a replay's recording).
        buffer: Its items and their times.
        count: How many items its text kept.
        start: When it got the model (``perf_counter``).

    Returns:
        ``(pieces, times_s)``, one of each per token.

    Example:
        >>> pieces, times = run_timeline(job, buffer, len(buffer.items), started)
        >>> len(pieces) == len(times) == len(run.token_ids)
        True
    """
    decoder = job.decoder()
    items = buffer.items[:count]
    # A backend's own decoder may have only feed and finish: then one feed per item.
    each = getattr(decoder, "pieces", None)
    pieces: list[str] = each(items) if each is not None else [decoder.feed([i]) for i in items]
    rest = decoder.finish("".join(pieces))
    if pieces and rest:
        pieces[-1] += rest
    if isinstance(job, ReplayJob):
        times = [token.time_s for token in job.recording.tokens[:count]]
    else:
        times = [max(0.0, at - start) for at in buffer.times[:count]]
    return pieces, times


def run_recording(
    run: Any, job: Job, buffer: TokenBuffer, count: int, start: float
) -> recording.Recording:
    """The recording of ``run``, which has ended: each of its ``count`` kept tokens, timed.

    Args:
        run: The run (a :class:`~nbstream.Generation`).
        job: Its job (a fresh decoder; a replay's recording).
        buffer: Its items and their times.
        count: How many items its text kept.
        start: When it got the model (``perf_counter``): token times are from there.

    Returns:
        A :class:`~nbstream.recording.Recording`.

    Example:
        >>> run_recording(run, job, buffer, len(buffer.items), started).text == run.result
        True
    """
    if isinstance(job, ReplayJob):
        # A replay keeps the recorded pace and figures, whatever speed it played at:
        # played through, it is the recording it played; stopped, that recording's start.
        source = job.recording
        if run.status == source.status and count == len(source.tokens):
            return source
    pieces, times = run_timeline(job, buffer, count, start)
    return recording.from_run(run, pieces=pieces, times=times)


class RecordView:
    """A run's record and its recording: the part of :class:`~nbstream.Generation` that gives them.

    Both exist once the run has ended. The run holds the state they are made from (its
    backend, job, lifecycle, buffer and text), and keeps the record once it is built.

    Example:
        >>> text = run.wait()
        >>> run.record["status"], nbstream.load(run.save("hi.json")).text == text
        ('complete', True)
    """

    _backend: Backend
    _job: Job
    _lifecycle: RunLifecycle
    _buffer: TokenBuffer
    _text: RunText
    _origin: BranchOrigin | None
    _record: RunRecord | None

    @property
    def record(self) -> RunRecord | None:
        """What reproduces this run, once it has ended (any end state); ``None`` before.

        A JSON-serializable dict: ``model``, ``prompt``, ``prompt_tokens``, ``settings``
        (every setting in effect), ``seed`` (the one sampling used, drawn if none was
        given), ``status``, ``metrics``, ``versions`` and more; see :mod:`nbstream.record`.
        ``cancel_reason`` is :attr:`~nbstream.Generation.cancel_reason` (``None`` unless a
        cancelled run's stop gave one). :func:`nbstream.rerun` starts the same run again
        from it.

        Example::

            >>> run = nbstream.stream(model, tokenizer, "Hi", temperature=0.8)
            >>> text = run.wait()
            >>> nbstream.rerun(run.record, model, tokenizer).wait() == text
            True
        """
        if self._lifecycle.status not in TERMINAL:
            return None
        record = self._record
        if record is None:
            # Built once, on first use, off the generating thread; whole before it is kept,
            # as another reader may copy the kept one at any moment.
            branch = self._origin.record(self._job) if self._origin is not None else None
            record = run_record(self, self._backend, self._job, self._lifecycle.created_at, branch)
            self._record = record
        return copy.deepcopy(record)  # each caller may edit its own copy

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
        if not self._lifecycle.done.is_set():
            raise RuntimeError("this run has not ended: wait() for it, or stop() it, before saving")
        return run_recording(self, self._job, self._buffer, self._text.decoded, self._started_at())

    def timeline(self) -> tuple[list[str], list[float]]:
        """Each kept token's piece of the stream and when it came, as the recording has them.

        The recording's tokens without the rest of it (its record, the trace), for what
        needs only the pace of the text: a widget's replay in a saved notebook.

        Returns:
            ``(pieces, times_s)``: one string and one time (seconds after the run got the
            model) per token; the pieces join to the stream as the model made it (a
            reasoning model's thinking first, a stop string last).

        Raises:
            RuntimeError: The run has not ended.

        Example:
            >>> pieces, times = run.timeline()
            >>> pieces == [token.piece for token in run.to_recording().tokens]
            True
        """
        if not self._lifecycle.done.is_set():
            raise RuntimeError("this run has not ended: wait() for it, or stop() it, first")
        return run_timeline(self._job, self._buffer, self._text.decoded, self._started_at())

    def _started_at(self) -> float:
        life = self._lifecycle
        return life.started if life.started is not None else life.created

    @property
    def is_replay(self) -> bool:
        """Whether this run replays a recording (``nbstream.replay``), not a live model."""
        return isinstance(self._backend, ReplayBackend)
