"""What an ended run leaves: its record (what reproduces it) and its recording (what it showed).

:func:`run_record` builds ``run.record``; :func:`run_recording` builds
``run.to_recording()``, which ``run.save(path)`` writes (see :mod:`nbstream.record` and
:mod:`nbstream.recording` for the two formats).
"""

from __future__ import annotations

from typing import Any

from . import recording
from .backends.base import Backend, Job
from .backends.replay import ReplayJob
from .protocol import RunRecord
from .record import build_record
from .streaming import TokenBuffer

__all__ = ["run_record", "run_recording"]


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
    # Each kept token decoded on its own turn, as the stream showed it; the decoder's
    # last words (a cut character) go with the last token.
    decoder = job.decoder()
    pieces = [decoder.feed([item]) for item in buffer.items[:count]]
    rest = decoder.finish("".join(pieces))
    if pieces and rest:
        pieces[-1] += rest
    times = [max(0.0, at - start) for at in buffer.times[:count]]
    if isinstance(job, ReplayJob):
        # A replay keeps the recorded pace and figures, whatever speed it played at:
        # played through, it is the recording it played; stopped, that recording's start.
        source = job.recording
        if run.status == source.status and count == len(source.tokens):
            return source
        times = [token.time_s for token in source.tokens[:count]]
    return recording.from_run(run, pieces=pieces, times=times)
