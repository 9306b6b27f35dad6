"""The remote backend: a model behind an OpenAI-compatible chat-completions server.

vLLM, Text Generation Inference, SGLang, ``transformers serve`` and others speak the same
streaming protocol (``POST {base_url}/chat/completions`` with ``"stream": true``, answered
with server-sent events). :class:`Endpoint` is a backend under the engine's seam, so a run
on a server has the same lifecycle, end states, Stop, budget, metrics and record as a run
on a local model.

The client is ``httpx`` (``pip install 'nbstream[remote]'``), driven by an event loop of
the run's own on the worker thread: a Stop, a spent budget or a stop string cancels the
request at once, even while it waits for the server (or for its name to be looked up), and
closing the connection is what tells the server to stop generating. What a server sends is
read a bounded step at a time (an error body, a line of the event stream, a compressed
body), so a hostile or broken server cannot fill the kernel's memory.
"""

from __future__ import annotations

import asyncio
import codecs
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import html
import json
import logging
import math
import re
import threading
import time
import traceback
import urllib.parse
import zlib
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterator
from typing import Any, ParamSpec, TypeVar

from ...settings import DEFAULT_MAX_NEW_TOKENS, DEFAULT_THINKING_TAGS, samples
from ...streaming import StopFilter, TextDecoder, ThinkingSplitter, TokenBuffer
from ...trace import RemoteAlternative, RemoteTokenTrace, RemoteTrace
from .. import servers as _servers
from ..base import Backend, Job, RunControl
from ..local import check_prompt
from ..servers import EXTENSION_SETTINGS, GENERATION_CONFIG, ServerInfo

__all__ = ["Endpoint", "EndpointError", "RemoteJob"]

logger = logging.getLogger(__name__)

#: How often the run's event loop looks at Stop, the budget and stop strings.
_WATCH_INTERVAL_S = 0.01
#: The longest a first request waits for the server to say what it is (``GET /models``);
#: the answer is kept, so this happens once per server.
_PROBE_TIMEOUT_S = 5.0
#: After a probe that got no answer (the server not up yet, too slow, busy), how long the
#: Endpoint goes on without asking again: long enough that one run's checks ask once, short
#: enough that a server that has come up is seen at the next run.
_PROBE_RETRY_S = 1.0
#: The clock of that back-off (a test moves it).
_clock = time.monotonic
_INSTALL_HINT = "install the remote extra with: pip install 'nbstream[remote]'"
#: How much of a server's error text goes into a message (of a malformed event: less, since
#: it is shown as a repr).
_ERROR_TEXT_LIMIT = 500
_EVENT_TEXT_LIMIT = 120
#: The most of a server's text that is scrubbed for a quote of ``limit`` characters: this
#: many times the limit (blotting out the key shortens the text, never below a half).
_QUOTE_WINDOW = 4
#: The most of a body read where the whole is not needed (after decompression): an error
#: response's, a model list's. A server may send any size, and a small compressed body can
#: inflate to gigabytes (a decompression bomb); what is shown of it is a few hundred
#: characters, and the rest goes unread.
_ERROR_BODY_LIMIT = 2**20
_LISTING_LIMIT = 4 * 2**20
#: The longest line of an event stream, and the most data one event may carry: a chunk of a
#: streamed answer is a few hundred bytes (a few KB with top_logprobs).
_LINE_LIMIT = 2**20
#: The most a compressed body is inflated at one time; the run's Stop is looked at between.
_INFLATE_STEP = 64 * 2**10
#: What nbstream asks servers to compress with: what it can inflate a bounded step at a time.
_ACCEPT_ENCODING = "gzip, deflate"
#: Answers to ``GET /models`` that say the server has no model list (kept, as an answer).
_NO_LISTING = (404, 405, 501)
#: The servers' finish reasons that end a text answer, as the engine names them: OpenAI's,
#: vLLM's, SGLang's, llama.cpp's and transformers serve's ``stop`` and ``length``; Text
#: Generation Inference's ``eos_token`` and ``stop_sequence`` (nbstream sends no stop
#: strings, so a server's stop sequence is one of its own, such as a chat template's end).
_FINISH_REASONS = {"stop": "eos", "eos_token": "eos", "length": "length", "stop_sequence": "stop"}
#: Finish reasons that end without a text answer, with what to say; any other fails the run
#: too, naming the value.
_NOT_AN_ANSWER = {
    "tool_calls": "the model called a tool instead of answering in text (nbstream streams text "
    "answers, and sends no tools)",
    "function_call": "the model called a tool instead of answering in text (nbstream streams "
    "text answers, and sends no tools)",
    "content_filter": "the server's content filter cut the answer",
    "abort": "the server aborted the request (overloaded, restarting, or told to by an "
    "operator; its log says why); try again",
    "error": "the server failed while generating: its log says why",
}
#: After the finish reason, how long to wait for the rest (the usage event, ``[DONE]``, the
#: end of the body). The answer is over: a server that then holds the connection open
#: without a word has not failed it, so the run ends complete and the connection is closed.
_FINISH_GRACE_S = 2.0
#: The shortest run of an API key's characters that is blotted out wherever it appears.
#: A cut (nbstream's own, a server's, a log's) can leave any prefix or suffix of a key, so
#: every piece of 6 or more of its characters goes, in every form it can be written in,
#: and at most 5 characters of a key can survive next to a cut: for the usual key formats
#: (``sk-proj-…``, ``hf_…``, ``gsk_…``) that is the public prefix that only names the kind
#: of key, less than providers show themselves (OpenAI's own errors show the last 4).
#: Shorter runs would blot out ordinary words of messages by chance; 6 random key
#: characters turn up by chance in a 500-character message with odds of about 1 in 5 million.
_SCRUB_RUN = 6
#: ASCII-only lowercasing: keeps the length, so positions in the folded text are positions
#: in the original (``str.lower`` can lengthen non-ASCII text).
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_BLOT = "***"
#: A UTF-16 surrogate: half of a character beyond U+FFFF, which JSON can escape on its own.
_SURROGATE = re.compile("[\ud800-\udfff]")

#: What each server said it is, for the rest of the process: new Endpoint objects on the
#: same server (rerun, a compare's columns) do not ask again. Keyed by base_url and the key's
#: fingerprint: a gateway may list other models for another key, and what is kept is scrubbed
#: of the key that asked.
_known: dict[tuple[str, str | None], ServerInfo] = {}
_known_lock = threading.Lock()


class _OwnQueue:
    """The queue key of one run on a concurrent server: shared with no other run."""

    __slots__ = ("__weakref__",)


class _Traffic:
    """How many requests this process has started on each server.

    So that a stream that ends early can tell whether another request started while it was
    streaming.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: dict[str, int] = {}

    def begin(self, server: str) -> int:
        with self._lock:
            count = self._started.get(server, 0) + 1
            self._started[server] = count
            return count

    def since(self, server: str, mine: int) -> int:
        """How many requests started on ``server`` after the one numbered ``mine``."""
        with self._lock:
            return self._started.get(server, 0) - mine


_traffic = _Traffic()


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


def _run_loop(main: Coroutine[Any, Any, _T]) -> _T:
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


class _BodyError(Exception):
    """A body nbstream will not read further: what is wrong with it, for a message."""


class _Inflater:
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
            raise _BodyError(
                f"it is compressed as {encoding!r}, which nbstream did not ask for "
                f"(it asks for {_ACCEPT_ENCODING})"
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
                    raise _BodyError(f"its {self.encoding} compression is corrupt ({exc})") from exc
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


async def _read_bounded(response: Any, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of ``response``'s body, inflated; and whether there was more.

    The rest is not read. ``_BodyError`` for a body that cannot be inflated.
    """
    inflater = _Inflater(response.headers.get("content-encoding", ""))
    kept = bytearray()
    async for raw in response.aiter_raw():
        for piece in inflater.feed(raw):
            room = limit - len(kept)
            kept += piece[:room]
            if len(piece) > room:
                return bytes(kept), True
            await asyncio.sleep(0)  # a bomb's steps: the run's Stop is looked at between
    return bytes(kept), False


def _body_text(body: bytes, response: Any) -> str:
    """``body`` decoded as its response says (UTF-8 when it does not, or names no codec)."""
    charset = response.charset_encoding or "utf-8"
    try:
        return body.decode(charset, "replace")
    except LookupError:
        return body.decode("utf-8", "replace")


#: A line ending of an event stream: CRLF, LF or CR.
_EOL = re.compile("\r\n|\r|\n")


class _EventStream:
    """The events of a ``text/event-stream`` body, with a bound on a line and an event's data.

    Read as the WHATWG HTML standard's "Interpreting an event stream" reads them; past the bound,
    ``_EventTooLong``.

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
            raise _EventTooLong(start[:_EVENT_TEXT_LIMIT])

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


class _EventTooLong(Exception):
    """A line (or an event's data) past ``_LINE_LIMIT``; its start, for a message."""


class _StopWatch:
    """A run's stop strings, looked for in the answer's part of the streamed text.

    A reasoning model's thinking, kept apart by ``split``, is not looked at.
    """

    def __init__(self, stops: list[str], split: ThinkingSplitter | None) -> None:
        self._filter = StopFilter(stops)
        self._split = split
        # The answer's characters fed to the check, and those it released (shown).
        self._fed = 0
        self._released = 0

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


class EndpointError(RuntimeError):
    """A request to a server failed: the run's ``error``, with the server's words scrubbed.

    Args:
        message (str): What failed, and what to check.
        status (int | None): The HTTP status code, if there was one. Defaults to None.

    Example:
        >>> run = nbstream.stream(server, None, "Hi")
        >>> run.wait_done()
        >>> isinstance(run.error, nbstream.EndpointError) and run.error.status
        401
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class _Secret:
    """Holds the API key so that no ``repr``, ``vars`` dump or log line can show it.

    It also blots the key out of text (:meth:`scrub`).
    """

    __slots__ = ("_runs", "_short", "_value")

    def __init__(self, value: str) -> None:
        self._value = value
        # Every way the key can be written into text: as it is, escaped by Python's repr
        # (str or bytes, either quote) or JSON (the solidus escaped too, as some servers do),
        # percent-encoded (query string or form), HTML-escaped.
        escaped = value.replace("\\", "\\\\")
        forms = {
            value,
            escaped,
            escaped.replace("'", "\\'"),
            escaped.replace('"', '\\"'),
            escaped.replace('"', '\\"').replace("/", "\\/"),
            urllib.parse.quote(value, safe=""),
            urllib.parse.quote(value),
            urllib.parse.quote_plus(value, safe=""),
            html.escape(value),
        }
        folded = {form.translate(_ASCII_LOWER) for form in forms}
        self._runs = frozenset(
            form[i : i + _SCRUB_RUN] for form in folded for i in range(len(form) - _SCRUB_RUN + 1)
        )
        # A key shorter than a run is blotted out whole, where it stands on its own (not
        # inside a longer word: a 3-character key would otherwise blot out half a message).
        self._short = (
            re.compile(
                r"(?<![A-Za-z0-9])(?:"
                + "|".join(re.escape(form) for form in sorted(forms, key=len, reverse=True))
                + r")(?![A-Za-z0-9])",
                re.IGNORECASE,
            )
            if len(value) < _SCRUB_RUN
            else None
        )

    def reveal(self) -> str:
        return self._value

    def fingerprint(self) -> str:
        """A digest that tells keys apart without holding them (cache keys)."""
        return hashlib.sha256(self._value.encode("utf-8", "surrogatepass")).hexdigest()

    def scrub(self, text: str) -> str:
        """``text`` without any piece of the key (see ``_SCRUB_RUN``), each blotted out."""
        if self._short is not None:
            return self._short.sub(_BLOT, text)
        # Again until nothing changes: with a key that holds the blot's own characters, a
        # blot and its neighbours could make a new piece. Each pass shortens the text.
        while True:
            scrubbed = self._blot(text)
            if scrubbed == text:
                return text
            text = scrubbed

    def _blot(self, text: str) -> str:
        folded = text.translate(_ASCII_LOWER)
        spans: list[list[int]] = []
        for i in range(len(folded) - _SCRUB_RUN + 1):
            if folded[i : i + _SCRUB_RUN] in self._runs:
                if spans and spans[-1][1] >= i:
                    spans[-1][1] = i + _SCRUB_RUN
                else:
                    spans.append([i, i + _SCRUB_RUN])
        if not spans:
            return text
        parts, at = [], 0
        for start, end in spans:
            parts += [text[at:start], _BLOT]
            at = end
        parts.append(text[at:])
        return "".join(parts)

    def __repr__(self) -> str:
        return "'***'"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("an Endpoint's API key is not pickled; create the Endpoint again")


def _require_client() -> None:
    try:
        import httpx  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"nbstream.Endpoint needs httpx, which is not installed; {_INSTALL_HINT}"
        ) from exc


class Endpoint(Backend):
    """A model served by an OpenAI-compatible server, usable wherever a model is.

    A run on an Endpoint streams ``POST {base_url}/chat/completions`` and has a local run's
    lifecycle, end states, Stop, budget, metrics and record. The first run asks the server
    what it is (``GET {base_url}/models``) and follows its family's ways, listed with their
    sources in ``nbstream/backends/servers.py`` (``FAMILIES``). Needs httpx:
    ``pip install 'nbstream[remote]'``.

    Args:
        base_url (str): The server's API root, ending in ``/v1``
            (``"http://127.0.0.1:8000/v1"``). A query string is kept after each path; a
            redirect fails the run, naming where it pointed.
        model (str): The model name the server knows (``GET {base_url}/models`` lists them).
        api_key (str | None): Sent as a bearer token and never shown: every piece of 6 or
            more of its characters is blotted out (``***``) of reprs, records, errors and
            logs. Whitespace around it is dropped. Defaults to None (no key).
        timeout (float): Seconds allowed to connect and for each read. Defaults to 60.
            The ``budget_s`` setting bounds a whole run.
        server (str | None): The server's family, one of ``FAMILIES``: ``"vllm"``,
            ``"sglang"``, ``"tgi"``, ``"llama.cpp"``, ``"llama-cpp-python"``,
            ``"transformers"`` or ``"generic"``. Defaults to None (asked of the server).
        concurrent (bool | None): True sends runs at once; False runs one at a time, the
            others ``queued``. Defaults to None (the family's way).
        tokenizer (Any): The model's transformers tokenizer, used to branch where the
            server's chat API cannot continue an answer and to count a prompt's tokens in
            messages. Defaults to None.

    Raises:
        ValueError: An argument nbstream cannot use (the message says what to pass).
        TypeError: An argument of the wrong type.
        ImportError: httpx is not installed.

    Example:
        >>> import nbstream
        >>> server = nbstream.Endpoint("http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-7B-Instruct")
        >>> run = nbstream.stream(server, None, "Name two colors.", max_new_tokens=30)
        >>> run.wait()
        >>> nbstream.StreamWidget(server)      # the widget, on the same server
    """

    #: ``alternatives=k`` asks for the server's logprobs (refused where the family sends
    #: none: :meth:`check_alternatives`).
    supports_alternatives = True
    #: Streams text; branches by sending the answer so far back (:meth:`branch_job`).
    is_server = True

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        *,
        server: str | None = None,
        concurrent: bool | None = None,
        tokenizer: Any = None,
    ) -> None:
        if not isinstance(base_url, str):
            raise TypeError(f"base_url must be a str, got {type(base_url).__name__}")
        parsed = urllib.parse.urlsplit(base_url.strip())
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(
                f"base_url must be an http:// or https:// URL such as "
                f"'http://127.0.0.1:8000/v1', got {_safe_url(base_url)!r}"
            )
        if not isinstance(model, str) or not model.strip():
            raise ValueError(
                "model must name the model the server serves (GET "
                f"{_safe_url(base_url.strip().rstrip('/'))}/models lists them), got {model!r}"
            )
        if api_key is not None:
            api_key = _checked_key(api_key)
        if (
            not isinstance(timeout, (int, float))
            or isinstance(timeout, bool)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        named = None if server is None else _servers.family(server)
        if concurrent is not None and not isinstance(concurrent, bool):
            raise TypeError(
                f"concurrent must be True, False or None (the server's way), got {concurrent!r}"
            )
        if tokenizer is not None:
            _check_tokenizer(tokenizer)
        _require_client()
        self.base_url = base_url.strip().rstrip("/")
        self.model = model
        self.timeout = float(timeout)
        self.tokenizer = tokenizer
        self._api_key = _Secret(api_key) if api_key else None
        self._concurrent = concurrent
        self._info: ServerInfo | None = (
            None if named is None else ServerInfo(named, "named", f"server={server!r}")
        )
        self._info_lock = threading.Lock()
        # What a probe that got no answer left (used until _retry_at, then asked again).
        self._unanswered: ServerInfo | None = None
        self._retry_at = 0.0

    def __repr__(self) -> str:
        key = ", api_key='***'" if self._api_key is not None else ""
        return (
            f"Endpoint({_safe_url(self.base_url)!r}, {self.model!r}{key}, timeout={self.timeout:g})"
        )

    # -- what the server is ----------------------------------------------------------------
    @property
    def family(self) -> str:
        """The server's family, as named by ``server=`` or asked of the server (once).

        Example:
            >>> nbstream.Endpoint("http://127.0.0.1:8000/v1", "m", server="vllm").family
            'vllm'
        """
        return self._server_info().family.name

    @property
    def concurrent(self) -> bool:
        """Whether runs on this endpoint are sent at once (True) or one at a time (False).

        Example:
            >>> nbstream.Endpoint("http://127.0.0.1:8000/v1", "m", server="vllm").concurrent
            True
        """
        if self._concurrent is not None:
            return self._concurrent
        return self._server_info().family.concurrent

    # -- the Backend interface --------------------------------------------------------------
    def queue_key(self) -> Any:
        """The queue a run waits in: its own when runs go at once, else the server's."""
        if self.concurrent:
            # A key of the run's own: the server schedules concurrent requests. Weakly
            # referenced by the engine's queue table, which lets it go with the run (a plain
            # object() cannot be, and would be kept for the life of the process).
            return _OwnQueue()
        # One queue per server, whichever Endpoint object reaches it (rerun, a compare's
        # columns and a widget may each make their own): the server is what cannot share.
        return ("nbstream.Endpoint", self.base_url)

    def describe(self) -> dict[str, Any]:
        """What a run's record says about the model (:func:`nbstream.record.model_info`).

        Returns:
            The model's name and the server's URL (no credentials or query string); the
            keys a local model fills (``path``, ``dtype``, ...) are None.
        """
        return {
            "name": self.model,
            "path": None,
            "class": type(self).__name__,
            "revision": None,
            "sha256": None,
            "dtype": None,
            "device": None,
            "tokenizer": None,
            "base_url": _safe_url(self.base_url),
        }

    def prepare(
        self,
        prompt: Any,
        settings: dict[str, Any],
        *,
        prefix_ids: list[int] | None = None,
        assistant_prefix: str | None = None,
        prefix_steps: int = 0,
        prefix_trace: list[RemoteTokenTrace] | None = None,
    ) -> RemoteJob:
        """Check a run's prompt and settings and build its request, sending nothing yet.

        The first run on a server asks it what it is, unless ``server=`` named it.

        Args:
            prompt: A string, or a list of chat messages (``role``, ``content``).
            settings: The run's settings (``max_new_tokens``, ``temperature``, ...).
            prefix_ids: Refused: a server's answer has no token ids to branch from.
            assistant_prefix: A branch's answer so far (see :meth:`branch_job`), for the
                server to continue. Defaults to None: a new answer.
            prefix_steps: The prefix's length in tokens, counted toward
                ``max_new_tokens``. Defaults to 0.
            prefix_trace: The prefix's ``run.trace`` records. Defaults to None: not known.

        Returns:
            The :class:`RemoteJob` that sends the request and streams the answer.

        Raises:
            ValueError: A setting or a branch the server cannot honour, or settings that
                contradict each other.

        Example:
            >>> server.prepare("Name two colors.", {"max_new_tokens": 30}).body["max_tokens"]
            30
        """
        if prefix_ids is not None:
            raise ValueError(
                "a server's answer has no token ids: branch with run.branch (which sends "
                "the answer so far as text), not prefix_ids"
            )
        check_prompt(prompt)
        effective = dict(settings)
        effective.setdefault("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        k = effective.get("alternatives") or 0
        if k:
            self.check_alternatives(k)
        if assistant_prefix is not None:
            self._check_continuation()
        sampling = _sampling(effective)
        return self._job(prompt, effective, sampling, assistant_prefix, prefix_steps, prefix_trace)

    def _job(
        self,
        prompt: Any,
        settings: dict[str, Any],
        sampling: tuple[float | None, bool | None],
        prefix: str | None,
        prefix_steps: int,
        prefix_trace: list[RemoteTokenTrace] | None,
    ) -> RemoteJob:
        """The job of a checked run: its request in the server's dialect, and what its record says.

        ``sampling``: its temperature and do_sample.
        """
        temperature, do_sample = sampling
        info = self._server_info()
        messages = _chat_messages(prompt)
        k = settings.get("alternatives") or 0
        body = _chat_body(self.model, messages, settings["max_new_tokens"], k)
        rendered = None
        if prefix is not None:
            # The forced tokens count toward max_new_tokens, as for a local branch.
            left = settings["max_new_tokens"] - prefix_steps
            rendered = self._ask_to_continue(body, prefix, left, info.family)
        unconfirmed = _sampling_fields(body, settings, info.family, temperature, do_sample)
        job = RemoteJob(self, body, settings, messages)
        if rendered is not None:
            _use_completions(job, *rendered)
        self._note_unconfirmed(job, info, unconfirmed)
        job.prompt = prompt
        job.server = info
        job.concurrent = self.concurrent
        if k:
            job.trace_capture = RemoteTraceCapture(k, info.family, prefix_trace)
            # The reasons it gives quote the server's data, which may echo the key.
            job.trace_capture.quote = self._quote
        if prefix is not None:
            _continue_prefix(job, prefix, prefix_steps, prefix_trace is not None)
        job.in_effect = _in_effect(settings, temperature, do_sample, unconfirmed)
        return job

    def _ask_to_continue(
        self, body: dict[str, Any], prefix: str, left: int, family: _servers.ServerFamily
    ) -> tuple[str, bool] | None:
        """Ask in ``body`` for ``prefix`` (a final assistant message) to be continued.

        Asked as ``family`` does it, with at least one token and at most ``left``.

        Returns:
            Where the completions API continues a raw prompt: that prompt, and whether the
            chat template would have rendered the prefix otherwise (see :meth:`_render`).
            Else None.
        """
        messages = body["messages"]
        messages.append({"role": "assistant", "content": prefix})
        body["max_tokens"] = max(1, left)
        if family.continuation == "continue_final_message":
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        elif family.continuation == "completions":
            # The chat API would close the answer: the text itself is continued.
            rendered, rewritten = self._render(messages)
            del body["messages"]
            body["prompt"] = rendered
            if "top_logprobs" in body:
                body["logprobs"] = body.pop("top_logprobs")  # the completions API's form
            return rendered, rewritten
        return None

    def _note_unconfirmed(
        self, job: RemoteJob, info: ServerInfo, unconfirmed: dict[str, Any]
    ) -> None:
        """Keep the settings sent that the server may drop, and warn of what it may not honour.

        The kept ones are ``unconfirmed``. The warning (``job.warnings`` and the log) names those
        settings, and a model name the server does not list.
        """
        job.settings_unconfirmed = unconfirmed
        if unconfirmed:
            sent = ", ".join(f"{name}={value!r}" for name, value in unconfirmed.items())
            _warn(
                job,
                f"{sent} sent under vLLM's field names to a server nbstream could not identify "
                f"({info.evidence}): it may have dropped them, so the record lists them as "
                "unconfirmed; name the server with Endpoint(server=...)",
            )
        # The list was scrubbed of the key: a name sharing a piece with the key is compared
        # as scrubbed the same way.
        if info.models and self._scrub(self.model) not in info.models:
            # A server with one model may answer any name with it (llama-cpp-python does, and
            # echoes the name asked for in every chunk): its own list is what says so.
            warning = (
                f"the server does not list the model asked for ({self.model!r}); it lists "
                f"{', '.join(map(repr, info.models[:5]))}: a server with one model may answer "
                "any name with it, so the text is likely that model's"
            )
            _warn(job, self._scrub(warning))

    # -- what the server's answers can carry (run.trace, run.branch) ------------------------
    def check_alternatives(self, k: int) -> None:
        """Refuse ``alternatives=k`` on a server known to send no logprobs; nothing is sent.

        Args:
            k (int): The number of alternatives asked for each token.

        Raises:
            ValueError: The server's family sends no logprobs in its chat API.

        Example:
            >>> nbstream.Endpoint(url, "m", server="transformers").check_alternatives(5)
            Traceback (most recent call last):
            ValueError: alternatives=5: transformers serve sends no token probabilities ...
        """
        family = self._server_info().family
        if family.logprobs is False:
            raise ValueError(
                f"alternatives={k}: {family.title} sends no token probabilities in its chat "
                f"API ({family.logprobs_meaning}); drop alternatives, or use a server that "
                "sends them (vLLM, SGLang, llama-server, llama-cpp-python, OpenAI)"
            )

    @property
    def can_continue(self) -> bool:
        """Whether the server's family can continue a given answer (``run.branch``)."""
        return self._server_info(ask_again=False).family.continuation is not None

    def why_no_branch(self) -> str | None:
        """Why ``run.branch`` is refused on this server.

        Returns:
            The reason, naming what would work, or None when branching works.

        Example:
            >>> print(nbstream.Endpoint(url, "m", server="vllm").why_no_branch())
            None
        """
        # Asked by a view under its lock: never a new request when a run already asked.
        family = self._server_info(ask_again=False).family
        if family.continuation == "completions" and self.tokenizer is None:
            return (
                f"{family.title} needs the model's tokenizer to continue a given answer: "
                f"{family.continuation_note}. Pass it as Endpoint(..., tokenizer=...) (e.g. "
                "AutoTokenizer.from_pretrained of the model the GGUF was made from)"
            )
        if family.continuation is not None:
            return None
        return (
            f"{family.title} cannot be asked to continue a given answer "
            f"({family.continuation_note}): branching needs a local transformers model, or a "
            "server that continues a final assistant message: vLLM or SGLang "
            "(continue_final_message) or llama.cpp's llama-server (prefill), or "
            "llama-cpp-python given Endpoint(..., tokenizer=...)"
        )

    def _render(self, messages: list[dict[str, Any]]) -> tuple[str, bool]:
        """The raw prompt that continues the final assistant message, and whether it is rewritten.

        The prompt is the conversation before that message through the tokenizer's chat template
        with the start of an answer (``add_generation_prompt``), then the answer so far verbatim.
        The flag says whether the template's own rendering of it (``continue_final_message``)
        differs, which a template that trims the message (Llama 3's ``| trim``) or adds to it
        (Qwen3's empty ``<think></think>``) does.
        """
        try:
            head = self.tokenizer.apply_chat_template(
                messages[:-1], tokenize=False, add_generation_prompt=True
            )
        except Exception as exc:
            raise ValueError(
                "the Endpoint's tokenizer could not render the conversation with the answer "
                f"so far ({type(exc).__name__}: {exc}); it needs the model's chat template"
            ) from exc
        if not isinstance(head, str):
            raise ValueError("the Endpoint's tokenizer rendered the conversation as no text")
        text = head + messages[-1]["content"]
        try:
            own = self.tokenizer.apply_chat_template(
                messages, tokenize=False, continue_final_message=True
            )
        except Exception:  # the template cannot continue a message at all
            own = None
        return text, own != text

    def _check_continuation(self) -> None:
        why = self.why_no_branch()
        if why is not None:
            raise ValueError(why)

    def branch_job(
        self, parent: Any, step: int, token: Any, settings: dict[str, Any]
    ) -> tuple[RemoteJob, dict[str, Any]]:
        """Build the job of ``parent.branch(step, token, **settings)`` on this server.

        The request is the parent's conversation with the answer so far (the texts of
        ``parent.trace[:step]`` and ``token``'s) as a final assistant message, for the
        server to continue. Nothing is sent yet.

        Args:
            parent: The run to branch from, started on a server with ``alternatives=k``.
            step: A position in ``parent.trace``.
            token: One of ``parent.trace[step].alternatives``, or a text.
            settings: The branch's settings.

        Returns:
            The job, and the branch's ``branch_info`` (``step``, ``token``,
            ``parent_token``, ``prefix_text``; see :meth:`nbstream.Generation.branch`).

        Raises:
            TypeError: ``step`` is not an int, or ``token`` neither an alternative nor a text.
            ValueError: The server cannot continue an answer, or ``parent`` has no such step
                or token.

        Example:
            >>> job, info = server.branch_job(run, 2, " green", {"max_new_tokens": 30})
            >>> info["token"]
            ' green'
        """
        self._check_continuation()
        trace = _branch_trace(parent.trace, step)
        at = trace[step]
        chosen = _chosen_token(at, step, token)
        records = [*trace[:step], _forced(at, chosen)]
        # The parent's streamed text, as its records account for it: never the server's
        # bytes or token texts, which may not spell what was shown (U+FFFD for a split
        # character in vLLM's, anything at all in a hostile server's).
        prefix = "".join(
            record.shown if record.shown is not None else record.text for record in records
        )
        job = self.prepare(
            parent.prompt,
            settings,
            assistant_prefix=prefix,
            prefix_steps=step + 1,
            prefix_trace=records,
        )
        info = {
            "step": step,
            "token": chosen.text,
            "parent_token": at.text,
            "prefix_text": prefix,
        }
        return job, info

    # -- private -------------------------------------------------------------------------------
    @property
    def _known_key(self) -> tuple[str, str | None]:
        return (self.base_url, None if self._api_key is None else self._api_key.fingerprint())

    def _server_info(self, *, ask_again: bool = True) -> ServerInfo:
        """What the server is: named, known from an earlier answer, or asked now.

        Only an answer is kept. A server that gave none (not listening yet, too slow, busy)
        is taken as ``generic`` for a short back-off (``_PROBE_RETRY_S``: the checks of one
        run ask once), then asked again: one that has come up is seen at the next run.
        ``ask_again=False``: what the last probe said, answer or not (a probe only if none
        was made).
        """
        with self._info_lock:
            if self._info is not None:
                return self._info
            with _known_lock:
                known = _known.get(self._known_key)
            if known is not None:
                self._info = known
                return known
            if self._unanswered is not None and (not ask_again or _clock() < self._retry_at):
                return self._unanswered
            info, answered = self._ask_server()
            if answered:
                with _known_lock:
                    _known[self._known_key] = info
                self._info, self._unanswered = info, None
            else:
                self._unanswered, self._retry_at = info, _clock() + _PROBE_RETRY_S
            return info

    def _ask_server(self) -> tuple[ServerInfo, bool]:
        """``GET {base_url}/models``, read for the server's family, and whether the server answered.

        Never raises (a server that cannot say is ``generic``, and the run itself then says what is
        wrong). Takes at most ``_PROBE_TIMEOUT_S``, name lookup included.
        """
        url = self._url("/models")
        bound = min(self.timeout, _PROBE_TIMEOUT_S)
        outcome: list[Any] = []

        def ask() -> None:
            try:
                outcome.append(_run_loop(asyncio.wait_for(self._get_listing(url, bound), bound)))
            except BaseException as exc:  # handed to the caller, which says what failed
                outcome.append(exc)

        # On a thread of its own: the caller may be running an event loop (a notebook's),
        # and a name lookup that hangs past the bound is left there, not waited for.
        thread = threading.Thread(target=ask, name="nbstream-probe", daemon=True)
        thread.start()
        thread.join(bound + 1.0)
        result = outcome[0] if outcome else asyncio.TimeoutError()
        listing: Any = None
        if isinstance(result, (asyncio.TimeoutError, TimeoutError)):
            why, answered = f"GET /models did not answer within {bound:g} s", False
        elif isinstance(result, BaseException):
            why, answered = f"GET /models failed ({type(result).__name__})", False
        else:
            status, body = result
            why = f"GET /models answered HTTP {status}"
            # No list (404...) is an answer to keep; a refusal (a wrong key, a busy or
            # failing server, a redirect) may not be the next time.
            answered = status == 200 or status in _NO_LISTING
            if status == 200:
                try:
                    listing = json.loads(body)
                except ValueError:
                    why = "GET /models answered with no JSON model list"
        if listing is None:
            logger.debug("%s: %s; treated as a generic server", _safe_url(url), why)
            return ServerInfo(_servers.GENERIC, "unknown", why), answered
        family, evidence = _servers.detect(listing)
        how = "unknown" if family is _servers.GENERIC else "detected"
        # What the server wrote is kept and quoted (record, warnings, log): a server may echo
        # the key it was sent, so it is scrubbed before it is kept anywhere.
        evidence = self._scrub(evidence)
        models = tuple(self._scrub(model) for model in _servers.listed_models(listing))
        logger.debug("%s: %s (%s)", _safe_url(url), family.name, evidence)
        info = ServerInfo(family, how, evidence, models, _servers.stated_context(listing))
        return info, True

    async def _get_listing(self, url: str, timeout: float) -> tuple[int, bytes]:
        """The status and (bounded) body of ``GET url``."""
        import httpx

        headers = self._headers("application/json")
        async with (
            httpx.AsyncClient(timeout=timeout) as client,
            client.stream("GET", url, headers=headers) as response,
        ):
            if response.status_code != 200:
                return response.status_code, b""
            try:
                body, cut = await _read_bounded(response, _LISTING_LIMIT)
            except _BodyError:
                return 200, b""
            return 200, b"" if cut else body

    def _url(self, path: str) -> str:
        """``path`` under base_url, keeping base_url's query string after it.

        The query string may be an API version, as Azure-style gateways take it.
        """
        parts = urllib.parse.urlsplit(self.base_url)
        return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + path))

    def _headers(self, accept: str = "text/event-stream") -> dict[str, str]:
        headers = {"Accept": accept, "Accept-Encoding": _ACCEPT_ENCODING}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.reveal()}"
        return headers

    def _scrub(self, text: str) -> str:
        """``text`` with every piece of the API key blotted out.

        A server may echo what it was sent, an HTTP library may quote the header it refused.
        """
        return text if self._api_key is None else self._api_key.scrub(text)

    def _quote(self, text: str, limit: int) -> str:
        """At most ``limit`` characters of a server's ``text`` for a message, scrubbed first.

        Scrubbed first, so that the cut cannot leave a piece of the key too short for the scrub to
        see.

        Only the start is scrubbed (``_QUOTE_WINDOW`` times the limit: a body or an event
        may be a megabyte, and the scrub is Python). A key the window's end cuts may leave
        a piece too short to be recognized at the end of what was scrubbed: that end is
        dropped, as far as such a piece can reach.
        """
        window = _QUOTE_WINDOW * limit + _SCRUB_RUN
        if len(text) <= window:
            shown = self._scrub(text)
            cut = len(shown) > limit
        else:
            shown = self._scrub(text[:window])[: -(_SCRUB_RUN - 1)]
            cut = True
        return shown[:limit] + "…" if cut else shown

    def _shown_error(self, error: Exception) -> Exception:
        """``error`` as a run may keep and show it.

        Itself if nothing in it, its chain, its notes or its traceback quotes the key; else an
        :class:`EndpointError` with its words scrubbed and its chain left out (an exception's text
        cannot be rewritten in place).

        Every error of a run on an endpoint passes through here on its way out of the job:
        ``run.error``, the record, the traceback, the widget and the log all get what this
        returns.
        """
        if self._api_key is None:
            return error
        full = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        if self._scrub(full) == full:
            return error
        if isinstance(error, EndpointError):
            words, status = str(error), error.status
        else:
            words, status = f"the request failed: {type(error).__name__}: {error}", None
        notes = getattr(error, "__notes__", None)
        if isinstance(notes, list):
            words += "".join(f"; {note}" for note in notes)
        message = (
            self._scrub(words) + " (the original exception is not kept: it quoted the API key)"
        )
        return EndpointError(message, status)


# -- building a request (Endpoint.prepare) ---------------------------------------------------
def _chat_messages(prompt: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A checked prompt as the chat API's messages."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


def _sampling(settings: dict[str, Any]) -> tuple[float | None, bool | None]:
    """The temperature and ``do_sample`` a request says (None: the server's default).

    ``ValueError`` for settings that contradict each other.
    """
    temperature = settings.get("temperature")
    do_sample = settings.get("do_sample")
    samples(settings)  # the one check of contradicting settings, as for a local model
    if do_sample is False:
        temperature = 0.0
    if temperature is not None:
        do_sample = temperature > 0
    return temperature, do_sample


def _chat_body(
    model: str, messages: list[dict[str, Any]], max_tokens: int, k: int
) -> dict[str, Any]:
    """A streamed chat-completions request for ``model``, with its usage at the end.

    For ``k`` alternatives, it asks for the top ``k`` logprobs of each token.
    """
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": max_tokens,
    }
    if k:
        body["logprobs"] = True
        body["top_logprobs"] = k
    return body


def _sampling_fields(
    body: dict[str, Any],
    settings: dict[str, Any],
    family: _servers.ServerFamily,
    temperature: float | None,
    do_sample: bool | None,
) -> dict[str, Any]:
    """Put the sampling settings into ``body``, each under the field ``family`` takes it in.

    Returns:
        The settings sent that the server may drop without a word (``family`` not
        confirmed), for the record's ``settings_unconfirmed``.

    Raises:
        ValueError: A setting ``family`` has no field for.
    """
    if temperature is not None:
        body["temperature"] = temperature
    for name in ("top_p", "seed"):
        if name in settings:
            body[name] = settings[name]
    in_config: dict[str, Any] = {}
    unconfirmed: dict[str, Any] = {}
    for name in EXTENSION_SETTINGS:
        value = settings.get(name)
        if value is None:
            continue
        field = family.fields.get(name)
        if field is None:
            raise ValueError(
                f"{name}={value!r}: {family.title} has no {name} in its chat API (it would "
                f"drop it without a word); drop {name}, or name the server with "
                "Endpoint(server=...) if it is not that one"
            )
        if field == GENERATION_CONFIG:
            in_config[name] = value
        else:
            body[field] = value
        if not family.confirmed:
            unconfirmed[name] = value
    thinking = settings.get("enable_thinking")
    if thinking is not None:
        if not family.chat_template_kwargs:
            raise ValueError(
                f"enable_thinking: {family.title} takes no chat-template options in its "
                "API (vLLM, SGLang and llama-server take them as chat_template_kwargs); "
                "drop enable_thinking, or name the server with Endpoint(server=...)"
            )
        body["chat_template_kwargs"] = {"enable_thinking": thinking}
    if GENERATION_CONFIG in family.fields.values() and (in_config or do_sample):
        # transformers serve samples only when its GenerationConfig says so.
        if do_sample is not None:
            in_config["do_sample"] = do_sample
        body[GENERATION_CONFIG] = json.dumps(in_config)
    return unconfirmed


def _warn(job: RemoteJob, warning: str) -> None:
    """Add ``warning`` to the run's record and log it."""
    job.warnings.append(warning)
    logger.warning("%s", warning)


def _use_completions(job: RemoteJob, rendered: str, rewritten: bool) -> None:
    """Send ``job`` to the completions API with the prompt ``rendered`` by nbstream.

    ``rewritten``: the chat template would have rendered the answer so far otherwise.
    """
    job.path = "/completions"
    job.prompt_text = rendered
    if rewritten:
        job.prefix_as_rendered = False
        _warn(
            job,
            "the tokenizer's chat template renders the answer so far otherwise than it was "
            "shown (it trims it, or adds to it): nbstream sent it as shown, after the "
            "template's start of an answer, so the model sees a prompt its template would not "
            "make; the record says confirmed: False",
        )


def _continue_prefix(job: RemoteJob, prefix: str, steps: int, records_known: bool) -> None:
    """Make ``job`` a branch's, continuing ``prefix`` (``steps`` tokens).

    Without ``records_known`` its trace says that the prefix has no records.
    """
    job.assistant_prefix = prefix
    capture = job.trace_capture
    if capture is not None:
        capture.base = len(prefix)
    job.prefix_steps = steps
    if not records_known and capture is not None:
        # A note, not a stop: the tokens after the prefix are recorded.
        capture.trace.incomplete = (
            f"the branch's first {steps} tokens (its forced prefix) have no records: it was "
            "started again from its record, which keeps the prefix's text only; the records "
            "start after it"
        )
        capture.trace.lead = prefix


def _in_effect(
    settings: dict[str, Any],
    temperature: float | None,
    do_sample: bool | None,
    unconfirmed: dict[str, Any],
) -> dict[str, Any]:
    """The settings a run's record lists as in effect."""
    in_effect = {
        "max_new_tokens": settings["max_new_tokens"],
        "do_sample": do_sample,  # None: the server's default
        "temperature": temperature,
        "top_p": settings.get("top_p"),
        # A setting the server may have dropped is not recorded as in effect.
        "top_k": None if "top_k" in unconfirmed else settings.get("top_k"),
        "repetition_penalty": (
            None if "repetition_penalty" in unconfirmed else settings.get("repetition_penalty")
        ),
        "seed": settings.get("seed"),
        "stop": settings.get("stop"),
        "expect": settings.get("expect"),
        "budget_s": settings.get("budget_s"),
    }
    if settings.get("alternatives"):
        in_effect["alternatives"] = settings["alternatives"]
    return in_effect


# -- branching (Endpoint.branch_job) ---------------------------------------------------------
def _branch_trace(trace: Any, step: int) -> RemoteTrace:
    """``trace`` (a run's), checked as one to branch from at ``step``."""
    if not isinstance(trace, RemoteTrace):
        raise ValueError(
            "branching on a server starts from the run's trace, which this run has not: "
            "start it with alternatives=k (e.g. 5), then branch from one of "
            "run.trace[step].alternatives"
        )
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"step must be an int (a position in run.trace), got {step!r:.80}")
    if trace.lead:
        raise ValueError(
            "this run's trace starts after its answer so far (a rerun of a branch has no "
            "records for the prefix it was given), so its steps are not the answer's: "
            "branch from the original run, or from the branch it reran"
        )
    if not 0 <= step < len(trace):
        why = f"; {trace.incomplete}" if trace.incomplete else ""
        raise ValueError(
            f"step {step} is not in run.trace, which has {len(trace)} records "
            f"(0 to {len(trace) - 1}){why}"
        )
    return trace


def _chosen_token(at: RemoteTokenTrace, step: int, token: Any) -> RemoteAlternative:
    """The alternative ``token`` names at trace record ``at`` (number ``step``).

    One of its alternatives, or a text (one the server did not list has no probability).
    """
    if isinstance(token, RemoteAlternative):
        chosen = next((alt for alt in at.alternatives if alt == token), None)
    elif isinstance(token, str):
        chosen = next((alt for alt in at.alternatives if alt.text == token), None)
        if chosen is None:
            # A text the server did not list: forced all the same, with no probability.
            chosen = RemoteAlternative(None, token, math.nan)
    else:
        raise TypeError(
            "a run on a server has no token ids: token must be one of "
            f"run.trace[{step}].alternatives or a text, got {token!r:.80}"
        )
    if chosen is None:
        raise ValueError(
            f"token {token!r:.80} is not one of run.trace[{step}].alternatives; pass one "
            "of them, or a text"
        )
    if not chosen.text:
        raise ValueError("token's text is empty: there is nothing to continue from")
    return chosen


def _forced(at: RemoteTokenTrace, chosen: RemoteAlternative) -> RemoteTokenTrace:
    """The trace record of ``chosen``, forced in place of the token at record ``at``."""
    rank = None
    if not math.isnan(chosen.logprob):
        rank = 1 + sum(alt.logprob > chosen.logprob for alt in at.alternatives)
    return RemoteTokenTrace(
        text=chosen.text,
        logprob=chosen.logprob,
        rank=rank,
        alternatives=at.alternatives,
        forced=True,
        shown=chosen.text,
    )


class RemoteJob(Job):
    """One prepared request to a server; :meth:`run` streams its answer on the worker thread.

    Built by :meth:`Endpoint.prepare`, which fills in what the record says (``server``,
    ``in_effect``, ``warnings``, ``trace_capture``, a branch's ``assistant_prefix``).

    Args:
        endpoint (Endpoint): The server.
        body (dict): The request's JSON body.
        settings (dict): The run's settings.
        messages (list | None): The conversation sent. Defaults to None: the body's.

    Example:
        >>> job = server.prepare("Name two colors.", {"max_new_tokens": 30})
        >>> job.path, job.body["stream"]
        ('/chat/completions', True)
    """

    def __init__(
        self,
        endpoint: Endpoint,
        body: dict[str, Any],
        settings: dict[str, Any],
        messages: list[dict[str, Any]] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.body = body
        self.settings = settings
        #: The conversation (a branch's ends with the answer so far).
        self.messages: list[dict[str, Any]] = (
            messages if messages is not None else list(body.get("messages", []))
        )
        #: Where the request goes, under base_url: the chat API, or (a branch on
        #: llama-cpp-python) the completions API with the conversation rendered as text.
        self.path = "/chat/completions"
        # The server applies its own chat template: the exact prompt text is not known here;
        # the prompt's token count comes from the server's usage, when it sends one.
        self.prompt_text: str | None = None
        #: False when the chat template would have rendered the answer so far otherwise.
        self.prefix_as_rendered = True
        self.prompt_tokens: int | None = None
        self.prompt: Any = None
        self.in_effect: dict[str, Any] = dict(settings)
        self.seed: int | None = settings.get("seed")
        #: What the server is (set by Endpoint.prepare) and whether runs go at once.
        self.server = ServerInfo(_servers.GENERIC, "unknown")
        self.concurrent = True
        #: Settings sent to a server that may have dropped them (not in ``in_effect``).
        self.settings_unconfirmed: dict[str, Any] = {}
        self.chunks = 0
        self.text_chunks = 0
        self.completion_tokens: int | None = None
        self.server_finish_reason: str | None = None
        # The model names the server's chunks carried, in order of first appearance.
        self.answered_by: list[str] = []
        self.warnings: list[str] = []
        self._usage_seen = False
        self._request_number = 0
        # The server's finish reason once its chunk is in (``server_finish_reason`` once the
        # stream has ended with it).
        self._finish: str | None = None
        # A reasoning parser's separate field (vLLM, SGLang, DeepSeek-style servers) goes
        # into the text between the run's thinking tags, so that the reader side keeps it
        # apart as it does a local model's: None (none yet), "open", then "closed".
        tags = settings.get("thinking_tags")
        self.thinking_tags: tuple[str, str] = (tags[0], tags[1]) if tags else DEFAULT_THINKING_TAGS
        self._reasoning: str | None = None
        # Stop strings apply to the answer only: the watch is fed the answer's part.
        self._answer_split = ThinkingSplitter(*self.thinking_tags) if tags != [] else None
        #: ``alternatives=k``: the records of ``run.trace``, from the server's logprobs.
        self.trace_capture: RemoteTraceCapture | None = None
        #: A branch: the answer so far, sent for the server to continue, and its length in
        #: tokens (the parent's trace records).
        self.assistant_prefix: str | None = None
        self.prefix_steps = 0

    def decoder(self) -> TextDecoder:
        """A decoder of text pieces: a server sends text, not token ids."""
        return TextDecoder()

    def count_tokens(self, buffer: TokenBuffer) -> int | None:
        """The server's count of the answer's tokens (its usage), None until it sends one.

        Args:
            buffer (TokenBuffer): The run's buffer (unused: text pieces are not tokens).
        """
        return self.completion_tokens

    def extra_metrics(self) -> dict[str, Any]:
        """The metrics only a server run has.

        Returns:
            ``chunks`` (events received), ``text_chunks`` (those that carried text) and
            ``tokens_note`` (why ``tokens`` is None, or None).
        """
        return {
            "chunks": self.chunks,
            "text_chunks": self.text_chunks,
            "tokens_note": self._tokens_note(),
        }

    def _tokens_note(self) -> str | None:
        """Why ``tokens`` is None, in words a metrics line can show (None when it is not)."""
        if self.completion_tokens is not None:
            return None
        if self.server_finish_reason is None:
            return (
                "no token count: a server sends its count (usage) only after the end of the "
                f"answer, which has not come; {self.text_chunks} chunks of text (chunks are "
                "not tokens)"
            )
        if self._usage_seen:
            return "the server's usage gave no completion_tokens"
        return (
            "the server sent no token count (it ignores stream_options.include_usage); "
            f"{self.text_chunks} chunks of text (chunks are not tokens)"
        )

    def record_notes(self) -> dict[str, Any]:
        """What the record of a run on a server adds (:func:`nbstream.record.build_record`).

        Returns:
            ``model.answered_by``, ``server`` (family, how it was known, concurrency,
            reproducibility, context), ``settings_unconfirmed``, ``warnings`` and, where
            they apply, ``trace`` and ``continuation``.
        """
        family = self.server.family
        reproducible = family.reproducible
        notes = list(self.warnings)
        if reproducible is False:
            notes.append(
                f"the same request may not give this text again on {family.title}: "
                f"{family.reproducible_why}"
            )
        return {
            "model": {"answered_by": self.answered_by[0] if self.answered_by else None},
            "server": {
                "family": family.name,
                "title": family.title,
                "how": self.server.how,
                "evidence": self.server.evidence,
                "concurrent": self.concurrent,
                "reproducible": reproducible,
                "context": self.server.context,
            },
            "settings_unconfirmed": dict(self.settings_unconfirmed),
            "warnings": notes,
            **self._trace_notes(notes),
        }

    def _trace_notes(self, notes: list[str]) -> dict[str, Any]:
        """The record's ``trace`` (what the logprobs mean, whether all came) and ``continuation``.

        ``continuation``, for a branch: what was sent for the server to continue.
        """
        extra: dict[str, Any] = {}
        family = self.server.family
        capture = self.trace_capture
        if capture is not None:
            incomplete = capture.trace.incomplete
            extra["trace"] = {
                "records": len(capture.trace),
                "meaning": family.logprobs_meaning,
                "incomplete": incomplete,
            }
            if incomplete:
                notes.append(f"run.trace is incomplete: {incomplete}")
        if self.assistant_prefix is not None:
            # Honoured as far as the server's request schema says (continue_final_message),
            # or by construction (a raw prompt that ends with the prefix); llama-server may
            # have been started with prefill off, which the answer cannot show.
            confirmed = (
                family.continuation in ("continue_final_message", "completions")
                and self.prefix_as_rendered
            )
            # The server renders continue_final_message with its own chat template, which
            # nbstream cannot see: one that trims the message drops trailing whitespace, and
            # thinking tags in the answer so far may be rewritten (Qwen3's template).
            prefix = self.assistant_prefix
            doubt = family.continuation == "continue_final_message" and (
                prefix != prefix.rstrip() or any(tag in prefix for tag in self.thinking_tags)
            )
            if doubt:
                confirmed = False
                notes.append(
                    "the answer so far ends in whitespace or holds thinking tags, which the "
                    "server's chat template may trim or rewrite (nbstream cannot see its "
                    "rendering): not confirmed that the model continued it as shown"
                )
            extra["continuation"] = {
                "how": family.continuation,
                "prefix_text": self.assistant_prefix,
                "prefix_steps": self.prefix_steps,
                "confirmed": confirmed,
                # The raw prompt sent (completions): nbstream's rendering, with the
                # Endpoint's tokenizer's chat template, not the server's.
                "prompt_text": self.prompt_text,
            }
            if family.continuation == "completions":
                notes.append(
                    "the conversation was rendered by nbstream with the Endpoint's tokenizer's "
                    "chat template and continued on /v1/completions; the server's own chat "
                    "template may differ"
                )
            if not confirmed:
                notes.append(
                    "the answer so far was sent for the server to continue, not confirmed: "
                    + family.continuation_note
                )
        return extra

    def run(self, buffer: TokenBuffer, control: RunControl) -> str:
        """Send the request and stream the answer into ``buffer`` (the worker thread).

        Args:
            buffer (TokenBuffer): Where the prompt, then the text, is put.
            control (RunControl): Stop, the budget and stop strings, looked at throughout.

        Returns:
            The end: ``"eos"``, ``"length"``, ``"stop"`` or ``"cancelled"``.

        Raises:
            EndpointError: The request failed; no piece of the API key is in it.
        """
        # The buffer follows transformers' streamer protocol, whose first put is the prompt.
        buffer.put(self.messages)
        if self.assistant_prefix:
            # A branch's answer so far: the reader shows it at once, as for a local branch.
            buffer.put(self.assistant_prefix)
        try:
            return _run_loop(self._run(buffer, control))
        except Exception as exc:
            # The one way out for every error: the key is blotted out of all of it here.
            failure = self.endpoint._shown_error(exc)
        # Raised outside the except block, so that a replacement does not carry the original
        # as its __context__ (which a traceback would print).
        raise failure

    async def _run(self, buffer: TokenBuffer, control: RunControl) -> str:
        request = asyncio.ensure_future(self._stream(buffer, control))
        while True:
            done, _ = await asyncio.wait({request}, timeout=_WATCH_INTERVAL_S)
            if done:
                return request.result()  # the natural end, or the request's error
            if control.should_stop():
                # Cancelling the request closes its connection, which is how a server learns
                # to stop generating. The lifecycle decides the end state (cancelled, timed
                # out, or complete at a stop string).
                request.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await request
                return "stop" if control.stop_found.is_set() else "cancelled"

    async def _events(self, response: Any) -> AsyncGenerator[tuple[str, str], None]:
        """The events (type, data) of ``response``'s event stream, read a bounded step at a time.

        See ``_EventStream``; an EndpointError for what is not one.
        """
        kind = response.headers.get("content-type", "").partition(";")[0].strip()
        if "text/event-stream" not in kind.lower():
            raise self._error(
                f"the server did not answer with an event stream (its Content-Type is "
                f"{kind!r}, not 'text/event-stream'); check that base_url points at an "
                "OpenAI-compatible API (it ends in /v1)"
            )
        reader = _EventStream(_LINE_LIMIT)
        try:
            inflater = _Inflater(response.headers.get("content-encoding", ""))
            async for raw in response.aiter_raw():
                for piece in inflater.feed(raw):
                    for event in reader.feed(piece):
                        yield event
                    await asyncio.sleep(0)  # a bomb's steps: Stop is looked at between
        except _BodyError as exc:
            raise self._error(
                f"the server's event stream cannot be read: {exc}; the text so far is in "
                "partial_text"
            ) from None
        except _EventTooLong as exc:
            start = self.endpoint._quote(str(exc), _EVENT_TEXT_LIMIT)
            raise self._error(
                f"the server sent an event-stream line of more than {_LINE_LIMIT // 2**20} MiB "
                f"after {self.chunks} chunks (it starts {start!r}); nbstream reads no more of "
                "it, since a chunk of a streamed answer is a few KB at most; the text so far "
                "is in partial_text"
            ) from None

    async def _error_body(self, response: Any) -> str | None:
        """The start of an error response's body, as text; None if it cannot be read.

        At most ``_ERROR_BODY_LIMIT``, inflated.
        """
        try:
            body, _ = await _read_bounded(response, _ERROR_BODY_LIMIT)
        except _BodyError as exc:
            logger.debug("an error body not read: %s", exc)
            return None
        return _body_text(body, response)

    async def _stream(self, buffer: TokenBuffer, control: RunControl) -> str:
        """Send the request and put the answer's text into ``buffer`` as it streams.

        Returns:
            How the answer ended, as the engine names it (``"eos"``, ``"length"``, or
            ``"stop"`` for a stop string).

        Raises:
            EndpointError: The request failed, or the stream did not end as an answer does.
        """
        import httpx

        endpoint = self.endpoint
        url = endpoint._url(self.path)
        watch = self._stop_watch()
        # Numbered among this process's requests to the server, to tell later whether another
        # one started while this one streamed.
        self._request_number = _traffic.begin(endpoint.base_url)
        try:
            async with (
                httpx.AsyncClient(timeout=httpx.Timeout(endpoint.timeout)) as client,
                client.stream("POST", url, json=self.body, headers=endpoint._headers()) as response,
            ):
                if 300 <= response.status_code < 400:
                    raise self._redirect_error(response)
                if response.status_code >= 400:
                    raise self._status_error(
                        response.status_code, response, await self._error_body(response)
                    )
                if await self._read_answer(response, buffer, control, watch):
                    return "stop"
        except EndpointError:
            raise
        except httpx.HTTPError as exc:
            failure = self._request_error(exc, url)
            if failure is not None:
                raise failure from exc
        return self._answer_end()

    def _stop_watch(self) -> _StopWatch | None:
        """The watch for the run's stop strings (None: it has none).

        It is fed a branch's answer so far.
        """
        stops = self.settings.get("stop")
        if not stops:
            return None
        watch = _StopWatch(stops, self._answer_split)
        if self.assistant_prefix:
            # The answer so far starts the text: its thinking (a branch in or after it) goes
            # through the split first, so that the stop check reads the answer part only,
            # and the split knows where the branch's own text is.
            watch.feed(self.assistant_prefix)
        return watch

    async def _read_answer(
        self, response: Any, buffer: TokenBuffer, control: RunControl, watch: _StopWatch | None
    ) -> bool:
        """Put the text of ``response``'s events into ``buffer`` until the stream ends.

        Keeps the server's finish reason; True when a stop string ended the answer.
        """
        events = self._events(response)
        # The first half of a surrogate pair whose second half is in the next event.
        half = ""
        try:
            while True:
                event = await self._next_event(events)
                if event is None or event[1].strip() == "[DONE]":
                    break
                chunk = self._chunk(*event)
                if chunk is None:
                    continue
                text, reason = chunk
                if half or _SURROGATE.search(text):
                    text, half = _join_surrogates(half + text)
                if text:
                    self.text_chunks += 1
                    buffer.put(text)
                    if watch is not None and watch.feed(text):
                        # The chunk may carry tokens past the stop string: the trace keeps
                        # those of the text shown only.
                        capture = self.trace_capture
                        if capture is not None:
                            capture.cut(capture.seen - watch.unshown)
                        # The answer is over: leaving closes the connection, so the server
                        # stops; the reader side cuts the text itself.
                        control.stop_found.set()
                        return True
                if reason is not None:
                    self._finish = reason
            if half:  # its pair never came
                buffer.put("\ufffd")
            if self.trace_capture is not None:
                self.trace_capture.finish()
        finally:
            await events.aclose()
        return False

    async def _next_event(
        self, events: AsyncGenerator[tuple[str, str], None]
    ) -> tuple[str, str] | None:
        """The next of ``events``; None at the end of the stream.

        None also once the finish reason is in and the rest does not come within a short grace (the
        answer is over).
        """
        # Once the finish reason is in, a read waits at most this long (within the timeout).
        grace = min(_FINISH_GRACE_S, self.endpoint.timeout)
        try:
            if self._finish is None:
                return await anext(events)
            return await asyncio.wait_for(anext(events), grace)
        except StopAsyncIteration:
            return None
        except asyncio.TimeoutError:
            # Only reachable after the finish reason: the answer is over.
            logger.debug("no end of stream %g s after the finish reason; closing it", grace)
            return None

    def _chunk(self, kind: str, data: str) -> tuple[str, str | None] | None:
        """The text and finish reason of one event (``kind``, ``data``).

        None for an event that is no chunk of the answer.
        """
        if kind == "error":
            raise self._error(
                "the server reported an error mid-stream: "
                f"{self.endpoint._quote(data, _ERROR_TEXT_LIMIT)}"
            )
        if kind != "message":
            return None  # a kind of event this protocol does not define
        if not data.strip():
            return None  # an event with no data ("data:" alone) is no chunk
        self.chunks += 1
        return self._parse(data)

    def _request_error(self, exc: Exception, url: str) -> EndpointError | None:
        """The error of a request that ``exc`` (httpx's) ended.

        None when the answer was over (its finish reason in) and only the end of the stream was
        lost.
        """
        import httpx

        timeout = self.endpoint.timeout
        if isinstance(exc, httpx.ConnectTimeout):
            return self._error(
                f"connecting to {_safe_url(url)} timed out after {timeout:g} s; check "
                "that the server is reachable, or raise Endpoint(timeout=...)"
            )
        if isinstance(exc, httpx.ConnectError):
            return self._error(
                f"cannot connect to {_safe_url(url)} ({exc}); is the server running, and is "
                "base_url right (it ends in /v1)?"
            )
        if isinstance(exc, (httpx.ReadTimeout, httpx.RemoteProtocolError, httpx.ReadError)):
            if self._finish is None:
                return self._broken(exc, self._why_cut())
            logger.debug(
                "the stream broke after the finish reason: %s",
                self.endpoint._scrub(f"{type(exc).__name__}: {exc}"),
            )
            return None
        if isinstance(exc, httpx.TimeoutException):
            return self._error(f"the request timed out ({type(exc).__name__}: {exc})")
        return self._error(f"the request failed: {type(exc).__name__}: {exc}")

    def _answer_end(self) -> str:
        """How the answer ended, as the engine names the server's finish reason.

        An :class:`EndpointError` for a stream without one, or with one that ends no text answer.
        """
        finish = self._finish
        if finish is None:
            raise self._error(
                f"the stream ended after {self.chunks} chunks without a finish_reason: the "
                f"server stopped before the answer was over{self._why_cut()}; the text so far "
                "is in partial_text"
            )
        self.server_finish_reason = finish
        mapped = _FINISH_REASONS.get(finish)
        if mapped is None:
            said = _NOT_AN_ANSWER.get(
                finish,
                "the server ended the answer with a finish_reason nbstream does not know as "
                "the end of a text answer",
            )
            raise self._error(
                f"{said} (finish_reason={finish!r}); the text so far is in partial_text"
            )
        return mapped

    def _broken(self, exc: Exception, why: str) -> EndpointError:
        """The error of a stream that broke off before its finish reason."""
        import httpx

        if isinstance(exc, httpx.ReadTimeout):
            return self._error(
                f"the server sent nothing for {self.endpoint.timeout:g} s (Endpoint timeout) "
                f"after {self.chunks} chunks: it is stalled or overloaded; the text so far is "
                "in partial_text. Raise Endpoint(timeout=...) for a slow server"
            )
        return self._error(
            f"the connection to the server dropped mid-stream after {self.chunks} chunks "
            f"({exc}){why}; the text so far is in partial_text"
        )

    def _why_cut(self) -> str:
        """The likely cause of a stream that ended before its finish reason.

        As a clause (``"; ..."``), or where to look.
        """
        endpoint = self.endpoint
        others = _traffic.since(endpoint.base_url, self._request_number)
        if others > 0:
            started = "another request" if others == 1 else f"{others} other requests"
            return (
                f"; {started} to the same server started while this one streamed, and some "
                "servers (llama-cpp-python's) end the stream in progress when a new request "
                "arrives: run one request at a time with Endpoint(..., concurrent=False)"
            )
        if self.text_chunks == 0:
            return "; no text came at all: the prompt may be longer than the server's " + (
                f"context ({self._prompt_size()}); shorten it, or raise the server's context "
                "size (llama-cpp-python: --n_ctx; llama-server: --ctx-size), and see its log"
            )
        return " (see its log)"

    def _prompt_size(self) -> str:
        """The prompt's length for a message: characters, and tokens where they can be had."""
        messages = self.messages
        chars = sum(len(m["content"]) for m in messages)
        said = [f"the prompt is {chars:,} characters"]
        tokens = self.prompt_tokens
        if tokens is None and self.endpoint.tokenizer is not None:
            try:
                tokens = len(
                    self.endpoint.tokenizer.apply_chat_template(
                        messages, tokenize=True, add_generation_prompt=True
                    )
                )
            except Exception:  # a tokenizer without a chat template: the characters will do
                logger.debug("could not count the prompt's tokens", exc_info=True)
        if tokens is not None:
            said.append(f"{tokens:,} tokens")
        context = self.server.context
        if context is not None:
            said.append(f"the server's context is {context:,} tokens")
        return ", ".join(said)

    def _parse(self, data: str) -> tuple[str, str | None]:
        """The text and finish reason of one ``chat.completion.chunk`` event's ``data``."""
        chunk = self._chunk_object(data)
        self._note_chunk(chunk)
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise self._malformed("no 'choices' list", data)
        text, reason = "", None
        for choice in choices:
            # A choice of the wrong shape fails the run rather than being skipped: skipping
            # it could drop text, and the run would end complete with a hole in its answer.
            if not isinstance(choice, dict):
                raise self._malformed("a choice that is not an object", data)
            if choice.get("index", 0) != 0:
                continue  # another candidate; nbstream asks for one (n=1)
            piece, finished = self._choice(choice, data)
            text += piece
            if finished:
                reason = finished
        return text, reason

    def _chunk_object(self, data: str) -> dict[str, Any]:
        """An event's ``data`` as the chunk object it must be.

        An :class:`EndpointError` for anything else, or for an error object in its place.
        """
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError as exc:
            raise self._malformed(f"not JSON: {exc.msg}", data) from exc
        if not isinstance(chunk, dict):
            raise self._malformed("not an object", data)
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise self._error(
                "the server reported an error mid-stream: "
                f"{self.endpoint._quote(str(message), _ERROR_TEXT_LIMIT)}"
            )
        return chunk

    def _note_chunk(self, chunk: dict[str, Any]) -> None:
        """Keep what a chunk says besides its text: the model that answered, the usage."""
        model = chunk.get("model")
        if isinstance(model, str) and model:
            model = self.endpoint._scrub(model)  # kept in the record: never a piece of the key
            if model not in self.answered_by:
                self._answered(model)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage_seen = True
            completion = usage.get("completion_tokens")
            prompt = usage.get("prompt_tokens")
            if _is_count(completion):
                self.completion_tokens = completion
            if _is_count(prompt):
                self.prompt_tokens = prompt

    def _choice(self, choice: dict[str, Any], data: str) -> tuple[str, str | None]:
        """The text and the finish reason of one choice of the chunk in ``data``.

        The text includes a reasoning field's, between the thinking tags; its logprobs go to the
        trace.
        """
        delta = choice.get("delta")
        if self.path == "/completions":
            # The completions API's chunk: the text itself, no delta.
            delta = {"content": choice.get("text")}
        if delta is not None and not isinstance(delta, dict):
            raise self._malformed("a 'delta' that is not an object", data)
        content = delta.get("content") if delta is not None else None
        if content is not None and not isinstance(content, str):
            raise self._malformed("a 'content' that is not a string", data)
        reasoning = ""
        for key in ("reasoning_content", "reasoning"):
            piece = delta.get(key) if delta is not None else None
            if piece is not None and not isinstance(piece, str):
                raise self._malformed(f"a '{key}' that is not a string", data)
            reasoning += piece or ""
        text = self._thinking_opens() + reasoning if reasoning else ""
        finished = choice.get("finish_reason")
        if finished is not None and not isinstance(finished, str):
            raise self._malformed("a 'finish_reason' that is not a string", data)
        if content:
            text += self._thinking_closes() + content
        # A chunk with logprobs and no text yet (vLLM's first part of a split
        # character) is recorded all the same: its tokens come before the next text.
        if self.trace_capture is not None and (
            content or reasoning or choice.get("logprobs") is not None
        ):
            self.trace_capture.add(choice.get("logprobs"), content or "", bool(reasoning))
        return text, finished

    def _thinking_opens(self) -> str:
        if self._reasoning is None:
            self._reasoning = "open"
            return self.thinking_tags[0]
        return ""

    def _thinking_closes(self) -> str:
        if self._reasoning == "open":
            self._reasoning = "closed"
            return self.thinking_tags[1]
        return ""

    def _answered(self, model: str) -> None:
        """Keep the model name a chunk carried; warn when it is not the one asked for."""
        self.answered_by.append(model)
        asked = self.endpoint.model
        # ``model`` comes scrubbed of the key: a name that shares a piece with the key is
        # compared as scrubbed the same way.
        if model in (asked, self.endpoint._scrub(asked)):
            return
        said = self.endpoint._quote(model, _EVENT_TEXT_LIMIT)
        warning = (
            f"asked for model {self.endpoint._quote(asked, _EVENT_TEXT_LIMIT)!r}, but the server "
            f"answered as {said!r}: the text is that model's (a server with one model may "
            "answer any name with it)"
        )
        self.warnings.append(warning)
        logger.warning("%s", warning)

    def _malformed(self, what: str, data: str) -> EndpointError:
        quoted = self.endpoint._quote(data, _EVENT_TEXT_LIMIT)
        return self._error(
            f"the server sent a malformed event ({what}) after {self.chunks - 1} chunks: "
            f"{quoted!r}; the text so far is in partial_text"
        )

    def _redirect_error(self, response: Any) -> EndpointError:
        """A 3xx: nbstream follows no redirect, and says where it pointed."""
        status = response.status_code
        url = _safe_url(str(response.request.url))
        location = response.headers.get("location")
        if not location:
            where = "without saying where to (no Location header)"
            hint = "check base_url"
        else:
            target = urllib.parse.urljoin(str(response.request.url), location)
            shown = self.endpoint._scrub(_safe_url(target))
            where = f"to {shown}"
            if urllib.parse.urlsplit(target).query:
                where += " (its query string not shown)"
            suggested = shown.removesuffix(self.path)
            hint = (
                "use the final URL as base_url"
                + (f": base_url={suggested!r}" if suggested != shown else "")
                + " (with the query string the server asks for, if any)"
            )
        return self._error(
            f"HTTP {status} from {url}: the server redirects {where}. nbstream follows no "
            "redirect, since the Authorization header (the API key) would not be sent on to "
            f"another address; {hint}",
            status,
        )

    def _status_error(self, status: int, response: Any, body: str | None) -> EndpointError:
        detail = _error_text(body, response, self.endpoint)
        url = _safe_url(str(response.request.url))
        said = f"HTTP {status} from {url}: {detail}"
        if status in (401, 403):
            hint = (
                "the server refused the API key; pass the right one as Endpoint(api_key=...)"
                if self.endpoint._api_key is not None
                else "the server wants an API key; pass it as Endpoint(api_key=...)"
            )
        elif status == 404:
            hint = (
                "check base_url (it ends in /v1, e.g. http://host:8000/v1) and the model name "
                f"(GET {_safe_url(self.endpoint.base_url)}/models lists what the server has)"
            )
        elif status == 429:
            retry = response.headers.get("retry-after")
            hint = (
                "the server is rate-limiting requests; wait"
                + (f" {retry} s" if retry else "")
                + " and try again, or send fewer requests at once"
            )
        elif status >= 500:
            hint = "the server failed: its log says why"
        else:
            sent = [name for name in EXTENSION_SETTINGS if self.settings.get(name) is not None]
            hint = "the server rejected the request"
            if sent:
                verb = "is" if len(sent) == 1 else "are"
                hint += (
                    f"; {' and '.join(sent)} {verb} sent as extension fields "
                    f"({self.server.family.title}'s names), which this server may not accept: "
                    "drop them, or name the server with Endpoint(server=...)"
                )
            asked = self.settings.get("alternatives") or 0
            if asked > _USUAL_MAX_LOGPROBS:
                hint += (
                    f"; alternatives={asked} is sent as the server's logprobs count, and many "
                    f"servers take at most {_USUAL_MAX_LOGPROBS} (OpenAI; vLLM's "
                    "--max-logprobs): ask for fewer"
                )
        return self._error(f"{said}. {hint[0].upper()}{hint[1:]}", status)

    def _error(self, message: str, status: int | None = None) -> EndpointError:
        # Scrubbed here already, so that the message is clean from the moment it exists;
        # Endpoint.shown_error checks the whole of it (chain included) on the way out.
        return EndpointError(self.endpoint._scrub(message), status)


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


def _check_tokenizer(tokenizer: Any) -> None:
    """Refuse an ``Endpoint(tokenizer=...)`` that cannot render a conversation.

    Such as a name, or a tokenizer without a chat template: the view would offer Continue, and it
    would fail.
    """
    how = (
        "pass the model's transformers tokenizer, e.g. AutoTokenizer.from_pretrained(<the "
        "model the server's weights (the GGUF) were made from>)"
    )
    if not callable(getattr(tokenizer, "apply_chat_template", None)):
        raise TypeError(
            f"tokenizer must be a transformers tokenizer (it has no apply_chat_template), got "
            f"{type(tokenizer).__name__} {tokenizer!r:.60}: {how}"
        )
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "tokenizer has no chat template, which nbstream needs to render the conversation "
            f"for the server to continue: {how}, an instruct model's, whose tokenizer has one"
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


#: The most top_logprobs OpenAI's API and vLLM (its default --max-logprobs) take.
_USUAL_MAX_LOGPROBS = 20
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


def _join_surrogates(text: str) -> tuple[str, str]:
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


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _checked_key(api_key: Any) -> str:
    """The key to send: surrounding whitespace dropped.

    Refused (without quoting it) if it has a character an HTTP header cannot carry.
    """
    if not isinstance(api_key, str):
        raise TypeError(f"api_key must be a str or None, got {type(api_key).__name__}")
    # A key read from a file ends in a newline; one pasted may have spaces around it.
    key = api_key.strip()
    for position, char in enumerate(key, start=1):
        if " " <= char <= "~":
            continue
        control = char < " " or "\x7f" <= char <= "\x9f"
        kind = "a control character" if control else "a non-ASCII character"
        raise ValueError(
            f"api_key has {kind} inside it (character {position} of {len(key)}), which an "
            "HTTP header cannot carry: copy the key again (only the whitespace around it is "
            "dropped)"
        )
    return key


def _error_text(raw: str | None, response: Any, endpoint: Endpoint) -> str:
    """The server's own words from an error response's body ``raw``, scrubbed and cut.

    ``raw``: OpenAI, FastAPI, TGI or plain text; None: it could not be read. The words are cut to a
    length for a message.
    """
    if raw is None:
        return "(no readable body)"
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        body = None
    message: Any = raw
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and "message" in error:
            message = error["message"]
        elif error is not None:
            message = error
        elif "detail" in body:
            message = body["detail"]
        elif "message" in body:
            message = body["message"]
    text = " ".join(str(message).split())
    if not text:
        return f"(empty body, {response.reason_phrase or 'no reason given'})"
    return endpoint._quote(text, _ERROR_TEXT_LIMIT)


def _safe_url(url: str) -> str:
    """``url`` without credentials or query string (where keys sometimes travel)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<invalid URL>"
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))
