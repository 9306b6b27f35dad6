"""Moving tokens from the generation thread to readers, and turning them into text.

transformers' ``TextIteratorStreamer`` decodes inside ``put``, on the generation thread,
for every token. Here the generation thread only appends the token and a timestamp to a
list (O(1), no decoding, no lock unless a reader is asleep); readers decode incrementally
on their side, all new tokens at once, when they wake up.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = [
    "DECODE_OPTIONS",
    "Decoder",
    "StopFilter",
    "TextDecoder",
    "ThinkingSplitter",
    "TokenBuffer",
    "TokenDecoder",
]

#: How every piece of nbstream turns generated ids into the answer's text, so that the
#: stream, the final decode and the stop-string watch agree. ``DecodeStream`` never "cleans
#: up" spaces before punctuation; a tokenizer whose default does (``clean_up_tokenization_
#: spaces``) would otherwise give a final text that does not start with what was streamed.
DECODE_OPTIONS: dict[str, bool] = {
    "skip_special_tokens": True,
    "clean_up_tokenization_spaces": False,
}


class Decoder(Protocol):
    """Turns the items a backend produces (token ids, text pieces) into text, incrementally."""

    def feed(self, items: list[Any]) -> str:
        """Decode new items; return the text they complete (may be empty)."""

    def finish(self, emitted: str) -> str:
        """All items are in: return whatever text is still held back."""

    # A decoder may also have ``pieces(items)``: the text each item completes, as one
    # ``feed([item])`` each would give, only faster (a recording's pieces; see run_timeline).


class TokenBuffer:
    """The hand-off between the generation thread (writer) and any number of readers.

    It implements transformers' streamer protocol (``put``/``end``): ``generate`` calls
    ``put`` with the prompt first, then with each new token. ``put`` appends to a list and
    wakes readers only when one is asleep (``_sleepers``), so a fast model with no reader
    waiting never touches a lock.
    """

    def __init__(self, *, skip_first: bool = True) -> None:
        self.items: list[Any] = []
        self.times: list[float] = []
        self._skip_first = skip_first
        self._cond = threading.Condition(threading.Lock())
        self._sleepers = 0
        # Event-loop readers (async for) asleep: woken through their loop, not the condition.
        self._wakers: list[Callable[[], None]] = []
        self.closed = False

    # -- writer side (the generation thread) -------------------------------------------
    def put(self, value: Any) -> None:
        """Add what ``generate`` put, with its time; the first put (the prompt) is skipped."""
        if self._skip_first:
            # transformers hands the prompt ids to the streamer first.
            self._skip_first = False
            return
        # The time first: a reader that sees item i (len(items) > i) may read times[i] at
        # once (the time of the first visible text), so it must already be there.
        self.times.append(time.perf_counter())
        self.items.append(value)
        # Read after the append: a reader that registers as a sleeper before checking for
        # new items either sees this item or is counted here (see wait_for_more).
        if self._sleepers:
            self._wake()

    def end(self) -> None:
        """Transformers calls this when ``generate`` returns.

        The run's end is signalled by :meth:`close`, after the worker has decided the final state.
        """

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        """Mark the buffer closed and wake every reader."""
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    # -- reader side ---------------------------------------------------------------------
    def wait_for_more(self, seen: int, timeout: float | None = None) -> bool:
        """Block until there are more than ``seen`` items or the buffer is closed.

        Returns True if there is something new to read (items or the close).
        """
        if len(self.items) > seen or self.closed:
            return True
        with self._cond:
            self._sleepers += 1
            try:
                return self._cond.wait_for(
                    lambda: len(self.items) > seen or self.closed, timeout=timeout
                )
            finally:
                self._sleepers -= 1

    async def wait_for_more_async(self, seen: int, timeout: float | None = None) -> bool:
        """:meth:`wait_for_more` for an event loop: no thread is held while it waits.

        The writer wakes the loop with ``call_soon_threadsafe``, and only while this reader
        is asleep, so ``put`` stays a list append when nobody waits.
        """
        if len(self.items) > seen or self.closed:
            return True
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def wake() -> None:
            # A closed loop raises: then nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(woken.set)

        with self._cond:
            self._sleepers += 1
            self._wakers.append(wake)
        try:
            # Checked again after registering: an item put in between was either seen here
            # or woke us (put reads _sleepers after appending).
            if len(self.items) > seen or self.closed:
                return True
            try:
                await asyncio.wait_for(woken.wait(), timeout)
            except asyncio.TimeoutError:
                return len(self.items) > seen or self.closed
            return True
        finally:
            with self._cond:
                self._sleepers -= 1
                self._wakers.remove(wake)


class TokenDecoder:
    """Incremental detokenizer for token ids, on the reader's side.

    Uses the ``tokenizers`` library's ``DecodeStream`` (it holds back the bytes of a
    character cut between tokens, so no chunk ever carries half a code point) when the
    tokenizer has a fast backend; otherwise an offset window over ``tokenizer.decode``
    (the approach of transformers' own ``TextStreamer``).
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._backend = backend
        if backend is not None:
            from tokenizers.decoders import DecodeStream

            self._stream = DecodeStream(skip_special_tokens=True)
        self._printed = 0  # offset-window fallback: characters already emitted

    def feed(self, items: list[Any]) -> str:
        """Decode new token ids; return the text they complete (may be empty)."""
        ids = _to_ids(items)
        self._ids.extend(ids)
        if self._backend is not None:
            if not ids:
                return ""
            # All new ids in one call: the same text as one call per id (it holds back a cut
            # character the same way), one crossing into the tokenizer instead of one per token.
            piece: str | None = self._stream.step(self._backend, ids)
            return piece or ""
        text: str = self._tokenizer.decode(self._ids, **DECODE_OPTIONS)
        if text.endswith("\ufffd"):
            # An incomplete character: hold it back until the next token completes it.
            return ""
        new, self._printed = text[self._printed :], len(text)
        return new

    def pieces(self, items: list[Any]) -> list[str]:
        """Decode ids one at a time: the text each completes, as ``feed([item])`` would give.

        A run's recording is made of these. With a fast tokenizer it steps the ``DecodeStream``
        with each id, skipping ``feed``'s per-call conversions (a third of the time).

        Args:
            items: The items, in order (token ids, or the tensors ``generate`` puts).

        Returns:
            One string per item, ``""`` for one that completed no text yet.

        Example:
            >>> ids = tokenizer.encode("Hi there", add_special_tokens=False)
            >>> TokenDecoder(tokenizer).pieces(ids)
            ['Hi', ' there']
        """
        backend = self._backend
        ids = _single_ids(items) if backend is not None else None
        if backend is None or ids is None:  # the offset window, or an item not of one id
            return [self.feed([item]) for item in items]
        self._ids.extend(ids)
        step = self._stream.step
        return [step(backend, token_id) or "" for token_id in ids]

    def finish(self, emitted: str) -> str:
        """Return what the full decode has beyond what was emitted.

        One full decode at the end guarantees that the streamed text equals
        ``tokenizer.decode(ids, **DECODE_OPTIONS)`` even when the run ends on a cut
        character (which the full decode shows as U+FFFD).
        """
        full: str = self._tokenizer.decode(self._ids, **DECODE_OPTIONS)
        if full.startswith(emitted):
            return full[len(emitted) :]
        return ""

    @property
    def ids(self) -> list[int]:
        """A copy of every token id fed so far."""
        return list(self._ids)


def _single_ids(items: list[Any]) -> list[int] | None:
    """The one token id of each item; None if any holds more or fewer (then feed each)."""
    if all(isinstance(item, int) or item.numel() == 1 for item in items):
        return _to_ids(items)
    return None


def _to_ids(items: list[Any]) -> list[int]:
    """Token ids from what ``generate`` put: one small CPU tensor per step.

    ``tolist`` on each: it keeps the GIL, where a tensor op (a reshape, a ``torch.cat``)
    hands it to the generating thread and waits to get it back, every time.
    """
    ids: list[int] = []
    for item in items:
        if isinstance(item, int):
            ids.append(item)
            continue
        value = item.tolist() if item.ndim == 1 else item.reshape(-1).tolist()
        ids.extend(value)
    return ids


class StopFilter:
    """Cuts decoded text at the first stop string, on the reader's side.

    :meth:`feed` returns the text that can be shown now. It holds back only a tail that
    could still be the start of a stop string (at most the longest one's length less one
    character) and releases it as soon as it can no longer match. Each call looks at the
    held tail and the new text only, never at the whole text so far.

    The stop string that ends first wins (ties: the longer one), which is where generation
    halts, so the result does not depend on how the text was split into pieces.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        if not stops or not all(stops):
            raise ValueError("StopFilter needs at least one non-empty stop string")
        self.stops = tuple(stops)
        self._firsts = frozenset(stop[0] for stop in self.stops)
        self._longest = max(len(stop) for stop in self.stops)
        #: Text held back because it could still begin a stop string.
        self.held = ""
        #: The stop string found, once one has been.
        self.found: str | None = None

    def feed(self, text: str) -> str:
        """Take new text; return what can be released now ("" once a stop string is found)."""
        if self.found is not None or not text:
            return ""
        window = self.held + text
        best: tuple[int, int] | None = None  # (end, -length) of the earliest-ending match
        for stop in self.stops:
            start = window.find(stop)
            if start >= 0:
                key = (start + len(stop), -len(stop))
                if best is None or key < best:
                    best, self.found = key, stop
        if best is not None:
            self.held = ""
            return window[: best[0] + best[1]]
        keep = self._hold_from(window)
        self.held = window[keep:]
        return window[:keep]

    def flush(self) -> str:
        """The text is over: release what was held (it can no longer become a stop string)."""
        held, self.held = self.held, ""
        return held

    def _hold_from(self, window: str) -> int:
        # The earliest position whose suffix is a prefix of some stop string: everything
        # before it can never be part of a match, whatever comes next.
        for pos in range(max(0, len(window) - self._longest + 1), len(window)):
            if window[pos] in self._firsts:
                tail = window[pos:]
                if any(stop.startswith(tail) for stop in self.stops):
                    return pos
        return len(window)


class ThinkingSplitter:
    """Splits decoded text into a reasoning model's thinking and its answer.

    On the reader's side, as :class:`StopFilter` cuts stop strings.

    A thinking section is recognised only where an answer starts: ``open_tag`` first (after
    whitespace), or from the start when the prompt already opened it (``inside``: a chat
    template that ends the prompt with ``<think>``). It ends at ``close_tag``; whitespace
    between it and the answer is dropped. Text that could still become a tag is held back
    (at most a tag's length), so no chunk ever shows half a tag. A model that does not think
    costs one check: its first visible character makes the splitter a pass-through.
    """

    def __init__(self, open_tag: str, close_tag: str, *, inside: bool = False) -> None:
        if not open_tag or not close_tag:
            raise ValueError("ThinkingSplitter needs two non-empty tags")
        self.open_tag, self.close_tag = open_tag, close_tag
        #: "start" (undecided), "thinking", "gap" (after the close tag, before the answer's
        #: first visible character) or "answer".
        self.state = "thinking" if inside else "start"
        #: Whether a thinking section was opened (by the prompt or the model).
        self.opened = inside
        self.held = ""

    @property
    def answering(self) -> bool:
        """The answer has started: from here on text passes straight through."""
        return self.state == "answer"

    def feed(self, text: str) -> tuple[str, str]:
        """Take new text; return ``(thinking, answer)``: what can be shown of each now."""
        if self.state == "answer":
            return "", text
        window, self.held = self.held + text, ""
        thinking: list[str] = []
        while window:
            if self.state == "start":
                stripped = window.lstrip()
                if not stripped or (
                    len(stripped) < len(self.open_tag) and self.open_tag.startswith(stripped)
                ):
                    self.held = window  # may still become the tag
                    return "".join(thinking), ""
                if stripped.startswith(self.open_tag):
                    self.state, self.opened = "thinking", True
                    window = stripped[len(self.open_tag) :]
                    continue
                self.state = "answer"
                return "".join(thinking), window
            if self.state == "thinking":
                end = window.find(self.close_tag)
                if end >= 0:
                    thinking.append(window[:end])
                    self.state = "gap"
                    window = window[end + len(self.close_tag) :]
                    continue
                keep = self._hold_from(window)
                thinking.append(window[:keep])
                self.held = window[keep:]
                return "".join(thinking), ""
            # "gap": the blank lines between the thinking and the answer are neither.
            stripped = window.lstrip()
            if not stripped:
                return "".join(thinking), ""
            self.state = "answer"
            return "".join(thinking), stripped
        return "".join(thinking), ""

    def flush(self) -> tuple[str, str]:
        """The text is over: what was held back, as thinking or as answer."""
        held, self.held = self.held, ""
        if self.state == "thinking":
            return held, ""
        if self.state == "start":
            return "", held  # never became a tag: it was the answer (blank or not)
        return "", ""

    def _hold_from(self, window: str) -> int:
        # The earliest position whose suffix could begin the close tag.
        tag = self.close_tag
        for pos in range(max(0, len(window) - len(tag) + 1), len(window)):
            if tag.startswith(window[pos:]):
                return pos
        return len(window)


class TextDecoder:
    """For backends that already produce text pieces (a remote server's deltas)."""

    def feed(self, items: list[Any]) -> str:
        """The text pieces joined: they are text already."""
        return "".join(items)

    def finish(self, emitted: str) -> str:
        """Nothing: no text is held back."""
        return ""

    def pieces(self, items: list[Any]) -> list[str]:
        """Each piece as it came: they are text already."""
        return list(items)
