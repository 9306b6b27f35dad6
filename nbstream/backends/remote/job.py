"""One run on a server: :class:`RemoteJob` sends its request and streams the answer.

The job runs on the engine's worker thread, in an event loop of its own
(:func:`~nbstream.backends.remote.transport.run_loop`): a Stop, a spent budget or a stop
string cancels the request at once, even while it waits for the server (or for its name to
be looked up), and closing the connection is what tells the server to stop generating.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import Any, Protocol

from ...settings import DEFAULT_THINKING_TAGS
from ...streaming import TextDecoder, ThinkingSplitter, TokenBuffer
from .. import servers as _servers
from ..base import Job, RunControl
from ..servers import ServerInfo
from .chunks import ChunkReader
from .errors import (
    EndpointError,
    answer_end,
    broken_message,
    not_an_answer,
    prompt_size,
    redirect_message,
    request_message,
    shown_error,
    status_message,
    unfinished_message,
    why_cut,
)
from .logprobs import RemoteTraceCapture
from .request import continuation_record
from .secret import Credentials
from .transport import (
    ERROR_BODY_LIMIT,
    EVENT_TEXT_LIMIT,
    LINE_LIMIT,
    SURROGATE,
    BodyError,
    EventTooLong,
    StopWatch,
    body_text,
    headers,
    join_surrogates,
    read_bounded,
    read_events,
    run_loop,
    traffic,
    url_under,
)

__all__ = ["RemoteJob", "Server"]

logger = logging.getLogger(__name__)

#: How often the run's event loop looks at Stop, the budget and stop strings.
_WATCH_INTERVAL_S = 0.01
#: After the finish reason, how long to wait for the rest (the usage event, ``[DONE]``, the
#: end of the body). The answer is over: a server that then holds the connection open
#: without a word has not failed it, so the run ends complete and the connection is closed.
_FINISH_GRACE_S = 2.0


class Server(Protocol):
    """What a job uses of its :class:`~nbstream.Endpoint`."""

    model: str
    base_url: str
    timeout: float
    tokenizer: Any
    credentials: Credentials


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
        endpoint: Server,
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
        self._request_number = 0
        # The server's finish reason once its chunk is in (``server_finish_reason`` once the
        # stream has ended with it).
        self._finish: str | None = None
        # A reasoning parser's separate field goes between the run's thinking tags.
        tags = settings.get("thinking_tags")
        self.thinking_tags: tuple[str, str] = (tags[0], tags[1]) if tags else DEFAULT_THINKING_TAGS
        # Stop strings apply to the answer only: the watch is fed the answer's part.
        self._answer_split = ThinkingSplitter(*self.thinking_tags) if tags != [] else None
        #: ``alternatives=k``: the records of ``run.trace``, from the server's logprobs.
        self.trace_capture: RemoteTraceCapture | None = None
        #: A branch: the answer so far, sent for the server to continue, and its length in
        #: tokens (the parent's trace records).
        self.assistant_prefix: str | None = None
        self.prefix_steps = 0
        # Reads the stream's chunks into this job (its counts, usage, model names, trace).
        self._reader = ChunkReader(self, endpoint.model, endpoint.credentials, self.thinking_tags)

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
            "tokens_note": self._reader.tokens_note(self.server_finish_reason, self.text_chunks),
        }

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
        record: dict[str, Any] = {
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
        }
        if self.trace_capture is not None:
            record["trace"] = self.trace_capture.record_notes(notes)
        if self.assistant_prefix is not None:
            # What was sent for the server to continue.
            record["continuation"] = continuation_record(
                family,
                self.assistant_prefix,
                self.prefix_steps,
                self.prompt_text,
                self.prefix_as_rendered,
                self.thinking_tags,
                notes,
            )
        return record

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
            return run_loop(self._run(buffer, control))
        except Exception as exc:
            # The one way out for every error: the key is blotted out of all of it here.
            failure = shown_error(exc, self.endpoint.credentials)
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

        See ``EventStream``; an EndpointError for what is not one.
        """
        kind = response.headers.get("content-type", "").partition(";")[0].strip()
        if "text/event-stream" not in kind.lower():
            raise self._error(
                f"the server did not answer with an event stream (its Content-Type is "
                f"{kind!r}, not 'text/event-stream'); check that base_url points at an "
                "OpenAI-compatible API (it ends in /v1)"
            )
        try:
            async for event in read_events(response, LINE_LIMIT):
                yield event
        except BodyError as exc:
            raise self._error(
                f"the server's event stream cannot be read: {exc}; the text so far is in "
                "partial_text"
            ) from None
        except EventTooLong as exc:
            start = self.endpoint.credentials.quote(str(exc), EVENT_TEXT_LIMIT)
            raise self._error(
                f"the server sent an event-stream line of more than {LINE_LIMIT // 2**20} MiB "
                f"after {self.chunks} chunks (it starts {start!r}); nbstream reads no more of "
                "it, since a chunk of a streamed answer is a few KB at most; the text so far "
                "is in partial_text"
            ) from None

    async def _error_body(self, response: Any) -> str | None:
        """The start of an error response's body, as text; None if it cannot be read.

        At most ``ERROR_BODY_LIMIT``, inflated.
        """
        try:
            body, _ = await read_bounded(response, ERROR_BODY_LIMIT)
        except BodyError as exc:
            logger.debug("an error body not read: %s", exc)
            return None
        return body_text(body, response)

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
        url = url_under(endpoint.base_url, self.path)
        stops = self.settings.get("stop")
        watch = StopWatch.started(stops, self._answer_split, self.assistant_prefix)
        # Numbered among this process's requests to the server, to tell later whether another
        # one started while this one streamed.
        self._request_number = traffic.begin(endpoint.base_url)
        sent = headers("text/event-stream", endpoint.credentials.authorization())
        try:
            async with (
                httpx.AsyncClient(timeout=httpx.Timeout(endpoint.timeout)) as client,
                client.stream("POST", url, json=self.body, headers=sent) as response,
            ):
                if response.status_code >= 300:
                    raise await self._refused(response)
                if await self._read_answer(response, buffer, control, watch):
                    return "stop"
        except EndpointError:
            raise
        except httpx.HTTPError as exc:
            failure = self._request_error(exc, url)
            if failure is not None:
                raise failure from exc
        return self._answer_end()

    async def _read_answer(
        self, response: Any, buffer: TokenBuffer, control: RunControl, watch: StopWatch | None
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
                chunk = self._reader.event(*event)
                if chunk is None:
                    continue
                text, reason = chunk
                if half or SURROGATE.search(text):
                    text, half = join_surrogates(half + text)
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

    def _request_error(self, exc: Exception, url: str) -> EndpointError | None:
        """The error of a request that ``exc`` (httpx's) ended.

        None when the answer was over (its finish reason in) and only the end of the stream was
        lost.
        """
        import httpx

        if isinstance(exc, (httpx.ReadTimeout, httpx.RemoteProtocolError, httpx.ReadError)):
            if self._finish is None:
                why = broken_message(exc, self._why_cut(), self.chunks, self.endpoint.timeout)
                return self._error(why)
            logger.debug(
                "the stream broke after the finish reason: %s",
                self.endpoint.credentials.scrub(f"{type(exc).__name__}: {exc}"),
            )
            return None
        return self._error(request_message(exc, url, self.endpoint.timeout))

    def _answer_end(self) -> str:
        """How the answer ended, as the engine names the server's finish reason.

        An :class:`EndpointError` for a stream without one, or with one that ends no text answer.
        """
        finish = self._finish
        if finish is None:
            raise self._error(unfinished_message(self.chunks, self._why_cut()))
        self.server_finish_reason = finish
        mapped = answer_end(finish)
        if mapped is None:
            raise self._error(not_an_answer(finish))
        return mapped

    def _why_cut(self) -> str:
        """The likely cause of a stream that ended before its finish reason (:func:`why_cut`)."""
        others = traffic.since(self.endpoint.base_url, self._request_number)
        tokenizer, context = self.endpoint.tokenizer, self.server.context
        return why_cut(
            others,
            self.text_chunks,
            lambda: prompt_size(self.messages, self.prompt_tokens, tokenizer, context),
        )

    async def _refused(self, response: Any) -> EndpointError:
        """The error of a response that is no answer: a redirect (3xx) or an error status."""
        status, credentials = response.status_code, self.endpoint.credentials
        if status < 400:
            # nbstream follows no redirect, and says where it pointed.
            return self._error(redirect_message(response, self.path, credentials), status)
        body = await self._error_body(response)
        said = status_message(
            response,
            body,
            credentials,
            self.endpoint.base_url,
            self.settings,
            self.server.family.title,
        )
        return self._error(said, status)

    def _error(self, message: str, status: int | None = None) -> EndpointError:
        # Scrubbed here already, so that the message is clean from the moment it exists;
        # Endpoint.shown_error checks the whole of it (chain included) on the way out.
        return EndpointError(self.endpoint.credentials.scrub(message), status)
