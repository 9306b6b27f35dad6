"""Moving tokens from the generation thread to readers, and turning them into text.

transformers' ``TextIteratorStreamer`` decodes inside ``put``, on the generation thread,
for every token. Here the generation thread only appends the token and a timestamp to a
list (O(1), no decoding, no lock unless a reader is asleep); readers decode incrementally
on their side, all new tokens at once, when they wake up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol


class Decoder(Protocol):
    """Turns the items a backend produces (token ids, text pieces) into text, incrementally."""

    def feed(self, items: list[Any]) -> str:
        """Decode new items; return the text they complete (may be empty)."""

    def finish(self, emitted: str) -> str:
        """All items are in: return whatever text is still held back."""


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
        self.closed = False

    # -- writer side (the generation thread) -------------------------------------------
    def put(self, value: Any) -> None:
        if self._skip_first:
            # transformers hands the prompt ids to the streamer first.
            self._skip_first = False
            return
        self.items.append(value)
        self.times.append(time.perf_counter())
        # Read after the append: a reader that registers as a sleeper before checking for
        # new items either sees this item or is counted here (see wait_for_more).
        if self._sleepers:
            with self._cond:
                self._cond.notify_all()

    def end(self) -> None:
        """transformers calls this when ``generate`` returns; the run's end is signalled by
        :meth:`close`, after the worker has decided the final state."""

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

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
        ids = _to_ids(items)
        self._ids.extend(ids)
        if self._backend is not None:
            pieces = []
            for token_id in ids:
                piece = self._stream.step(self._backend, token_id)
                if piece:
                    pieces.append(piece)
            return "".join(pieces)
        text: str = self._tokenizer.decode(self._ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            # An incomplete character: hold it back until the next token completes it.
            return ""
        new, self._printed = text[self._printed :], len(text)
        return new

    def finish(self, emitted: str) -> str:
        """Return what the full decode has beyond what was emitted.

        One full decode at the end guarantees that the streamed text equals
        ``tokenizer.decode(ids, skip_special_tokens=True)`` even when the run ends on a cut
        character (which the full decode shows as U+FFFD).
        """
        full: str = self._tokenizer.decode(self._ids, skip_special_tokens=True)
        if full.startswith(emitted):
            return full[len(emitted) :]
        return ""

    @property
    def ids(self) -> list[int]:
        return list(self._ids)


def _to_ids(items: list[Any]) -> list[int]:
    """Token ids from what ``generate`` put: one small CPU tensor per step.

    One ``torch.cat`` per batch of items rather than a tensor op per token: each op hands
    the GIL back and forth with the generating thread.
    """
    if not items:
        return []
    if all(isinstance(item, int) for item in items):
        return list(items)
    import torch

    tensors = [torch.as_tensor(item).reshape(-1) for item in items]
    return [int(i) for i in torch.cat(tensors).tolist()]


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


class TextDecoder:
    """For backends that already produce text pieces (a remote server's deltas)."""

    def feed(self, items: list[Any]) -> str:
        return "".join(items)

    def finish(self, emitted: str) -> str:
        return ""
