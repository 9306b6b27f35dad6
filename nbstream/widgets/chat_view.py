"""A chat's turns as its views and its saved output show them.

The views get the transcript as the ``_messages`` trait, set when a turn starts or ends
(never per frame: the answer being generated streams as deltas); a saved output (text and
markdown, for what cannot run widgets) marks a little more than the public transcript.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..conversation import Turn
from ..generation import TERMINAL, Generation
from .base import error_summary
from .display import chat_fallback_bundle
from .feed import thinking_state

__all__ = ["saved_chat", "saved_transcript", "view_messages"]


def view_messages(turns: Sequence[Turn]) -> list[dict[str, Any]]:
    """The transcript for the views (``ChatWidget._messages``; the widget's lock held)."""
    out: list[dict[str, Any]] = []
    for i, t in enumerate(turns):
        # "Not in the conversation" is for an answer that ended out of it (stopped or
        # failed, not kept); one being generated is not out: it joins if it completes.
        used = not t.left_out
        out.append({"role": "user", "content": t.user, "turn": i, "in_history": used})
        ended = t.ended
        out.append(
            {
                "role": "assistant",
                # An answer being generated reaches the views as deltas, never here.
                "content": t.text if ended else "",
                "turn": i,
                "in_history": used,
                "status": t.status,
                "run_id": t.run_id,
                "kept": t.kept,
                "error": error_summary(t.run.error) if t.run is not None and ended else None,
                # Why the answer ended ("length" on a complete one: cut at max_new_tokens).
                "finish_reason": (
                    t.run.metrics["finish_reason"] if t.run is not None and ended else None
                ),
                # Replayed from a recording (a replayed chat, or a resumed chat's earlier
                # answers): the view marks it, never passing it off as a live model's.
                "replayed": t.run is not None and t.run.is_replay,
            }
        )
        # A reasoning model's thinking, once its answer ended (the live one's streams
        # as `thinking` messages); absent for an answer that did not think.
        thinking = thinking_state(t.run) if t.run is not None and ended else None
        if thinking is not None:
            out[-1]["thinking"] = thinking
    return out


def saved_transcript(transcript: list[dict[str, Any]], turns: Sequence[Turn]) -> None:
    """Mark ``transcript`` (of ``turns``, read together) for the saved output, in place."""
    # The saved output marks an answer cut off at max_new_tokens (not a transcript key:
    # the transcript's shape is public and stays as it is).
    for i, turn in enumerate(turns):
        question, message = transcript[2 * i], transcript[2 * i + 1]
        run = turn.run
        message["finish_reason"] = (
            run.metrics["finish_reason"] if run is not None and run.done else None
        )
        # An answer replayed from a recording (a resumed chat's earlier turns) says so.
        message["recorded"] = run is not None and run.is_replay
        # As in the views: an answer being generated is not "not in the conversation".
        pending = message["status"] not in TERMINAL
        question["in_history"] = message["in_history"] = message["in_history"] or pending


def saved_chat(
    transcript: list[dict[str, Any]], turns: Sequence[Turn], run: Generation | None
) -> tuple[str, dict[str, str]]:
    """The chat's saved output: the state of its newest answer, and its fallbacks.

    Args:
        transcript: The chat's transcript (marked here for the saved output, in place).
        turns: Its turns, read together with it.
        run: The chat's current run (its error is shown once it has ended), or ``None``.

    Returns:
        The newest answer's state ("idle" with no message), and the text/plain and
        text/markdown fallbacks.
    """
    saved_transcript(transcript, turns)  # the saved output's own marks
    status = "idle"
    if transcript:
        status = transcript[-1]["status"]
    error = run.error if run is not None and status in TERMINAL else None
    return status, chat_fallback_bundle(status, transcript, error_summary(error))
