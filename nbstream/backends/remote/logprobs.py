"""``run.trace`` of a run on a server: records made from the ``logprobs`` its chunks carry.

Each record is checked against the streamed text it accounts for; where the server's
logprobs are missing, malformed or do not spell its text, recording stops and the trace
says why (``trace.incomplete``): no number is made up.
"""

from __future__ import annotations

import codecs
import dataclasses
import logging
import math
import re
import threading
from collections.abc import Callable
from typing import Any

from ...trace import RemoteAlternative, RemoteTokenTrace, RemoteTrace
from .. import servers as _servers

__all__ = ["RemoteTraceCapture"]

logger = logging.getLogger(__name__)


class RemoteTraceCapture:
    """``run.trace`` of a run on a server: records from the ``logprobs`` of each chunk.

    Each chunk that brings text is expected to carry ``logprobs.content``: one entry per
    token, ``{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}``. At the
    first chunk of text without them (none sent, or malformed), recording stops and
    ``trace.incomplete`` says why: the records kept are those of the text's start, in order,
    and no number is made up. The run itself goes on: its text does not depend on them.

    Args:
        k (int): The alternatives asked for each token.
        family (ServerFamily): The server's family (what its logprobs mean).
        prefix (list | None): A branch's records of its answer so far, which start the trace.

    Example:
        >>> capture = RemoteTraceCapture(5, servers.FAMILIES["vllm"], None)
        >>> capture.records([])
        []
    """

    def __init__(
        self, k: int, family: _servers.ServerFamily, prefix: list[RemoteTokenTrace] | None
    ) -> None:
        self.k = k
        self.family = family
        self.trace = RemoteTrace(prefix or ())
        self._lock = threading.Lock()
        self._text_chunks = 0
        #: How a reason quotes the server's data (the Endpoint's, which blots out the key).
        self.quote: Callable[[str, int], str] = lambda text, limit: text[:limit]
        #: Where the server's text starts in the answer (a branch's prefix comes first).
        self.base = sum(len(r.shown if r.shown is not None else r.text) for r in self.trace)
        self._own = len(self.trace)  # the records before it are a branch's prefix
        #: The streamed text seen so far (after ``base``), recorded or not.
        self.seen = 0
        # The records' bytes, decoded across records and chunks (a split character).
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        # Records whose text has not yet been matched with the streamed text, their
        # decoded pieces, and that text; how many chunks they span.
        self._pending: list[tuple[RemoteTokenTrace, str]] = []
        self._pending_text = ""
        self._pending_chunks = 0
        #: Recording has stopped (``trace.incomplete`` says why; it may also be a note only).
        self._stopped = False

    def records(self, ids: list[int]) -> RemoteTrace:
        """A snapshot of the records so far.

        Args:
            ids (list[int]): Unused: a server sends no token ids.
        """
        with self._lock:
            snapshot = RemoteTrace(self.trace)
            snapshot.incomplete = self.trace.incomplete
            snapshot.lead = self.trace.lead
            return snapshot

    def record_notes(self, notes: list[str]) -> dict[str, Any]:
        """The run record's ``trace``: how many records, what they mean, whether all came.

        Args:
            notes (list[str]): The record's warnings, added to where the trace is incomplete.
        """
        incomplete = self.trace.incomplete
        if incomplete:
            notes.append(f"run.trace is incomplete: {incomplete}")
        return {
            "records": len(self.trace),
            "meaning": self.family.logprobs_meaning,
            "incomplete": incomplete,
        }

    def add(self, logprobs: Any, content: str, reasoning: bool) -> None:
        """Record one chunk's tokens (worker thread).

        Args:
            logprobs (Any): The chunk's ``logprobs``, as the server sent them.
            content (str): The chunk's answer text.
            reasoning (bool): Whether the chunk carried a reasoning field too.
        """
        self._text_chunks += 1
        self.seen += len(content)
        if self._stopped:
            return
        if reasoning:
            self._stop(
                "a reasoning model's thinking came in a separate field, whose tokens "
                "nbstream does not record"
            )
            return
        where = f"the server's chunk {self._text_chunks} of text ({self.quote(content, 40)!r})"
        if logprobs is None:
            self._stop(
                f"{where} came without logprobs (it was asked for them: "
                f"logprobs true, top_logprobs {self.k}); the server may not send them"
            )
            return
        entries = logprobs.get("content") if isinstance(logprobs, dict) else None
        if isinstance(logprobs, dict) and "token_logprobs" in logprobs:
            entries = _from_completions(logprobs)
        if not isinstance(entries, list) or not entries:
            self._stop(
                f"{where} came with logprobs of an unknown shape "
                f"({self.quote(str(logprobs), 80)!r})"
            )
            return
        try:
            records = [self._record(entry) for entry in entries]
        except ValueError as exc:
            self._stop(f"{where} came with malformed logprobs: {exc}")
            return
        self._match(records, content, where)

    def _match(self, records: list[RemoteTokenTrace], content: str, where: str) -> None:
        """Keep ``records`` once their text spells the streamed text, else stop the trace.

        Their bytes are decoded across records, so a character split over tokens spells once its
        last part is in.
        """
        for record in records:
            self._pending.append((record, self._decoder.decode(record.raw)))
        self._pending_text += content
        self._pending_chunks += 1
        spelled = "".join(piece for _, piece in self._pending)
        text = self._pending_text
        pieces: list[str] | None = None
        if spelled == text:
            pieces = [piece for _, piece in self._pending]
        elif "\ufffd" in spelled and _replaced(spelled).fullmatch(text):
            # vLLM's token text for each part of a split character is U+FFFD (its bytes
            # too); the text carries the character: the last record accounts for it all.
            pieces = [""] * (len(self._pending) - 1) + [text]
        if pieces is not None:
            with self._lock:
                self.trace.extend(
                    dataclasses.replace(record, shown=piece)
                    for (record, _), piece in zip(self._pending, pieces, strict=True)
                )
            self._pending, self._pending_text, self._pending_chunks = [], "", 0
            return
        lagging = spelled.startswith(text) or text.startswith(spelled) or "\ufffd" in spelled
        if not lagging or self._pending_chunks > _MAX_PENDING_CHUNKS:
            self._stop(
                f"{where}: its tokens spell {self.quote(spelled, 40)!r}, not the text "
                f"({self.quote(text, 40)!r}); the server's logprobs do not match its text"
            )

    def finish(self) -> None:
        """The stream is over: tokens whose text never matched the streamed text stop the trace.

        They are not kept.
        """
        if self._pending and not self._stopped:
            self._stop(
                f"the server's last {len(self._pending)} token(s) never spelled its text "
                f"({self.quote(self._pending_text, 40)!r})"
            )

    def cut(self, visible: int) -> None:
        """Keep only the records of the text shown, so that no branch starts past it.

        Args:
            visible (int): Where a stop string ended the answer, in characters after
                ``base``.
        """
        with self._lock:
            self._pending, self._pending_text = [], ""
            end = self.base
            for index in range(self._own, len(self.trace)):
                shown = self.trace[index].shown
                end += len(shown if shown is not None else self.trace[index].text)
                if end > self.base + visible:
                    del self.trace[index:]
                    break

    def _stop(self, why: str) -> None:
        why = self.quote(why, len(why))  # every piece of the key out, whatever quoted it
        with self._lock:
            self.trace.incomplete = why
            self._pending = []
            self._stopped = True
        logger.warning("run.trace stops short of the text: %s", why)

    def _record(self, entry: Any) -> RemoteTokenTrace:
        text, logprob, raw = _logprob_entry(entry, "a token")
        tops = entry.get("top_logprobs")
        if tops is None:
            tops = []
        if not isinstance(tops, list):
            raise ValueError(f"top_logprobs is not a list: {str(tops)[:60]!r}")
        if len(tops) > 4 * self.k + 8:
            # Asked for k: a list far longer is not an answer to that (and would make every
            # record, the widget's messages and a saved record that much larger).
            raise ValueError(f"{len(tops)} top_logprobs for a token, asked for {self.k}")
        alternatives = []
        for top in tops:
            alt_text, alt_logprob, _ = _logprob_entry(top, "an alternative")
            alternatives.append(RemoteAlternative(None, alt_text, alt_logprob))
        alternatives.sort(key=lambda alt: -alt.logprob)
        rank = None
        if any(alt.text == text for alt in alternatives):
            rank = 1 + sum(alt.logprob > logprob for alt in alternatives)
        # The k asked for, and the chosen token where it ranks below them (as the server's
        # own list may have it: llama-server and vLLM add it).
        kept = alternatives[: self.k]
        kept += [alt for alt in alternatives[self.k :] if alt.text == text][:1]
        alternatives = kept
        return RemoteTokenTrace(
            text=text, logprob=logprob, rank=rank, alternatives=tuple(alternatives), bytes=raw
        )


#: How many chunks a token's text may lag behind the streamed text (or ahead of it).
_MAX_PENDING_CHUNKS = 4


def _replaced(spelled: str) -> re.Pattern[str]:
    """``spelled`` as a pattern in which each run of U+FFFD stands for any characters."""
    parts = re.split("\ufffd+", spelled)
    return re.compile("(?:.+?)".join(re.escape(part) for part in parts), re.DOTALL)


def _from_completions(logprobs: dict[str, Any]) -> list[Any] | None:
    """The completions API's logprobs as the chat API's entries; None if they do not line up.

    They come as ``tokens``, ``token_logprobs``, ``top_logprobs`` as ``{text: logprob}``.
    """
    tokens, values, tops = (
        logprobs.get("tokens"),
        logprobs.get("token_logprobs"),
        logprobs.get("top_logprobs"),
    )
    if not isinstance(tokens, list) or not isinstance(values, list) or len(tokens) != len(values):
        return None
    if tops is None:
        tops = [None] * len(tokens)
    if not isinstance(tops, list) or len(tops) != len(tokens):
        return None
    return [
        {
            "token": token,
            "logprob": value,
            "top_logprobs": [
                {"token": text, "logprob": lp}
                for text, lp in (top.items() if isinstance(top, dict) else ())
            ],
        }
        for token, value, top in zip(tokens, values, tops, strict=True)
    ]


#: The most a log-probability may exceed 0 by and still be read as 0 (servers round).
_LOGPROB_SLACK = 1e-4


def _logprob_entry(entry: Any, what: str) -> tuple[str, float, tuple[int, ...] | None]:
    """``(token, logprob, bytes)`` of one logprobs entry.

    ``ValueError`` saying what is wrong with it (nothing is guessed).
    """
    if not isinstance(entry, dict):
        raise ValueError(f"{what} that is not an object: {str(entry)[:60]!r}")
    text = entry.get("token")
    if not isinstance(text, str):
        raise ValueError(f"{what} without a 'token' text: {str(entry)[:60]!r}")
    logprob = entry.get("logprob")
    if (
        isinstance(logprob, bool)
        or not isinstance(logprob, (int, float))
        or not math.isfinite(logprob)
        or logprob > _LOGPROB_SLACK
    ):
        raise ValueError(f"{what} with logprob {logprob!r:.40}, not a log-probability")
    raw = entry.get("bytes")
    if raw is not None:
        if not isinstance(raw, list) or not all(
            isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in raw
        ):
            raise ValueError(f"{what} whose 'bytes' are not a list of bytes")
        raw = tuple(raw)
    return text, min(float(logprob), 0.0), raw
