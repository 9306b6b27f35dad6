"""The HTTP transport of a run on a server: what nbstream reads of a server, and how.

The run's own event loop (its name lookups on threads of their own), a body read a bounded
step at a time and inflated as it comes (an error body, a model list, the event stream), the
reader of a ``text/event-stream``, the watch for stop strings, and the count of requests per
server. It knows nothing of models, widgets or the job that drives it (an import-linter
contract in pyproject.toml says so).
"""

from __future__ import annotations

import asyncio
import codecs
import concurrent.futures
import re
import threading
import urllib.parse
import zlib
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from typing import Any, ParamSpec, TypeVar

from ...streaming import StopFilter, ThinkingSplitter

__all__ = [
    "ACCEPT_ENCODING",
    "ERROR_BODY_LIMIT",
    "EVENT_TEXT_LIMIT",
    "LINE_LIMIT",
    "LISTING_LIMIT",
    "SURROGATE",
    "BodyError",
    "EventStream",
    "EventTooLong",
    "Inflater",
    "StopWatch",
    "Traffic",
    "body_text",
    "headers",
    "join_surrogates",
    "read_bounded",
    "read_events",
    "run_loop",
    "traffic",
    "url_under",
]

#: How much of a malformed event's text goes into a message (shown as a repr).
EVENT_TEXT_LIMIT = 120
#: The most of a body read where the whole is not needed (after decompression): an error
#: response's, a model list's. A server may send any size, and a small compressed body can
#: inflate to gigabytes (a decompression bomb); what is shown of it is a few hundred
#: characters, and the rest goes unread.
ERROR_BODY_LIMIT = 2**20
LISTING_LIMIT = 4 * 2**20
#: The longest line of an event stream, and the most data one event may carry: a chunk of a
#: streamed answer is a few hundred bytes (a few KB with top_logprobs).
LINE_LIMIT = 2**20
#: The most a compressed body is inflated at one time; the run's Stop is looked at between.
_INFLATE_STEP = 64 * 2**10
#: What nbstream asks servers to compress with: what it can inflate a bounded step at a time.
ACCEPT_ENCODING = "gzip, deflate"
#: A UTF-16 surrogate: half of a character beyond U+FFFF, which JSON can escape on its own.
SURROGATE = re.compile("[\ud800-\udfff]")


class Traffic:
    """How many requests this process has started on each server.

    So that a stream that ends early can tell whether another request started while it was
    streaming.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: dict[str, int] = {}

    def begin(self, server: str) -> int:
        """Count a request started on ``server``; its number, for :meth:`since`."""
        with self._lock:
            count = self._started.get(server, 0) + 1
            self._started[server] = count
            return count

    def since(self, server: str, mine: int) -> int:
        """How many requests started on ``server`` after the one numbered ``mine``."""
        with self._lock:
            return self._started.get(server, 0) - mine


traffic = Traffic()


_T = TypeVar("_T")
_P = ParamSpec("_P")


class _Lookups(concurrent.futures.ThreadPoolExecutor):
    """An event loop's executor that runs each call (a name lookup) on a daemon thread of its own.

    The thread is never joined: neither when the loop closes nor when the interpreter exits (which
    joins a pool's threads), where a hung resolver would hold the process.
    """

    def submit(
        self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
    ) -> concurrent.futures.Future[_T]:
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)

        threading.Thread(target=work, name="nbstream-lookup", daemon=True).start()
        return future


def run_loop(main: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(main)``, except that the end does not wait for the loop's threads.

    An event loop hands one thing to a thread: a name lookup (``getaddrinfo``), which
    nothing can interrupt. ``asyncio.run`` waits for it before it returns, which would hold
    a Stop, or a probe past its bound, for as long as a slow resolver takes. Here a lookup
    still going when ``main`` is over is left to end on its own thread, its answer unused.
    """
    loop = asyncio.new_event_loop()
    lookups = _Lookups()
    loop.set_default_executor(lookups)
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            lookups.shutdown(wait=False, cancel_futures=True)
            loop.close()


class BodyError(Exception):
    """A body nbstream will not read further: what is wrong with it, for a message."""


class Inflater:
    """A body's bytes as sent, inflated at most ``_INFLATE_STEP`` bytes at a time.

    ``Content-Encoding`` gzip, deflate or none. A small compressed body that inflates to gigabytes
    never sits in memory whole, and the reader can stop after the part it needs (httpx's own
    decoders inflate each read whole: about 1,000 times the 64 KB read, for a bomb).
    """

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding.strip().lower()
        self._raw_fallback = False
        if self.encoding in ("", "identity"):
            self._inflate: Any = None
        elif self.encoding in ("gzip", "x-gzip"):
            self._inflate = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif self.encoding == "deflate":
            # Zlib-wrapped as the standard says, or raw deflate as some servers send it.
            self._inflate = zlib.decompressobj()
            self._raw_fallback = True
        else:
            raise BodyError(
                f"it is compressed as {encoding!r}, which nbstream did not ask for "
                f"(it asks for {ACCEPT_ENCODING})"
            )

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The inflated bytes of ``data`` (the next bytes of the body), a step at a time."""
        if self._inflate is None:
            for start in range(0, len(data), _INFLATE_STEP):
                yield data[start : start + _INFLATE_STEP]
            return
        pending = data
        while not self._inflate.eof:
            try:
                out = self._inflate.decompress(pending, _INFLATE_STEP)
            except zlib.error as exc:
                if not self._raw_fallback:
                    raise BodyError(f"its {self.encoding} compression is corrupt ({exc})") from exc
                self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)
                self._raw_fallback = False
                continue
            self._raw_fallback = False
            pending = self._inflate.unconsumed_tail
            if out:
                yield out
            # A full step may leave more inside the decompressor, even with no input left.
            if not pending and len(out) < _INFLATE_STEP:
                return


async def read_bounded(response: Any, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of ``response``'s body, inflated; and whether there was more.

    The rest is not read. ``BodyError`` for a body that cannot be inflated.
    """
    inflater = Inflater(response.headers.get("content-encoding", ""))
    kept = bytearray()
    async for raw in response.aiter_raw():
        for piece in inflater.feed(raw):
            room = limit - len(kept)
            kept += piece[:room]
            if len(piece) > room:
                return bytes(kept), True
            await asyncio.sleep(0)  # a bomb's steps: the run's Stop is looked at between
    return bytes(kept), False


async def read_events(response: Any, limit: int) -> AsyncIterator[tuple[str, str]]:
    """The events (type, data) of ``response``'s event stream, read a bounded step at a time.

    ``BodyError`` for a body that cannot be inflated, ``EventTooLong`` past ``limit`` (see
    :class:`EventStream`).
    """
    reader = EventStream(limit)
    inflater = Inflater(response.headers.get("content-encoding", ""))
    async for raw in response.aiter_raw():
        for piece in inflater.feed(raw):
            for event in reader.feed(piece):
                yield event
            await asyncio.sleep(0)  # a bomb's steps: Stop is looked at between


def body_text(body: bytes, response: Any) -> str:
    """``body`` decoded as its response says (UTF-8 when it does not, or names no codec)."""
    charset = response.charset_encoding or "utf-8"
    try:
        return body.decode(charset, "replace")
    except LookupError:
        return body.decode("utf-8", "replace")


#: A line ending of an event stream: CRLF, LF or CR.
_EOL = re.compile("\r\n|\r|\n")


class EventStream:
    """The events of a ``text/event-stream`` body, with a bound on a line and an event's data.

    Read as the WHATWG HTML standard's "Interpreting an event stream" reads them; past the bound,
    ``EventTooLong``.

    Fed the body's bytes in any cuts. httpx-sse (0.4) reads the same grammar, but holds a
    line of any length whole before it is parsed, and dispatches an event for an ``id:``
    line alone, which the standard does not (nothing is dispatched while the data buffer is
    empty). ``id`` and ``retry`` serve reconnecting, which nbstream never does: ignored.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._started = False
        self._after_cr = False  # the last text ended in CR: an LF first in the next pairs it
        self._line: list[str] = []  # the line so far, in pieces (the text's cuts)
        self._line_size = 0
        self._type = ""
        self._data: list[str] = []
        self._data_size = 0

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        """The events (type, data) that ``data`` completes."""
        text = self._utf8.decode(data)
        if not text:
            return []
        if not self._started:
            self._started = True
            text = text.removeprefix("\ufeff")  # one byte order mark may open the stream
        if self._after_cr and text.startswith("\n"):
            text = text[1:]
        self._after_cr = text.endswith("\r")
        *lines, rest = _EOL.split(text)
        events: list[tuple[str, str]] = []
        for line in lines:
            if self._line:
                line = "".join(self._line) + line
                self._line, self._line_size = [], 0
            self._check(len(line), line)
            self._field(line, events)
        if rest:
            self._line.append(rest)
            self._line_size += len(rest)
            self._check(self._line_size, self._line[0])
        return events

    def _check(self, size: int, start: str) -> None:
        if size > self._limit:
            raise EventTooLong(start[:EVENT_TEXT_LIMIT])

    def _field(self, line: str, events: list[tuple[str, str]]) -> None:
        if not line:  # dispatch, if the data buffer holds anything
            if self._data:
                events.append((self._type or "message", "\n".join(self._data)))
            self._type, self._data, self._data_size = "", [], 0
            return
        if line.startswith(":"):
            return  # a comment (a keep-alive)
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
            self._data_size += len(value) + 1
            self._check(self._data_size, self._data[0])
        elif name == "event":
            self._type = value


class EventTooLong(Exception):
    """A line (or an event's data) past ``LINE_LIMIT``; its start, for a message."""


class StopWatch:
    """A run's stop strings, looked for in the answer's part of the streamed text.

    A reasoning model's thinking, kept apart by ``split``, is not looked at.
    """

    def __init__(self, stops: list[str], split: ThinkingSplitter | None) -> None:
        self._filter = StopFilter(stops)
        self._split = split
        # The answer's characters fed to the check, and those it released (shown).
        self._fed = 0
        self._released = 0

    @classmethod
    def started(
        cls, stops: list[str] | None, split: ThinkingSplitter | None, prefix: str | None
    ) -> StopWatch | None:
        """The watch for a run's stop strings (None: it has none), fed a branch's ``prefix``."""
        if not stops:
            return None
        watch = cls(stops, split)
        if prefix:
            # The answer so far starts the text: its thinking (a branch in or after it) goes
            # through the split first, so that the stop check reads the answer part only,
            # and the split knows where the branch's own text is.
            watch.feed(prefix)
        return watch

    def feed(self, text: str) -> bool:
        """Look at the next streamed ``text``; True once a stop string is found."""
        answer = self._split.feed(text)[1] if self._split is not None else text
        self._fed += len(answer)
        self._released += len(self._filter.feed(answer))
        return self._filter.found is not None

    @property
    def unshown(self) -> int:
        """How many of the answer's characters fed are not shown (held back, or cut)."""
        return self._fed - self._released


def join_surrogates(text: str) -> tuple[str, str]:
    """``text`` with its surrogate pairs joined into characters.

    Lone halves are replaced by U+FFFD, and a first half at its end is held back (its pair may open
    the next event).

    A server that cuts text in UTF-16 code units, as JavaScript strings are, can split a
    character beyond U+FFFF (an emoji) between two events as JSON escapes; Python keeps the
    halves apart, and a lone half cannot be encoded as UTF-8 (the notebook, the widget's
    messages and a saved record all need it to be).
    """
    half = ""
    if text and "\ud800" <= text[-1] <= "\udbff":
        text, half = text[:-1], text[-1]
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace"), half


def url_under(base_url: str, path: str) -> str:
    """``path`` under ``base_url``, keeping base_url's query string after it.

    The query string may be an API version, as Azure-style gateways take it.
    """
    parts = urllib.parse.urlsplit(base_url)
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + path))


def headers(accept: str, authorization: Mapping[str, str]) -> dict[str, str]:
    """A request's headers: what it accepts, the compression it can inflate, its credentials."""
    return {"Accept": accept, "Accept-Encoding": ACCEPT_ENCODING, **authorization}
