"""The chunks of a streamed chat-completions answer: its text, its end, and what else they say.

A chunk carries a piece of the answer (or of a reasoning model's thinking, in a field of its
own), maybe its finish reason, the model that answered, the usage, and the logprobs asked
for. :class:`ChunkReader` reads one event at a time for a run's job (a ``RemoteJob``) and
fills in what its record and metrics say.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from .errors import ERROR_TEXT_LIMIT, EndpointError
from .logprobs import RemoteTraceCapture
from .secret import Credentials
from .transport import EVENT_TEXT_LIMIT

__all__ = ["Answer", "ChunkReader"]

logger = logging.getLogger(__name__)


class Answer(Protocol):
    """What a :class:`ChunkReader` fills in: the run's job (a RemoteJob) as the chunks come."""

    #: ``/chat/completions``, or ``/completions`` (its chunks carry ``text``, not a delta).
    path: str
    chunks: int
    completion_tokens: int | None
    prompt_tokens: int | None
    answered_by: list[str]
    warnings: list[str]
    trace_capture: RemoteTraceCapture | None


class ChunkReader:
    """Reads the events of one answer's stream into its job.

    Args:
        job (Answer): The run's job: its counts, usage, model names, warnings and trace.
        model (str): The model name asked for.
        credentials (Credentials): The Endpoint's: what the server says is quoted scrubbed.
        thinking_tags (tuple[str, str]): What a reasoning field's text is put between.

    Example:
        >>> reader = ChunkReader(job, "m", Credentials(None), ("<think>", "</think>"))
        >>> reader.event("message", '{"choices": [{"delta": {"content": "Hi"}}]}')
        ('Hi', None)
    """

    def __init__(
        self, job: Answer, model: str, credentials: Credentials, thinking_tags: tuple[str, str]
    ) -> None:
        self._job = job
        self._model = model
        self._credentials = credentials
        self._thinking_tags = thinking_tags
        #: Whether a chunk carried usage (which may still lack completion_tokens).
        self.usage_seen = False
        # A reasoning parser's separate field (vLLM, SGLang, DeepSeek-style servers) goes
        # into the text between the run's thinking tags, so that the reader side keeps it
        # apart as it does a local model's: None (none yet), "open", then "closed".
        self._reasoning: str | None = None

    def tokens_note(self, finish: str | None, text_chunks: int) -> str | None:
        """Why the run's ``tokens`` metric is None, in words a metrics line can show.

        None when it is not. ``finish``: the server's finish reason once the stream has ended
        with it; ``text_chunks``: the chunks that carried text.
        """
        if self._job.completion_tokens is not None:
            return None
        if finish is None:
            return (
                "no token count: a server sends its count (usage) only after the end of the "
                f"answer, which has not come; {text_chunks} chunks of text (chunks are "
                "not tokens)"
            )
        if self.usage_seen:
            return "the server's usage gave no completion_tokens"
        return (
            "the server sent no token count (it ignores stream_options.include_usage); "
            f"{text_chunks} chunks of text (chunks are not tokens)"
        )

    def event(self, kind: str, data: str) -> tuple[str, str | None] | None:
        """The text and finish reason of one event (``kind``, ``data``).

        None for an event that is no chunk of the answer.
        """
        if kind == "error":
            raise self._error(
                "the server reported an error mid-stream: "
                f"{self._credentials.quote(data, ERROR_TEXT_LIMIT)}"
            )
        if kind != "message":
            return None  # a kind of event this protocol does not define
        if not data.strip():
            return None  # an event with no data ("data:" alone) is no chunk
        self._job.chunks += 1
        return self._parse(data)

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
                f"{self._credentials.quote(str(message), ERROR_TEXT_LIMIT)}"
            )
        return chunk

    def _note_chunk(self, chunk: dict[str, Any]) -> None:
        """Keep what a chunk says besides its text: the model that answered, the usage."""
        model = chunk.get("model")
        if isinstance(model, str) and model:
            model = self._credentials.scrub(model)  # kept in the record: never a piece of the key
            if model not in self._job.answered_by:
                self._answered(model)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage_seen = True
            completion = usage.get("completion_tokens")
            prompt = usage.get("prompt_tokens")
            if _is_count(completion):
                self._job.completion_tokens = completion
            if _is_count(prompt):
                self._job.prompt_tokens = prompt

    def _choice(self, choice: dict[str, Any], data: str) -> tuple[str, str | None]:
        """The text and the finish reason of one choice of the chunk in ``data``.

        The text includes a reasoning field's, between the thinking tags; its logprobs go to the
        trace.
        """
        delta = choice.get("delta")
        if self._job.path == "/completions":
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
        if self._job.trace_capture is not None and (
            content or reasoning or choice.get("logprobs") is not None
        ):
            self._job.trace_capture.add(choice.get("logprobs"), content or "", bool(reasoning))
        return text, finished

    def _thinking_opens(self) -> str:
        if self._reasoning is None:
            self._reasoning = "open"
            return self._thinking_tags[0]
        return ""

    def _thinking_closes(self) -> str:
        if self._reasoning == "open":
            self._reasoning = "closed"
            return self._thinking_tags[1]
        return ""

    def _answered(self, model: str) -> None:
        """Keep the model name a chunk carried; warn when it is not the one asked for."""
        self._job.answered_by.append(model)
        asked = self._model
        # ``model`` comes scrubbed of the key: a name that shares a piece with the key is
        # compared as scrubbed the same way.
        if model in (asked, self._credentials.scrub(asked)):
            return
        said = self._credentials.quote(model, EVENT_TEXT_LIMIT)
        warning = (
            f"asked for model {self._credentials.quote(asked, EVENT_TEXT_LIMIT)!r}, but the server "
            f"answered as {said!r}: the text is that model's (a server with one model may "
            "answer any name with it)"
        )
        self._job.warnings.append(warning)
        logger.warning("%s", warning)

    def _malformed(self, what: str, data: str) -> EndpointError:
        quoted = self._credentials.quote(data, EVENT_TEXT_LIMIT)
        return self._error(
            f"the server sent a malformed event ({what}) after {self._job.chunks - 1} chunks: "
            f"{quoted!r}; the text so far is in partial_text"
        )

    def _error(self, message: str) -> EndpointError:
        # Scrubbed here already, so that the message is clean from the moment it exists;
        # errors.shown_error checks the whole of it (chain included) on the way out.
        return EndpointError(self._credentials.scrub(message))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
