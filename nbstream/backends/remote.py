"""The remote backend: a model behind an OpenAI-compatible chat-completions server.

vLLM, Text Generation Inference, SGLang, ``transformers serve`` and others speak the same
streaming protocol (``POST {base_url}/chat/completions`` with ``"stream": true``, answered
with server-sent events). :class:`Endpoint` is a backend under the engine's seam, so a run
on a server has the same lifecycle, end states, Stop, budget, metrics and record as a run
on a local model.

The client is ``httpx`` with ``httpx-sse`` (``pip install 'nbstream[remote]'``), driven by
an event loop of the run's own on the worker thread: a Stop, a spent budget or a stop
string cancels the request at once, even while it waits for the server, and closing the
connection is what tells the server to stop generating.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import urllib.parse
from typing import Any

from ..settings import DEFAULT_MAX_NEW_TOKENS
from ..streaming import StopFilter, TextDecoder, TokenBuffer
from .base import RunControl
from .local import check_prompt

logger = logging.getLogger(__name__)

#: How often the run's event loop looks at Stop, the budget and stop strings.
_WATCH_INTERVAL_S = 0.01
#: Settings sent as extension fields of the request (vLLM and SGLang accept them; a server
#: that does not may reject the request, and the run then fails with its message).
_EXTENSION_FIELDS = ("top_k", "repetition_penalty")
_INSTALL_HINT = "install the remote extra with: pip install 'nbstream[remote]'"
#: How much of a server's error text goes into a message.
_ERROR_TEXT_LIMIT = 500
#: The server's finish reasons the engine knows (others fail the run, saying which).
_FINISH_REASONS = {"stop": "eos", "length": "length"}


class EndpointError(RuntimeError):
    """A request to a server failed. ``status`` is the HTTP status code, if there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class _Secret:
    """Holds the API key so that no ``repr``, ``vars`` dump or log line can show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "'***'"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("an Endpoint's API key is not pickled; create the Endpoint again")


def _require_client() -> None:
    try:
        import httpx  # noqa: F401
        import httpx_sse  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"nbstream.Endpoint needs httpx and httpx-sse, which are not installed; {_INSTALL_HINT}"
        ) from exc


class Endpoint:
    """A model served by an OpenAI-compatible server, usable wherever a model is.

    ``base_url`` is the server's API root, ending in ``/v1`` as OpenAI clients expect
    (``http://127.0.0.1:8000/v1``); ``model`` the model name the server knows (for
    ``transformers serve <folder>``, that folder's path); ``api_key`` is sent as a bearer
    token and never shown (``repr``, records, error messages, logs); ``timeout`` bounds, in
    seconds, connecting and each read: a server that sends nothing for that long fails the
    run. The setting ``budget_s`` bounds a whole run, as for a local model.

    Needs ``pip install 'nbstream[remote]'`` (httpx and httpx-sse).

    Settings map onto the request: ``max_new_tokens`` to ``max_tokens`` (nbstream's default
    of 256 when unset, as for a local model without one), ``temperature`` (0 is greedy),
    ``do_sample=False`` to ``temperature=0``, ``top_p`` and ``seed`` as they are.
    ``top_k`` and ``repetition_penalty`` are not in the OpenAI protocol: they are sent as
    extension fields, which vLLM and SGLang honour; a server that does not know them (such
    as ``transformers serve``) rejects the request, and the run fails with its message.
    ``stop`` strings are matched by nbstream on the streamed text, exactly as for a local
    model (the run ends complete with ``finish_reason="stop"`` and the connection is closed,
    so the server stops); they are not sent, since a server's own ``finish_reason="stop"``
    cannot tell a stop string from the end of the answer. ``expect`` and ``budget_s`` are
    nbstream's own and work as for a local model.

    The server's ``finish_reason`` ``"stop"`` becomes ``"eos"`` and ``"length"`` stays
    ``"length"``; a stream that ends without one fails. ``metrics["tokens"]`` is the
    server's ``usage.completion_tokens`` when it sends usage (it is asked to), else
    ``None``; ``metrics["chunks"]`` counts the events received (chunks are not tokens).
    Runs on an endpoint do not queue in the notebook: the server schedules them.

    Example::

        >>> import nbstream
        >>> server = nbstream.Endpoint("http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-7B-Instruct")
        >>> run = nbstream.stream(server, None, "Name two colors.", max_new_tokens=30)
        >>> run.wait()
        >>> nbstream.StreamWidget(server)      # the widget, on the same server
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
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
                "model must name the model the server serves (see GET {base_url}/models), "
                f"got {model!r}"
            )
        if api_key is not None and not isinstance(api_key, str):
            raise TypeError(f"api_key must be a str or None, got {type(api_key).__name__}")
        if (
            not isinstance(timeout, (int, float))
            or isinstance(timeout, bool)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        _require_client()
        self.base_url = base_url.strip().rstrip("/")
        self.model = model
        self.timeout = float(timeout)
        self._api_key = _Secret(api_key) if api_key else None

    def __repr__(self) -> str:
        key = ", api_key='***'" if self._api_key is not None else ""
        return (
            f"Endpoint({_safe_url(self.base_url)!r}, {self.model!r}{key}, timeout={self.timeout:g})"
        )

    # -- the Backend protocol ---------------------------------------------------------------
    def queue_key(self) -> Any:
        # A fresh key per run: the server schedules concurrent requests (vLLM batches them),
        # so runs on one endpoint never wait for each other in the notebook.
        return object()

    def describe(self) -> dict[str, Any]:
        """What a run's record says about the model (:func:`nbstream.record.model_info`)."""
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

    def prepare(self, prompt: Any, settings: dict[str, Any]) -> RemoteJob:
        """Check the prompt and settings and build the request; nothing is sent yet."""
        check_prompt(prompt)
        messages = (
            [{"role": "user", "content": prompt}]
            if isinstance(prompt, str)
            else [{"role": m["role"], "content": m["content"]} for m in prompt]
        )
        effective = dict(settings)
        effective.setdefault("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        temperature = effective.get("temperature")
        do_sample = effective.get("do_sample")
        if temperature == 0 and do_sample:
            raise ValueError(
                "temperature=0 means greedy decoding, which contradicts do_sample=True; "
                "set temperature above 0 or drop do_sample"
            )
        if do_sample is False:
            temperature = 0.0
        if temperature is not None:
            do_sample = temperature > 0
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": effective["max_new_tokens"],
        }
        if temperature is not None:
            body["temperature"] = temperature
        for name in ("top_p", "seed", *_EXTENSION_FIELDS):
            if name in effective:
                body[name] = effective[name]
        job = RemoteJob(self, body, effective)
        job.prompt = prompt
        job.in_effect = {
            "max_new_tokens": effective["max_new_tokens"],
            "do_sample": do_sample,  # None: the server's default
            "temperature": temperature,
            "top_p": effective.get("top_p"),
            "top_k": effective.get("top_k"),
            "repetition_penalty": effective.get("repetition_penalty"),
            "seed": effective.get("seed"),
            "stop": effective.get("stop"),
            "expect": effective.get("expect"),
            "budget_s": effective.get("budget_s"),
        }
        return job

    # -- private -------------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream"}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.reveal()}"
        return headers

    def _scrub(self, text: str) -> str:
        """``text`` with the API key blotted out (a server may echo what it was sent)."""
        if self._api_key is not None:
            text = text.replace(self._api_key.reveal(), "***")
        return text


class RemoteJob:
    """One prepared request; :meth:`run` streams it on the worker thread."""

    def __init__(self, endpoint: Endpoint, body: dict[str, Any], settings: dict[str, Any]) -> None:
        self.endpoint = endpoint
        self.body = body
        self.settings = settings
        # The server applies its own chat template: the exact prompt text is not known here;
        # the prompt's token count comes from the server's usage, when it sends one.
        self.prompt_text: str | None = None
        self.prompt_tokens: int | None = None
        self.prompt: Any = None
        self.in_effect: dict[str, Any] = dict(settings)
        self.seed: int | None = settings.get("seed")
        self.chunks = 0
        self.completion_tokens: int | None = None
        self.server_finish_reason: str | None = None

    def decoder(self) -> TextDecoder:
        return TextDecoder()

    def count_tokens(self, buffer: TokenBuffer) -> int | None:
        # Text pieces are not tokens: only the server's own count is one.
        return self.completion_tokens

    def extra_metrics(self) -> dict[str, Any]:
        return {"chunks": self.chunks}

    def run(self, buffer: TokenBuffer, control: RunControl) -> str:
        # The buffer follows transformers' streamer protocol, whose first put is the prompt.
        buffer.put(self.body["messages"])
        return asyncio.run(self._run(buffer, control))

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

    async def _stream(self, buffer: TokenBuffer, control: RunControl) -> str:
        import httpx
        from httpx_sse import EventSource, SSEError

        endpoint = self.endpoint
        url = f"{endpoint.base_url}/chat/completions"
        stops = self.settings.get("stop")
        watch = StopFilter(stops) if stops else None
        finish: str | None = None
        try:
            async with (
                httpx.AsyncClient(timeout=httpx.Timeout(endpoint.timeout)) as client,
                client.stream("POST", url, json=self.body, headers=endpoint._headers()) as response,
            ):
                if response.status_code >= 400:
                    await response.aread()
                    raise self._status_error(response.status_code, response)
                events = EventSource(response)
                async for event in events.aiter_sse():
                    if event.data.strip() == "[DONE]":
                        break
                    if event.event == "error":
                        raise self._error(f"the server reported an error mid-stream: {event.data}")
                    if event.event not in ("", "message"):
                        continue  # a kind of event this protocol does not define
                    self.chunks += 1
                    text, reason = self._parse(event.data)
                    if text:
                        buffer.put(text)
                        if watch is not None:
                            watch.feed(text)
                            if watch.found:
                                # The answer is over: leaving closes the connection, so the
                                # server stops; the reader side cuts the text itself.
                                control.stop_found.set()
                                return "stop"
                    if reason is not None:
                        finish = reason
        except EndpointError:
            raise
        except httpx.ConnectTimeout as exc:
            raise self._error(
                f"connecting to {_safe_url(url)} timed out after {endpoint.timeout:g} s; check "
                "that the server is reachable, or raise Endpoint(timeout=...)"
            ) from exc
        except httpx.ConnectError as exc:
            raise self._error(
                f"cannot connect to {_safe_url(url)} ({exc}); is the server running, and is "
                "base_url right (it ends in /v1)?"
            ) from exc
        except httpx.ReadTimeout as exc:
            raise self._error(
                f"the server sent nothing for {endpoint.timeout:g} s (Endpoint timeout) after "
                f"{self.chunks} chunks: it is stalled or overloaded; the text so far is in "
                "partial_text. Raise Endpoint(timeout=...) for a slow server"
            ) from exc
        except httpx.TimeoutException as exc:
            raise self._error(f"the request timed out ({type(exc).__name__}: {exc})") from exc
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            if finish is not None:
                # The answer was over; only the closing formalities were lost.
                logger.debug("connection dropped after the finish reason", exc_info=True)
            else:
                raise self._error(
                    f"the connection to the server dropped mid-stream after {self.chunks} "
                    f"chunks ({exc}); the text so far is in partial_text"
                ) from exc
        except SSEError as exc:  # not an event stream at all (an httpx error too)
            raise self._error(
                f"the server did not answer with an event stream ({exc}); check that "
                "base_url points at an OpenAI-compatible API (it ends in /v1)"
            ) from exc
        except httpx.HTTPError as exc:
            raise self._error(f"the request failed: {type(exc).__name__}: {exc}") from exc
        if finish is None:
            raise self._error(
                f"the stream ended after {self.chunks} chunks without a finish_reason: the "
                "server stopped before the answer was over (see its log); the text so far is "
                "in partial_text"
            )
        self.server_finish_reason = finish
        mapped = _FINISH_REASONS.get(finish)
        if mapped is None:
            raise self._error(
                f"the server ended the answer with finish_reason={finish!r}, which is not a "
                "finished text answer; the text so far is in partial_text"
            )
        return mapped

    def _parse(self, data: str) -> tuple[str, str | None]:
        """The text and finish reason of one ``chat.completion.chunk`` event."""
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError as exc:
            raise self._error(
                f"the server sent a malformed event (not JSON: {exc.msg}) after "
                f"{self.chunks - 1} chunks: {data[:120]!r}; the text so far is in partial_text"
            ) from exc
        if not isinstance(chunk, dict):
            raise self._error(f"the server sent a malformed event (not an object): {data[:120]!r}")
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise self._error(f"the server reported an error mid-stream: {message}")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            completion = usage.get("completion_tokens")
            prompt = usage.get("prompt_tokens")
            if isinstance(completion, int):
                self.completion_tokens = completion
            if isinstance(prompt, int):
                self.prompt_tokens = prompt
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise self._error(
                f"the server sent a malformed event (no 'choices' list): {data[:120]!r}"
            )
        text, reason = "", None
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            content = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(content, str):
                text += content
            if choice.get("finish_reason"):
                reason = str(choice["finish_reason"])
        return text, reason

    def _status_error(self, status: int, response: Any) -> EndpointError:
        detail = _error_text(response)
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
                "(GET {base_url}/models lists what the server has)"
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
            sent = [name for name in _EXTENSION_FIELDS if name in self.body]
            hint = "the server rejected the request"
            if sent:
                verb = "is" if len(sent) == 1 else "are"
                hint += (
                    f"; {' and '.join(sent)} {verb} sent as extension fields, which this server "
                    "may not accept: drop them"
                )
        return self._error(f"{said}. {hint[0].upper()}{hint[1:]}", status)

    def _error(self, message: str, status: int | None = None) -> EndpointError:
        return EndpointError(self.endpoint._scrub(message), status)


def _error_text(response: Any) -> str:
    """The server's own words from an error response (OpenAI, FastAPI, TGI or plain text)."""
    try:
        raw = response.text
    except Exception:
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
    if len(text) > _ERROR_TEXT_LIMIT:
        text = text[:_ERROR_TEXT_LIMIT] + "…"
    return text


def _safe_url(url: str) -> str:
    """``url`` without credentials or query string (where keys sometimes travel)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<invalid URL>"
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))
