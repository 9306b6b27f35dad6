"""What a failed request to a server says: :class:`EndpointError` and the words of its messages.

Every message here names what to check or do, and quotes a server only through the
Endpoint's :class:`~nbstream.backends.remote.secret.Credentials`, which blot out the API key.
"""

from __future__ import annotations

import json
import logging
import traceback
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from ..servers import EXTENSION_SETTINGS
from .secret import Credentials, safe_url

__all__ = [
    "ERROR_TEXT_LIMIT",
    "EndpointError",
    "answer_end",
    "broken_message",
    "error_text",
    "not_an_answer",
    "prompt_size",
    "redirect_message",
    "request_message",
    "shown_error",
    "status_message",
    "unfinished_message",
    "why_cut",
]

logger = logging.getLogger(__name__)

#: How much of a server's error text goes into a message.
ERROR_TEXT_LIMIT = 500
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
#: The most top_logprobs OpenAI's API and vLLM (its default --max-logprobs) take.
_USUAL_MAX_LOGPROBS = 20


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


def shown_error(error: Exception, credentials: Credentials) -> Exception:
    """``error`` as a run may keep and show it.

    Itself if nothing in it, its chain, its notes or its traceback quotes the key; else an
    :class:`EndpointError` with its words scrubbed and its chain left out (an exception's text
    cannot be rewritten in place).

    Every error of a run on an endpoint passes through here on its way out of the job:
    ``run.error``, the record, the traceback, the widget and the log all get what this
    returns.
    """
    if not credentials.keyed:
        return error
    full = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    if credentials.scrub(full) == full:
        return error
    if isinstance(error, EndpointError):
        words, status = str(error), error.status
    else:
        words, status = f"the request failed: {type(error).__name__}: {error}", None
    notes = getattr(error, "__notes__", None)
    if isinstance(notes, list):
        words += "".join(f"; {note}" for note in notes)
    message = (
        credentials.scrub(words) + " (the original exception is not kept: it quoted the API key)"
    )
    return EndpointError(message, status)


def error_text(raw: str | None, response: Any, credentials: Credentials) -> str:
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
    return credentials.quote(text, ERROR_TEXT_LIMIT)


def redirect_message(response: Any, path: str, credentials: Credentials) -> str:
    """Why a 3xx fails the run: nbstream follows no redirect, and says where it pointed.

    ``path``: the request's, under base_url (what a suggested base_url leaves out).
    """
    status = response.status_code
    url = safe_url(str(response.request.url))
    location = response.headers.get("location")
    if not location:
        where = "without saying where to (no Location header)"
        hint = "check base_url"
    else:
        target = urllib.parse.urljoin(str(response.request.url), location)
        shown = credentials.scrub(safe_url(target))
        where = f"to {shown}"
        if urllib.parse.urlsplit(target).query:
            where += " (its query string not shown)"
        suggested = shown.removesuffix(path)
        hint = (
            "use the final URL as base_url"
            + (f": base_url={suggested!r}" if suggested != shown else "")
            + " (with the query string the server asks for, if any)"
        )
    return (
        f"HTTP {status} from {url}: the server redirects {where}. nbstream follows no "
        "redirect, since the Authorization header (the API key) would not be sent on to "
        f"another address; {hint}"
    )


def status_message(
    response: Any,
    body: str | None,
    credentials: Credentials,
    base_url: str,
    settings: Mapping[str, Any],
    title: str,
) -> str:
    """Why an HTTP error status fails the run: the server's words, then what to check.

    Args:
        response (Any): The response (httpx's), its status 400 or more.
        body (str | None): The start of its body, None if it could not be read.
        credentials (Credentials): The Endpoint's, which quote the server.
        base_url (str): The Endpoint's.
        settings (Mapping): The run's settings.
        title (str): The server family whose field names the request used.
    """
    status = response.status_code
    detail = error_text(body, response, credentials)
    url = safe_url(str(response.request.url))
    said = f"HTTP {status} from {url}: {detail}"
    if status in (401, 403):
        hint = (
            "the server refused the API key; pass the right one as Endpoint(api_key=...)"
            if credentials.keyed
            else "the server wants an API key; pass it as Endpoint(api_key=...)"
        )
    elif status == 404:
        hint = (
            "check base_url (it ends in /v1, e.g. http://host:8000/v1) and the model name "
            f"(GET {safe_url(base_url)}/models lists what the server has)"
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
        hint = _rejected_hint(settings, title)
    return f"{said}. {hint[0].upper()}{hint[1:]}"


def _rejected_hint(settings: Mapping[str, Any], title: str) -> str:
    """What to check when the server rejected the request (a 4xx without its own hint)."""
    sent = [name for name in EXTENSION_SETTINGS if settings.get(name) is not None]
    hint = "the server rejected the request"
    if sent:
        verb = "is" if len(sent) == 1 else "are"
        hint += (
            f"; {' and '.join(sent)} {verb} sent as extension fields "
            f"({title}'s names), which this server may not accept: "
            "drop them, or name the server with Endpoint(server=...)"
        )
    asked = settings.get("alternatives") or 0
    if asked > _USUAL_MAX_LOGPROBS:
        hint += (
            f"; alternatives={asked} is sent as the server's logprobs count, and many "
            f"servers take at most {_USUAL_MAX_LOGPROBS} (OpenAI; vLLM's "
            "--max-logprobs): ask for fewer"
        )
    return hint


def answer_end(finish: str) -> str | None:
    """The engine's name for the finish reason that ended an answer; None: it ended none."""
    return _FINISH_REASONS.get(finish)


def not_an_answer(finish: str) -> str:
    """Why a finish reason that ends no text answer fails the run."""
    said = _NOT_AN_ANSWER.get(
        finish,
        "the server ended the answer with a finish_reason nbstream does not know as "
        "the end of a text answer",
    )
    return f"{said} (finish_reason={finish!r}); the text so far is in partial_text"


def broken_message(exc: Exception, why: str, chunks: int, timeout: float) -> str:
    """Why a stream that broke off before its finish reason failed, after ``chunks`` chunks.

    ``exc``: httpx's error; ``why``: its likely cause (:func:`why_cut`); ``timeout``: the
    Endpoint's.
    """
    import httpx

    if isinstance(exc, httpx.ReadTimeout):
        return (
            f"the server sent nothing for {timeout:g} s (Endpoint timeout) "
            f"after {chunks} chunks: it is stalled or overloaded; the text so far is "
            "in partial_text. Raise Endpoint(timeout=...) for a slow server"
        )
    return (
        f"the connection to the server dropped mid-stream after {chunks} chunks "
        f"({exc}){why}; the text so far is in partial_text"
    )


def why_cut(others: int, text_chunks: int, size: Callable[[], str]) -> str:
    """The likely cause of a stream that ended before its finish reason.

    As a clause (``"; ..."``), or where to look.

    Args:
        others (int): Requests to the same server started while this one streamed.
        text_chunks (int): The chunks of text that came.
        size (Callable): The prompt's size in words (:func:`prompt_size`), asked only
            where it is the likely cause.
    """
    if others > 0:
        started = "another request" if others == 1 else f"{others} other requests"
        return (
            f"; {started} to the same server started while this one streamed, and some "
            "servers (llama-cpp-python's) end the stream in progress when a new request "
            "arrives: run one request at a time with Endpoint(..., concurrent=False)"
        )
    if text_chunks == 0:
        return "; no text came at all: the prompt may be longer than the server's " + (
            f"context ({size()}); shorten it, or raise the server's context "
            "size (llama-cpp-python: --n_ctx; llama-server: --ctx-size), and see its log"
        )
    return " (see its log)"


def prompt_size(
    messages: list[dict[str, Any]], tokens: int | None, tokenizer: Any, context: int | None
) -> str:
    """The prompt's length for a message: characters, and tokens where they can be had.

    Args:
        messages (list): The conversation sent.
        tokens (int | None): The server's count of its tokens, if it sent one.
        tokenizer (Any): The Endpoint's tokenizer, which counts them otherwise (or None).
        context (int | None): The server's context size, if it said.
    """
    chars = sum(len(m["content"]) for m in messages)
    said = [f"the prompt is {chars:,} characters"]
    if tokens is None and tokenizer is not None:
        try:
            tokens = len(
                tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
            )
        except Exception:  # a tokenizer without a chat template: the characters will do
            logger.debug("could not count the prompt's tokens", exc_info=True)
    if tokens is not None:
        said.append(f"{tokens:,} tokens")
    if context is not None:
        said.append(f"the server's context is {context:,} tokens")
    return ", ".join(said)


def request_message(exc: Exception, url: str, timeout: float) -> str:
    """Why a request that ``exc`` (httpx's, not a broken stream's) ended failed the run.

    ``url``: the request's; ``timeout``: the Endpoint's.
    """
    import httpx

    if isinstance(exc, httpx.ConnectTimeout):
        return (
            f"connecting to {safe_url(url)} timed out after {timeout:g} s; check "
            "that the server is reachable, or raise Endpoint(timeout=...)"
        )
    if isinstance(exc, httpx.ConnectError):
        return (
            f"cannot connect to {safe_url(url)} ({exc}); is the server running, and is "
            "base_url right (it ends in /v1)?"
        )
    if isinstance(exc, httpx.TimeoutException):
        return f"the request timed out ({type(exc).__name__}: {exc})"
    return f"the request failed: {type(exc).__name__}: {exc}"


def unfinished_message(chunks: int, why: str) -> str:
    """Why a stream that ended without a finish reason, after ``chunks`` chunks, failed the run.

    ``why``: its likely cause (:func:`why_cut`).
    """
    return (
        f"the stream ended after {chunks} chunks without a finish_reason: the "
        f"server stopped before the answer was over{why}; the text so far "
        "is in partial_text"
    )
