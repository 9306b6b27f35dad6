"""A run's text on the reader side: its tokens decoded, split from its thinking, cut at a stop.

The worker thread only puts token ids (a server's pieces) into the run's
:class:`~nbstream.streaming.TokenBuffer`; whichever thread reads the run next decodes them
here, so a slow tokenizer never delays the next step. :class:`RunText` keeps the answer's
chunks, a reasoning model's thinking, and the times the first text and the first answer
were seen.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from .backends.base import Job, RunControl
from .settings import DEFAULT_THINKING_TAGS
from .streaming import StopFilter, ThinkingSplitter, TokenBuffer

__all__ = ["RunText", "thinking_splitter"]

logger = logging.getLogger(__name__)


def thinking_splitter(job: Job, settings: Mapping[str, Any]) -> ThinkingSplitter | None:
    """The splitter for a run's thinking.

    Its tags are the setting's, else the job's, else the usual ``<think>``/``</think>``; it starts
    inside when the prompt opened the thinking.

    Args:
        job: The run's prepared job (its prompt text, its model's tags).
        settings: The run's settings (``thinking_tags``).

    Returns:
        The splitter, or ``None`` when detection is off (``thinking_tags=[]``).

    Example:
        >>> splitter = thinking_splitter(job, {"thinking_tags": ["<think>", "</think>"]})
        >>> splitter.open_tag
        '<think>'
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


class RunText:
    """The decoded text of one run, its thinking, and when each first showed.

    Made by :class:`~nbstream.Generation` for its run; any thread may call :meth:`pump`.

    Args:
        job: The run's job (its decoder).
        settings: The run's settings (``stop``, ``thinking_tags``).
        buffer: What the worker puts the run's items into.
        control: The run's control: a stop string found here halts the model through it,
            and a decoder that fails stops the model.

    Example:
        >>> text = RunText(job, settings, buffer, control)
        >>> text.pump()
        >>> text.text()
        'Hello'
    """

    def __init__(
        self, job: Job, settings: Mapping[str, Any], buffer: TokenBuffer, control: RunControl
    ) -> None:
        self._buffer = buffer
        self._control = control
        self._decoder = job.decoder()
        stops = settings.get("stop")
        self._stops = StopFilter(stops) if stops else None
        self._decode_lock = threading.Lock()
        #: How many of the buffer's items have been decoded.
        self.decoded = 0
        # The text is kept as its chunks; joined on demand (see text()): appending to one
        # growing string would copy the whole answer on every chunk.
        self._chunks: list[str] = []
        # (text, how many chunks it joins): one attribute, so readers replace it atomically.
        self._joined: tuple[str, int] = ("", 0)
        #: The text is closed: what the model put after that is ignored.
        self.finalized = False
        #: What the decoder raised (the run then ends failed with it).
        self.decode_error: Exception | None = None
        #: When the first visible text's token arrived (``perf_counter``).
        self.first_chunk_at: float | None = None
        # A reasoning model's thinking, split from the answer on the reader side: its
        # chunks, how many tokens it took, and when the answer's first text came.
        self._thinker = thinking_splitter(job, settings)
        self._thinking_chunks: list[str] = []
        #: How many tokens a reasoning model's thinking took (its close tag's included).
        self.thinking_tokens: int | None = None
        #: When the answer's first text arrived, after a reasoning model's thinking.
        self.first_answer_at: float | None = None
        # What the decoder emitted, before splitting and stop strings (for its finish()).
        self._raw: list[str] = []

    # -- what readers see ----------------------------------------------------------------
    @property
    def stop_found(self) -> bool:
        """Whether the text held one of the run's stop strings (no text follows it)."""
        return self._stops is not None and self._stops.found is not None

    @property
    def thought(self) -> bool:
        """Whether the run opened a thinking section (a reasoning model)."""
        return self._thinker is not None and self._thinker.opened

    def thinking(self) -> str | None:
        """The thinking decoded so far (``None`` for a run that did not think)."""
        if not self.thought:
            return None
        return "".join(self._thinking_chunks)

    @property
    def thinking_tags(self) -> tuple[str, str] | None:
        """The tags looked for around a reasoning model's thinking (``None``: off)."""
        thinker = self._thinker
        return (thinker.open_tag, thinker.close_tag) if thinker is not None else None

    def token_ids(self) -> list[int]:
        """The token ids decoded so far (a local model's decoder keeps them); a new list."""
        ids: list[int] | None = getattr(self._decoder, "ids", None)  # already a copy
        return ids if ids is not None else []

    def text(self) -> str:
        """The chunks so far, joined; each chunk is copied into the join once."""
        text, joined = self._joined
        count = len(self._chunks)  # only ever appended: the first `count` stay as they are
        if count != joined:
            text += "".join(self._chunks[joined:count])
            # Two readers may join at once: either pair is right for its own count.
            self._joined = (text, count)
        return text

    def ready(self, index: int) -> tuple[list[str], int]:
        """The chunks from ``index`` on, and how many items they cover (wait for more)."""
        self.pump()
        # Everything up to `seen` is decoded and its chunks are in the list, whoever decoded
        # them (another reader may have: then the iterator does not sleep on them).
        seen = self.decoded
        return self._chunks[index:], seen

    # -- decoding --------------------------------------------------------------------------
    def pump(self, final: bool = False) -> None:
        """Decode whatever the worker has produced since the last call (any thread).

        ``final`` (only the thread that decides the end state passes it): decode the rest
        and close the text; items put after that are ignored (a step that ends after the
        budget's deadline). A decoder that raises never raises into a reader: the run ends
        failed with it.

        Args:
            final: Close the text after this.
        """
        if self.finalized:
            return
        with self._decode_lock:
            if self.finalized:
                return
            items = self._buffer.items
            n = len(items)
            if self.decode_error is None:
                try:
                    if n > self.decoded:
                        new = items[self.decoded : n]
                        if self._needs_item_timing():
                            self._feed_one_by_one(new)
                        else:
                            self._append(self._decoder.feed(new))
                    if final:
                        self._finish_text()
                except Exception as exc:
                    logger.debug("decoding failed", exc_info=True)
                    self.decode_error = exc
                    self._control.cancel_event.set()  # stop the model; the run ends failed
            self.decoded = n
            if final:
                self.finalized = True

    def _needs_item_timing(self) -> bool:
        """Whether a time is still to be taken per token.

        The first visible text's, or (a reasoning model's) the end of its thinking and its answer's
        first text.
        """
        if self.first_chunk_at is None:
            return True
        thinker = self._thinker
        return thinker is not None and not thinker.answering and self.first_answer_at is None

    def _feed_one_by_one(self, new: list[Any]) -> None:
        # One item at a time while a time is to be taken, so first_chunk_s (first_answer_s)
        # is the time of the token that completed the first visible text (answer), whoever
        # decodes it and whenever.
        base = self.decoded
        for offset, item in enumerate(new):
            answered = self.first_answer_at is not None
            if self._append(self._decoder.feed([item])) and self.first_chunk_at is None:
                self.first_chunk_at = self._buffer.times[base + offset]
            thinker = self._thinker
            if (
                thinker is not None
                and thinker.opened
                and self.thinking_tokens is None
                and thinker.state in ("gap", "answer")
            ):
                self.thinking_tokens = base + offset + 1  # the close tag's token too
            if not answered and self.first_answer_at is not None:
                self.first_answer_at = self._buffer.times[base + offset]
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
        if shown and self.first_chunk_at is None and self._buffer.times:
            # Text held back to the end (an answer of blanks, which might still have opened
            # a thinking section; the start of a stop string): first seen with the last token.
            self.first_chunk_at = self._buffer.times[-1]

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
                # Halt the model if the worker has not noticed yet (see StopStringWatch).
                self._control.stop_found.set()
        return self._release(text)

    def _release(self, text: str) -> bool:
        if text:
            if self.first_answer_at is None and self._thinker is not None:
                # Taken per token while it matters (see _feed_one_by_one); this is a floor.
                self.first_answer_at = self._buffer.times[-1] if self._buffer.times else None
            self._chunks.append(text)
            return True
        return False
