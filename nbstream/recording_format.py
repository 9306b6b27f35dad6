"""The recording format's names, versions and fields, and the objects a recording is read into.

See :mod:`nbstream.recording` for the format itself; :mod:`nbstream.recording_checks`
reads and checks a file into these objects, and :mod:`nbstream.recording` writes them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

__all__ = [
    "CHAT_FIELDS",
    "CHAT_FORMAT",
    "CHAT_HINT",
    "CHAT_MINOR",
    "FIELDS",
    "FORMAT",
    "HINT",
    "MESSAGE_FIELDS",
    "MINOR",
    "NO_KINDS",
    "SHARED",
    "STATUSES",
    "ChatRecording",
    "RecordedAlternative",
    "RecordedToken",
    "RecordedTurn",
    "Recording",
    "chat_history",
]

#: The format's name and major version: a reader refuses any other.
FORMAT = "nbstream.recording/1"
#: Its minor version: a newer one only adds fields, which an older reader names and skips.
#: Minor 1 added ``kinds`` (how the token views show each special or byte token).
MINOR = 1
#: A chat's transcript: its name and major version, and its minor version.
CHAT_FORMAT = "nbstream.chat/1"
#: Minor 1 stores each answer's prompt by reference to the turns before it (``prompts``).
CHAT_MINOR = 1
FIELDS = (
    "format",
    "minor",
    "nbstream",
    "prompt",
    "prompt_text",
    "thinking_tags",
    "settings",
    "alternatives",
    "text",
    "tokens",
    "record",
    "kinds",
)
CHAT_FIELDS = (
    "format",
    "minor",
    "nbstream",
    "saved_at",
    "system",
    "keep_thinking",
    "settings",
    "messages",
    "prompts",
    "history",
)
#: A chat message's fields (a user message's are the first three).
MESSAGE_FIELDS = (
    "role",
    "content",
    "in_history",
    "status",
    "partial",
    "kept",
    "finish_reason",
    "record",
    "recording",
)
STATUSES = ("complete", "failed", "cancelled")
HINT = "save the run again with run.save(path)"
CHAT_HINT = "save the chat again with chat.save(path)"
#: What a chat document's answer shares with its message and the document, not repeated.
SHARED = ("format", "minor", "nbstream", "prompt", "record")
#: How the token views show a token that is not plain text: ``(kind, shown)``.
_KINDS = ("special", "bytes")
NO_KINDS: Mapping[int, tuple[str, str]] = MappingProxyType({})


class RecordedAlternative(NamedTuple):
    """One of the model's top-k candidates at a recorded step."""

    id: int | None
    text: str
    logprob: float


@dataclass(frozen=True)
class RecordedToken:
    """One recorded token: what it added to the stream, when, and its trace if captured.

    The trace's names are :class:`~nbstream.trace.TokenTrace`'s, so a replay's ``run.trace``
    reads as the original's did (``logprob`` is ``None`` without ``alternatives``).
    """

    #: The token id (``None`` where the run had none: a server's text chunk).
    id: int | None
    #: The text this token added to the stream (thinking tags included).
    piece: str
    #: Seconds after the run got the model that the token arrived.
    time_s: float
    #: The token decoded on its own, as the token views show it.
    text: str
    logprob: float | None = None
    rank: int | None = None
    alternatives: tuple[RecordedAlternative, ...] = ()
    cut: tuple[bool, ...] = ()
    #: The recording's token kinds (``Recording.kinds``), shared by its tokens.
    kinds: Mapping[int, tuple[str, str]] = field(
        default_factory=lambda: NO_KINDS, compare=False, repr=False
    )

    def shown(self, token_id: int | None = None) -> tuple[str, str]:
        """``(shown, kind)``: how the token views show this token, or its alternative ``token_id``.

        As :meth:`nbstream.trace.TokenTrace.shown`: the text, a special token as itself, or
        a token holding part of a character as its bytes in hex (kind ``"bytes"``).

        Example::

            >>> step = nbstream.load("answer.json").tokens[0]
            >>> step.shown()
            ('The', 'text')
        """
        asked = self.id if token_id is None else token_id
        entry = None if asked is None else self.kinds.get(asked)
        if entry is not None:
            return entry[1], entry[0]
        if token_id is None or token_id == self.id:
            return self.text, "text"
        text = next((alt.text for alt in self.alternatives if alt.id == token_id), "")
        return text, "text"

    @property
    def prob(self) -> float | None:
        """``exp(logprob)``: the model's probability for this token."""
        return None if self.logprob is None else math.exp(self.logprob)

    @property
    def alternative_ids(self) -> tuple[int | None, ...]:
        """The alternatives' ids, best first."""
        return tuple(alt.id for alt in self.alternatives)

    @property
    def alternative_logprobs(self) -> tuple[float, ...]:
        """The alternatives' log-probabilities."""
        return tuple(alt.logprob for alt in self.alternatives)


@dataclass(frozen=True)
class Recording:
    """A loaded recording (:func:`load`): one run as it was shown, ready to replay.

    Args:
        prompt: The prompt as given (a string or a list of messages).
        prompt_text: The exact text the model saw, if known.
        thinking_tags: The tags the run split its thinking with (``None``: off).
        settings: The settings a replay applies (stop strings, ``expect``, ...).
        alternatives: The ``k`` of ``alternatives=k`` (0: no trace recorded).
        text: The answer's text, as the run ended.
        tokens: Every recorded token, in order.
        record: The run's ``record``.
        version: The nbstream version that wrote it.

    Example::

        >>> recording = nbstream.load("answer.json")
        >>> recording.status, recording.finish_reason, len(recording.tokens)
        ('complete', 'eos', 12)
    """

    prompt: Any
    prompt_text: str | None
    thinking_tags: tuple[str, str] | None
    settings: dict[str, Any]
    alternatives: int
    text: str
    tokens: tuple[RecordedToken, ...]
    record: dict[str, Any]
    version: str | None = None
    #: Token id -> ``(kind, shown)`` for each special or byte token of the trace (see the
    #: module); an id not here is shown as its text.
    kinds: Mapping[int, tuple[str, str]] = field(default_factory=lambda: NO_KINDS, compare=False)

    @property
    def status(self) -> str:
        """How the run ended: ``"complete"``, ``"failed"`` or ``"cancelled"``."""
        return str(self.record["status"])

    @property
    def metrics(self) -> dict[str, Any]:
        """The run's metrics as they were at its end."""
        return dict(self.record["metrics"])

    @property
    def finish_reason(self) -> str | None:
        """The run's finish reason (``metrics["finish_reason"]``)."""
        reason = self.record["metrics"].get("finish_reason")
        return None if reason is None else str(reason)

    @property
    def cancel_reason(self) -> str | None:
        """Why a cancelled run was stopped, if it was said."""
        reason = self.record.get("cancel_reason")
        return None if reason is None else str(reason)

    @property
    def error(self) -> dict[str, str] | None:
        """A failed run's error: ``{"type", "message"}``."""
        error = self.record.get("error")
        return None if error is None else dict(error)

    @property
    def thinking(self) -> str | None:
        """A reasoning model's thinking (``None``: it did not think)."""
        thinking = self.record.get("thinking")
        return None if thinking is None else str(thinking)

    @property
    def token_ids(self) -> list[int]:
        """The recorded token ids (empty where the run had none)."""
        return [token.id for token in self.tokens if token.id is not None]

    @property
    def trace(self) -> list[RecordedToken] | None:
        """The recorded trace (``None`` unless the run had ``alternatives=k``)."""
        return list(self.tokens) if self.alternatives else None

    @property
    def duration_s(self) -> float:
        """When the last token arrived, in seconds after the run got the model."""
        return self.tokens[-1].time_s if self.tokens else 0.0


@dataclass(frozen=True)
class RecordedTurn:
    """One turn of a recorded chat: the user's message and the answer to it.

    Args:
        user: The user's message.
        answer: The answer's text, as the chat showed it.
        recording: The answer's run (``None``: an answer given as text, in a seeded history).
        kept: Whether a stopped or failed answer was kept in the conversation on purpose.
    """

    user: str
    answer: str
    recording: Recording | None = None
    kept: bool = False

    @property
    def status(self) -> str:
        """How the answer ended (``"complete"`` for an answer given as text)."""
        return "complete" if self.recording is None else self.recording.status

    @property
    def in_history(self) -> bool:
        """Whether the next answer got this turn: it completed, or its partial was kept."""
        return self.status == "complete" or self.kept


@dataclass(frozen=True)
class ChatRecording:
    """A loaded chat (:func:`load` of a ``ChatWidget.save`` file): every turn, ready to replay.

    ``ChatWidget(recording)`` replays it turn by turn, without a model;
    ``ChatWidget(model, tokenizer, history=recording)`` resumes it on a model.

    Args:
        system: The system message (``None``: the chat template's default).
        keep_thinking: Whether a reasoning model's thinking went back to it in the history.
        settings: The chat's settings when it was saved.
        turns: Every turn, in order.
        version: The nbstream version that wrote it.

    Example::

        >>> chat = nbstream.load("lesson.json")
        >>> len(chat.turns), chat.turns[0].user, chat.history[-1]["role"]
        (2, 'Name two colors.', 'assistant')
    """

    system: str | None
    keep_thinking: bool
    settings: dict[str, Any]
    turns: tuple[RecordedTurn, ...]
    version: str | None = None

    @property
    def history(self) -> list[dict[str, str]]:
        """What the next answer would get: the shared rules of :mod:`nbstream.conversation`."""
        return chat_history(self.system, self.keep_thinking, self.turns)

    @property
    def recordings(self) -> list[Recording]:
        """The recorded answers' runs, in order (an answer given as text has none)."""
        return [turn.recording for turn in self.turns if turn.recording is not None]

    @property
    def prompt(self) -> Any:
        """The messages the first recorded answer was asked with (``None``: none recorded)."""
        runs = self.recordings
        return runs[0].prompt if runs else None


def chat_history(
    system: str | None, keep_thinking: bool, turns: Sequence[RecordedTurn]
) -> list[dict[str, str]]:
    """The messages an answer after ``turns`` gets (``ChatRecording.history``'s rules)."""
    history = [] if system is None else [{"role": "system", "content": system}]
    for turn in turns:
        if turn.in_history:
            history.append({"role": "user", "content": turn.user})
            history.append({"role": "assistant", "content": _answer_of(turn, keep_thinking)})
    return history


def _answer_of(turn: RecordedTurn, keep_thinking: bool) -> str:
    run = turn.recording
    if not keep_thinking or run is None or run.thinking is None or run.thinking_tags is None:
        return turn.answer
    opening, closing = run.thinking_tags
    return f"{opening}{run.thinking}{closing}\n\n{turn.answer}"
