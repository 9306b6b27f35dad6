"""A recording of one run: everything it showed, in one versioned JSON document.

``run.save(path)`` writes it, :func:`load` reads it back as a :class:`Recording`, and
``nbstream.replay(recording)`` streams it again as a run, without the model. The format
(``"nbstream.recording/1"``) is documented in the guide's "Recordings" page:

- ``record``: the run's :attr:`~nbstream.Generation.record`, as it is (its status, metrics,
  error, ``cancel_reason`` and thinking are read from there, never stored twice);
- ``tokens``: one list per token, ``[id, piece, ms]`` (``id`` null where unknown, ``piece``
  the text it added to the stream, ``ms`` its arrival in milliseconds after the run got the
  model), and with ``alternatives=k`` five more columns: ``logprob``, ``rank``,
  ``alternatives`` (``[[id, text, logprob], ...]``), ``cut`` (0/1 per alternative) and the
  token's own ``text`` (null where it equals ``piece``); log-probabilities to 4 decimals;
- ``text``, ``prompt_text``, ``thinking_tags`` and ``settings``: what a replay needs to show
  the same answer the same way (``text`` is what the tokens give through the thinking tags
  and stop strings, checked on load);
- ``kinds`` (minor 1): the token ids of the trace that the token views show as something
  other than their text, ``[id, "special"]`` (a special token, shown as itself) or ``[id,
  "bytes", "e4 bd"]`` (a token holding part of a character, shown as its bytes in hex);
  absent or empty: every token is text, as a minor 0 file is read.

A chat's transcript (``ChatWidget.save(path)``, the terminal chat's ``/save``) is a second
kind of document, ``"nbstream.chat/1"``: the system message, the settings, and every
message, each answer with its run's ``record`` and its ``recording`` (the fields above but
``format``, ``minor``, ``nbstream``, ``prompt`` and ``record``, which it shares with its
message and the document). Each prompt is stored once: ``prompts`` says, per turn, how
its answer's prompt and prompt text are rebuilt from the turns before it (minor 1; minor
0 stored them whole in every answer, and still loads). :func:`load` reads either: a
:class:`Recording` or a :class:`ChatRecording`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from os import PathLike
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from ._version import __version__
from .settings import SETTINGS, validate_settings
from .streaming import StopFilter, ThinkingSplitter

__all__ = [
    "CHAT_FORMAT",
    "CHAT_MINOR",
    "FORMAT",
    "MAX_BYTES",
    "MAX_TOKENS",
    "MINOR",
    "ChatRecording",
    "RecordedAlternative",
    "RecordedToken",
    "RecordedTurn",
    "Recording",
    "as_recording",
    "chat_document",
    "from_run",
    "load",
    "save",
    "save_chat",
    "save_run",
]

logger = logging.getLogger(__name__)

#: The format's name and major version: a reader refuses any other.
FORMAT = "nbstream.recording/1"
#: Its minor version: a newer one only adds fields, which an older reader names and skips.
#: Minor 1 added ``kinds`` (how the token views show each special or byte token).
MINOR = 1
#: A chat's transcript: its name and major version, and its minor version.
CHAT_FORMAT = "nbstream.chat/1"
#: Minor 1 stores each answer's prompt by reference to the turns before it (``prompts``).
CHAT_MINOR = 1
#: The largest file :func:`load` reads. A 500-token run with 5 alternatives is ~0.1 MiB, so
#: 16 MiB holds about 80,000 such tokens; loading a file at the limit takes a few seconds
#: and about 150 MiB (``benchmarks/recording_load.py``), which a 2 GB Binder can spare.
MAX_BYTES = 16 * 1024 * 1024
#: The most tokens a recording may hold.
MAX_TOKENS = 200_000
#: How deeply a recording's prompt, settings and record may nest (a prompt of messages with
#: parts is 4 levels): deeper is no recording nbstream wrote.
MAX_DEPTH = 32
#: The latest a token may arrive, in milliseconds after the run got the model (a week).
MAX_TOKEN_MS = 7 * 24 * 3600 * 1000
_TOO_LARGE = (
    "a recording for a lesson is far smaller (a 500-token run with 5 alternatives is "
    "~0.1 MiB); save a shorter run, or one with fewer alternatives"
)
_FIELDS = (
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
_CHAT_FIELDS = (
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
_MESSAGE_FIELDS = (
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
_STATUSES = ("complete", "failed", "cancelled")
_HINT = "save the run again with run.save(path)"
_CHAT_HINT = "save the chat again with chat.save(path)"
#: What a chat document's answer shares with its message and the document, not repeated.
_SHARED = ("format", "minor", "nbstream", "prompt", "record")
#: How the token views show a token that is not plain text: ``(kind, shown)``.
_KINDS = ("special", "bytes")
_NO_KINDS: Mapping[int, tuple[str, str]] = MappingProxyType({})


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
        default_factory=lambda: _NO_KINDS, compare=False, repr=False
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
    kinds: Mapping[int, tuple[str, str]] = field(default_factory=lambda: _NO_KINDS, compare=False)

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
        return _history(self.system, self.keep_thinking, self.turns)

    @property
    def recordings(self) -> list[Recording]:
        """The recorded answers' runs, in order (an answer given as text has none)."""
        return [turn.recording for turn in self.turns if turn.recording is not None]

    @property
    def prompt(self) -> Any:
        """The messages the first recorded answer was asked with (``None``: none recorded)."""
        runs = self.recordings
        return runs[0].prompt if runs else None


def _history(
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


# -- writing ---------------------------------------------------------------------------------
def _token_row(token: RecordedToken, traced: bool) -> list[Any]:
    row: list[Any] = [token.id, token.piece, round(token.time_s * 1000)]
    if traced:
        logprob = None if token.logprob is None else round(token.logprob, 4)
        alts = [[alt.id, alt.text, round(alt.logprob, 4)] for alt in token.alternatives]
        cut = [int(flag) for flag in token.cut]
        text = None if token.text == token.piece else token.text
        row += [logprob, token.rank, alts, cut, text]
    return row


def _kinds_of(steps: Sequence[Any]) -> dict[int, tuple[str, str]]:
    """Token id -> ``(kind, shown)`` of each traced token or alternative that is not text."""
    kinds: dict[int, tuple[str, str]] = {}
    seen: set[int] = set()
    for step in steps:
        for token_id in (step.id, *step.alternative_ids):
            if token_id is None or token_id in seen:
                continue
            seen.add(token_id)
            shown, kind = step.shown(token_id)
            if kind != "text":
                kinds[token_id] = (kind, shown)
    return kinds


def _tokens_of(run: Any, pieces: Sequence[str], times: Sequence[float]) -> list[RecordedToken]:
    """The run's tokens: its pieces and times, and its trace where it has one with ids."""
    ids: list[int | None] = list(run.token_ids)
    if len(ids) != len(pieces):
        ids = [None] * len(pieces)  # a server's chunks: text, no ids
    trace = run.trace
    steps = list(trace) if trace is not None and all(step.id is not None for step in trace) else []
    kinds = MappingProxyType(_kinds_of(steps[: len(pieces)]))
    tokens = []
    for index, (token_id, piece, at) in enumerate(zip(ids, pieces, times, strict=True)):
        step = steps[index] if index < len(steps) else None
        if step is None:
            tokens.append(RecordedToken(token_id, piece, at, piece))
            continue
        alternatives = tuple(RecordedAlternative(*alt) for alt in step.alternatives)
        tokens.append(
            RecordedToken(
                token_id, piece, at, step.text, step.logprob, step.rank, alternatives,
                tuple(bool(flag) for flag in step.cut), kinds,
            )
        )  # fmt: skip
    return tokens


def from_run(run: Any, *, pieces: Sequence[str], times: Sequence[float]) -> Recording:
    """The recording of ``run``, in memory; call it as ``run.to_recording()``.

    Args:
        run: A run that has ended (a :class:`~nbstream.Generation`).
        pieces: The text each token added to the stream, in order (the run knows them).
        times: When each arrived, in seconds after the run got the model.

    Returns:
        What :func:`load` would read back from ``run.save(path)`` (times not yet rounded).

    Raises:
        RuntimeError: The run has not ended.

    Example::

        >>> run.to_recording().text == run.partial_text
        True
    """
    record = run.record
    if record is None:
        raise RuntimeError("this run has not ended: wait() for it, or stop() it, before saving")
    alternatives = int(run.settings.get("alternatives") or 0)
    tokens = _tokens_of(run, pieces, times)
    traced = alternatives > 0 and any(token.logprob is not None for token in tokens)
    return Recording(
        prompt=run.prompt,
        prompt_text=run.prompt_text,
        thinking_tags=None if run.thinking_tags is None else tuple(run.thinking_tags),
        settings={k: v for k, v in run.settings.items() if k != "budget_s"},
        alternatives=alternatives if traced else 0,
        text=run.partial_text,
        tokens=tuple(tokens),
        record=record,
        version=__version__,
        kinds=tokens[0].kinds if traced else _NO_KINDS,
    )


def _document(recording: Recording) -> dict[str, Any]:
    traced = recording.alternatives > 0
    tags = recording.thinking_tags
    return {
        "format": FORMAT,
        "minor": MINOR,
        "nbstream": __version__,
        "prompt": recording.prompt,
        "prompt_text": recording.prompt_text,
        "thinking_tags": None if tags is None else list(tags),
        "settings": recording.settings,
        "alternatives": recording.alternatives,
        "text": recording.text,
        "tokens": [_token_row(token, traced) for token in recording.tokens],
        "record": recording.record,
        "kinds": [
            [token_id, kind] if kind == "special" else [token_id, kind, shown]
            for token_id, (kind, shown) in sorted(recording.kinds.items())
        ],
    }


def _write(document: dict[str, Any], path: str | PathLike[str]) -> Path:
    target = Path(path)
    data = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    # A file that load() would refuse is no recording: say so now, while the run is at hand,
    # not in class. Nothing is written.
    if len(data) > MAX_BYTES:
        raise ValueError(
            f"not saved to {target}: this recording is {len(data)} bytes, over the "
            f"{MAX_BYTES}-byte limit of nbstream.load; {_TOO_LARGE}"
        )
    target.write_bytes(data)
    return target


def save(
    run: Any, path: str | PathLike[str], *, pieces: Sequence[str], times: Sequence[float]
) -> Path:
    """Write ``run``'s recording to ``path`` (JSON); call it as ``run.save(path)``.

    Args:
        run: A run that has ended (a :class:`~nbstream.Generation`).
        path: Where to write it.
        pieces: The text each token added to the stream, in order (the run knows them).
        times: When each arrived, in seconds after the run got the model.

    Returns:
        The path written.

    Raises:
        RuntimeError: The run has not ended.
        ValueError: The file would be over :data:`MAX_BYTES` (nothing is written).

    Example::

        >>> run.save("answer.json")
        PosixPath('answer.json')
    """
    return _write(_document(from_run(run, pieces=pieces, times=times)), path)


def save_run(recording: Recording, path: str | PathLike[str]) -> Path:
    """Write a run's recording to ``path`` (JSON); ``run.save(path)`` calls it.

    Args:
        recording: The recording (``run.to_recording()``, or a loaded one).
        path: Where to write it.

    Returns:
        The path written.

    Example::

        >>> save_run(nbstream.load("answer.json"), "copy.json")
        PosixPath('copy.json')
    """
    return _write(_document(recording), path)


def _shared_messages(before: list[dict[str, str]], prompt: Any) -> int:
    """How many of ``prompt``'s first messages are the history's first ones."""
    if not isinstance(prompt, list):
        return 0
    shared = 0
    for earlier, message in zip(before, prompt, strict=False):
        if earlier != message:
            break
        shared += 1
    return shared


def _shared_chars(earlier: str, text: str) -> int:
    """How many of ``text``'s first characters are ``earlier``'s first ones."""
    if text.startswith(earlier):  # a chat's next prompt: the one before, and more
        return len(earlier)
    shared = 0
    for a, b in zip(earlier, text, strict=False):
        if a != b:
            break
        shared += 1
    return shared


def _answer_message(
    turn: RecordedTurn, before: list[dict[str, str]], earlier: tuple[int, str] | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """An answer as the document holds it, and how its prompt is rebuilt (``prompts``).

    Its record's prompt keeps only the messages after those it shares with the history
    before the turn (``before``), and its ``prompt_text`` only what follows the part it
    shares with an earlier answer's (``earlier``: that turn's index and prompt text): a
    chat's file grows with each turn's own text, not with the conversation so far.
    """
    run = turn.recording
    message: dict[str, Any] = {
        "role": "assistant",
        "content": turn.answer,
        "status": turn.status,
        "partial": turn.status != "complete",
        "kept": turn.kept,
        "in_history": turn.in_history,
        "finish_reason": None if run is None else run.finish_reason,
        "record": None,
        "recording": None,
    }
    if run is None:
        return message, None
    embedded = {k: v for k, v in _document(run).items() if k not in _SHARED}
    record = dict(run.record)
    shared = _shared_messages(before, record.get("prompt"))
    if shared:
        record["prompt"] = record["prompt"][shared:]
    text_ref = None
    if earlier is not None and run.prompt_text is not None:
        index, earlier_text = earlier
        keep = _shared_chars(earlier_text, run.prompt_text)
        if keep:
            text_ref = [index, keep, run.prompt_text[keep:]]
            embedded["prompt_text"] = None
    message["record"], message["recording"] = record, embedded
    if not shared and text_ref is None:
        return message, None
    return message, {"history": shared, "text": text_ref}


def chat_document(chat: ChatRecording) -> dict[str, Any]:
    """A chat's transcript as the JSON document :func:`save_chat` writes (``nbstream.chat/1``).

    Args:
        chat: The chat: its system message, settings and turns.

    Returns:
        The document: ``format``, ``minor``, ``nbstream``, ``saved_at``, ``system``,
        ``keep_thinking``, ``settings``, ``messages`` (each answer with its ``record`` and
        ``recording``), ``prompts`` (per turn, how its answer's prompt is rebuilt from the
        turns before it, or null) and ``history``.

    Example::

        >>> chat_document(nbstream.load("lesson.json"))["format"]
        'nbstream.chat/1'
    """
    messages: list[dict[str, Any]] = []
    prompts: list[dict[str, Any] | None] = []
    earlier: tuple[int, str] | None = None  # the last answer's prompt text, and its turn
    for index, turn in enumerate(chat.turns):
        used = turn.in_history
        messages.append({"role": "user", "content": turn.user, "in_history": used})
        before = _history(chat.system, chat.keep_thinking, chat.turns[:index])
        answer, prompt = _answer_message(turn, before, earlier)
        messages.append(answer)
        prompts.append(prompt)
        if turn.recording is not None and turn.recording.prompt_text is not None:
            earlier = (index, turn.recording.prompt_text)
    return {
        "format": CHAT_FORMAT,
        "minor": CHAT_MINOR,
        "nbstream": __version__,
        "saved_at": datetime.now(timezone.utc).isoformat(),
        "system": chat.system,
        "keep_thinking": chat.keep_thinking,
        "settings": chat.settings,
        "messages": messages,
        "prompts": prompts,
        "history": chat.history,
    }


def save_chat(chat: ChatRecording, path: str | PathLike[str]) -> Path:
    """Write a chat's transcript to ``path``; call it as ``ChatWidget.save(path)``.

    Args:
        chat: The chat (:class:`ChatRecording`: its turns carry their runs' recordings).
        path: Where to write it.

    Returns:
        The path written.

    Example::

        >>> save_chat(nbstream.load("lesson.json"), "copy.json")
        PosixPath('copy.json')
    """
    return _write(chat_document(chat), path)


# -- reading ---------------------------------------------------------------------------------
class _Refused(Exception):
    """What is wrong with a document; :func:`load` says it with the file's name and a hint."""


def _refuse(path: Path, what: str, hint: str = _HINT) -> ValueError:
    return ValueError(f"{path} is not a recording nbstream can load: {what}; {hint}")


def _read(path: Path) -> Any:
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise _refuse(path, f"it is {size} bytes, over the {MAX_BYTES}-byte limit", _TOO_LARGE)
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read the recording {path}: {exc}") from exc
    if len(data) > MAX_BYTES:
        raise _refuse(path, f"it is over the {MAX_BYTES}-byte limit", _TOO_LARGE)
    try:
        text = data.decode("utf-8")
        del data  # the bytes go before the parse's peak
        return json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _refuse(path, f"it is not complete JSON (truncated or damaged? {exc})") from exc
    except RecursionError:
        raise _refuse(
            path, f"its JSON nests deeper than Python can read (a recording nests at most "
            f"{MAX_DEPTH} levels)"
        ) from None  # fmt: skip


def _kind(document: Any) -> str:
    """``FORMAT`` or ``CHAT_FORMAT``: which kind of document ``document`` is, checked."""
    if not isinstance(document, dict):
        raise _Refused(f"it holds a JSON {type(document).__name__}, not an object")
    found = document.get("format")
    for name in (FORMAT, CHAT_FORMAT):
        family = name.rsplit("/", 1)[0] + "/"
        if isinstance(found, str) and found.startswith(family):
            if found != name:
                raise _Refused(
                    f"its format is {found!r}: this nbstream ({__version__}) reads {name!r}"
                )
            return name
    raise _Refused(f"its format is {found!r:.60}, not {FORMAT!r} or {CHAT_FORMAT!r}")


def _check_minor(path: Path, document: dict[str, Any], fields: Sequence[str], newest: int) -> None:
    # A chat saved by the terminal before chats had recordings has no minor: it is 0.
    default = 0 if document["format"] == CHAT_FORMAT else None
    minor = document.get("minor", default)
    if isinstance(minor, bool) or not isinstance(minor, int) or minor < 0:
        raise _Refused(f"'minor' must be an int >= 0, got {minor!r:.40}")
    unknown = sorted(set(document) - set(fields))
    if unknown:
        newer = f" (written by nbstream {document.get('nbstream')!r:.40}, minor {minor})"
        message = (
            f"{path}: this nbstream ({__version__}) cannot show these fields of the "
            f"recording{newer if minor > newest else ''}: {', '.join(unknown)}; "
            "they are skipped"
        )
        warnings.warn(message, UserWarning, stacklevel=4)


def _check_message_fields(path: Path, document: dict[str, Any]) -> None:
    """Warn, naming them, of message fields a newer minor version added: they are skipped."""
    messages = document.get("messages")
    if not isinstance(messages, list):
        return  # refused with what is wrong when the chat is read
    found = {key for m in messages if isinstance(m, dict) for key in m}
    unknown = sorted(found - set(_MESSAGE_FIELDS))
    if unknown:
        message = (
            f"{path}: this nbstream ({__version__}) cannot show these fields of the chat's "
            f"messages (minor {document.get('minor')!r:.20}): {', '.join(unknown)}; "
            "they are skipped"
        )
        warnings.warn(message, UserWarning, stacklevel=4)


_TYPES: dict[str, tuple[type, ...]] = {
    "prompt": (str, list),
    "prompt_text": (str, type(None)),
    "thinking_tags": (list, type(None)),
    "settings": (dict,),
    "alternatives": (int,),
    "text": (str,),
    "tokens": (list,),
    "record": (dict,),
}
_RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "status": (str,),
    "metrics": (dict,),
    "error": (dict, type(None)),
    "cancel_reason": (str, type(None)),
    "thinking": (str, type(None)),
}


def _check_types(document: dict[str, Any], types: dict[str, tuple[type, ...]]) -> None:
    for name, allowed in types.items():
        if name not in document:
            raise _Refused(f"the field {name!r} is missing")
        if not isinstance(document[name], allowed) or (
            isinstance(document[name], bool) and bool not in allowed
        ):
            kind = type(document[name]).__name__
            raise _Refused(f"the field {name!r} is a {kind}, not {allowed[0].__name__}")


def _too_deep(value: Any) -> bool:
    """Whether ``value`` nests lists and objects more than :data:`MAX_DEPTH` deep."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def _check_settings(settings: dict[str, Any]) -> None:
    """The recorded settings a replay applies, checked as a run's are (others are skipped)."""
    try:
        validate_settings({k: v for k, v in settings.items() if k in SETTINGS})
    except (TypeError, ValueError) as exc:
        raise _Refused(f"its settings are not ones nbstream runs ({exc})") from None


def _check_fields(document: dict[str, Any]) -> None:
    _check_types(document, _TYPES)
    for name in ("prompt", "settings", "record"):
        if _too_deep(document[name]):
            raise _Refused(f"{name!r} nests deeper than {MAX_DEPTH} levels")
    _check_settings(document["settings"])
    record = document["record"]
    for name, types in _RECORD_TYPES.items():
        if not isinstance(record.get(name), types):
            raise _Refused(f"record[{name!r}] is missing or not {types[0].__name__}")
    if record["status"] not in _STATUSES:
        raise _Refused(f"record['status'] is {record['status']!r:.40}, not an end state")
    tags = document["thinking_tags"]
    if tags is not None and (len(tags) != 2 or not all(isinstance(t, str) and t for t in tags)):
        raise _Refused("'thinking_tags' must be two non-empty strings, or null")
    if len(document["tokens"]) > MAX_TOKENS:
        raise _Refused(
            f"it has {len(document['tokens'])} tokens, over the {MAX_TOKENS}-token limit"
        )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _optional_int(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _alternatives(value: Any, texts: dict[str, str]) -> tuple[RecordedAlternative, ...] | None:
    """A row's ``[[id, text, logprob], ...]``, or ``None`` when one is malformed.

    ``texts`` keeps one copy of each text: a file repeats the same few candidates.
    """
    if not isinstance(value, list):
        return None
    alternatives = []
    for alt in value:
        if not (type(alt) is list and len(alt) == 3):
            return None
        token_id, text, logprob = alt
        if not (_optional_int(token_id) and type(text) is str and _number(logprob)):
            return None
        text = texts.setdefault(text, text)
        alternatives.append(RecordedAlternative(token_id, text, float(logprob)))
    return tuple(alternatives)


def _time_s(ms: Any) -> float | None:
    """A token's time in seconds, or ``None`` unless 0 <= ms <= MAX_TOKEN_MS (NaN fails both)."""
    if not _number(ms) or not 0 <= ms <= MAX_TOKEN_MS:
        return None
    return float(ms) / 1000


def _token(row: Any, traced: bool, texts: dict[str, str]) -> RecordedToken | None:
    """The token of one ``tokens`` row, or ``None`` when the row is malformed.

    ``texts`` holds one copy of each alternative's text: a file repeats the same few.
    """
    width = 8 if traced else 3
    if not isinstance(row, list) or len(row) != width:
        return None
    token_id, piece, ms = row[:3]
    time_s = _time_s(ms)
    if not (_optional_int(token_id) and isinstance(piece, str)) or time_s is None:
        return None
    if not traced:
        return RecordedToken(token_id, piece, time_s, piece)
    logprob, rank, alts, cut, text = row[3:]
    alternatives = _alternatives(alts, texts)
    if (
        alternatives is None
        or not (logprob is None or _number(logprob))
        or not _optional_int(rank)
        or not isinstance(cut, list)
        or len(cut) != len(alternatives)  # one flag per alternative
        or not all(flag in (0, 1) and not isinstance(flag, float) for flag in cut)
        or not (text is None or isinstance(text, str))
    ):
        return None
    return RecordedToken(
        token_id, piece, time_s, piece if text is None else text,
        None if logprob is None else float(logprob), rank,
        alternatives, tuple(bool(f) for f in cut),
    )  # fmt: skip


def _kinds(value: Any, texts: Mapping[int, str]) -> dict[int, tuple[str, str]]:
    """``kinds`` read: token id -> ``(kind, shown)`` (``texts``: each id's recorded text)."""
    if value is None:
        return {}
    if not isinstance(value, list):
        raise _Refused("'kinds' must be a list of [id, kind] rows")
    kinds: dict[int, tuple[str, str]] = {}
    for index, row in enumerate(value):
        ok = isinstance(row, list) and len(row) in (2, 3) and _optional_int(row[0])
        if ok and row[0] is not None and row == [row[0], "special"]:
            kinds[row[0]] = ("special", texts.get(row[0], ""))
            continue
        raw = _hex_bytes(row[2]) if ok and len(row) == 3 and row[1] == "bytes" else None
        if raw is None or row[0] is None:
            raise _Refused(
                f"kinds[{index}] is not [id, 'special'] or [id, 'bytes', 'e4 bd']: {row!r:.80}"
            )
        kinds[row[0]] = ("bytes", " ".join(f"{b:02x}" for b in raw))
    return kinds


def _hex_bytes(value: Any) -> bytes | None:
    """The bytes of ``"e4 bd"`` (a token holds a few), or ``None``."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return None
    return raw or None


def _replayed_text(
    pieces: Sequence[str], tags: Sequence[str] | None, prompt_text: str | None, stop: Any
) -> str:
    """The answer a replay shows for ``pieces``: through the thinking tags and stop strings.

    The same steps as a run's reader (``Generation``): the thinking is split off first,
    then the answer is cut at the first stop string; what either held back comes at the end.
    """
    splitter = None
    if tags:
        inside = (prompt_text or "").rstrip().endswith(tags[0])
        splitter = ThinkingSplitter(tags[0], tags[1], inside=inside)
    stops = StopFilter(stop) if stop else None
    chunks: list[str] = []

    def answer(text: str) -> None:
        chunks.append(stops.feed(text) if stops is not None and text else text)

    for piece in pieces:
        if stops is not None and stops.found is not None:
            break
        answer(piece if splitter is None else splitter.feed(piece)[1])
    if stops is None or stops.found is None:
        if splitter is not None:
            answer(splitter.flush()[1])
        if stops is not None and stops.found is None:
            chunks.append(stops.flush())
    return "".join(chunks)


def _recording(document: dict[str, Any]) -> Recording:
    _check_fields(document)
    traced = document["alternatives"] > 0
    rows: list[Any] = document["tokens"]
    tokens = []
    texts: dict[str, str] = {}
    for index, row in enumerate(rows):
        token = _token(row, traced, texts)
        if token is None:
            shape = "[id, piece, ms" + (
                ", logprob, rank, alternatives, cut, text]" if traced else "]"
            )
            raise _Refused(
                f"tokens[{index}] is not {shape} (ms from 0 to {MAX_TOKEN_MS}, one cut flag "
                f"per alternative): {row!r:.80}"
            )
        tokens.append(token)
        rows[index] = None  # the row's lists go as the token comes: half the peak memory
    tags = document["thinking_tags"]
    text = _replayed_text(
        [token.piece for token in tokens], tags, document["prompt_text"],
        document["settings"].get("stop"),
    )  # fmt: skip
    if text != document["text"]:
        raise _Refused(
            f"its 'text' is not what its tokens replay: {document['text']!r:.60} "
            f"({len(document['text'])} characters) against {text!r:.60} ({len(text)})"
        )
    kinds: Mapping[int, tuple[str, str]] = _NO_KINDS
    if document.get("kinds"):
        known = {alt.id: alt.text for t in tokens for alt in t.alternatives if alt.id is not None}
        known.update((t.id, t.text) for t in tokens if t.id is not None)
        kinds = MappingProxyType(_kinds(document["kinds"], known))
        tokens = [dataclasses.replace(token, kinds=kinds) for token in tokens]
    version = document.get("nbstream")
    return Recording(
        prompt=document["prompt"],
        prompt_text=document["prompt_text"],
        thinking_tags=None if tags is None else (tags[0], tags[1]),
        settings=document["settings"],
        alternatives=document["alternatives"],
        text=text,
        tokens=tuple(tokens),
        record=document["record"],
        version=version if isinstance(version, str) else None,
        kinds=kinds,
    )


_CHAT_TYPES: dict[str, tuple[type, ...]] = {
    "system": (str, type(None)),
    "settings": (dict,),
    "messages": (list,),
}
_USER_TYPES: dict[str, tuple[type, ...]] = {"role": (str,), "content": (str,)}
_ANSWER_TYPES: dict[str, tuple[type, ...]] = {
    "role": (str,),
    "content": (str,),
    "status": (str,),
    "kept": (bool,),
}


def _pairs(messages: list[Any]) -> Iterator[tuple[int, dict[str, Any], dict[str, Any]]]:
    """(index of the answer, user message, answer) of each turn, checked for shape."""
    if len(messages) % 2:
        raise _Refused(f"its {len(messages)} messages are not user and assistant pairs")
    for index in range(0, len(messages), 2):
        user, answer = messages[index], messages[index + 1]
        for at, message, role, types in (
            (index, user, "user", _USER_TYPES),
            (index + 1, answer, "assistant", _ANSWER_TYPES),
        ):
            if not isinstance(message, dict):
                raise _Refused(f"messages[{at}] is a {type(message).__name__}, not an object")
            try:
                _check_types(message, types)
            except _Refused as exc:
                raise _Refused(f"messages[{at}]: {exc}") from None
            if message["role"] != role:
                raise _Refused(f"messages[{at}] has role {message['role']!r:.20}, not {role!r}")
        yield index + 1, user, answer


def _turn(at: int, user: dict[str, Any], answer: dict[str, Any]) -> RecordedTurn:
    embedded, record = answer.get("recording"), answer.get("record")
    run = None
    if embedded is not None:
        if not isinstance(embedded, dict) or not isinstance(record, dict):
            raise _Refused(f"messages[{at}]: 'recording' and 'record' must be objects")
        shared = sorted(set(embedded) & set(_SHARED))
        if shared:
            raise _Refused(f"messages[{at}]['recording'] repeats {', '.join(shared)}")
        try:
            run = _recording({**embedded, "prompt": record.get("prompt"), "record": record})
        except _Refused as exc:
            raise _Refused(f"messages[{at}]['recording']: {exc}") from None
        if run.text != answer["content"] or run.status != answer["status"]:
            raise _Refused(
                f"messages[{at}]: its content and status are not its recording's "
                f"({run.status}, {len(run.text)} characters)"
            )
    elif answer["status"] != "complete":
        raise _Refused(f"messages[{at}]: a {answer['status']!r:.20} answer has no recording")
    if answer["kept"] and (run is None or run.status == "complete"):
        raise _Refused(f"messages[{at}]: only a stopped or failed answer can be kept")
    return RecordedTurn(user["content"], answer["content"], run, answer["kept"])


def _with_prompts(
    document: dict[str, Any], keep_thinking: bool, turns: list[RecordedTurn]
) -> list[RecordedTurn]:
    """The turns with their answers' prompts whole again, rebuilt as ``prompts`` says."""
    prompts = document.get("prompts")
    if prompts is None:  # minor 0: every prompt is stored whole
        return turns
    if not isinstance(prompts, list) or len(prompts) != len(turns):
        raise _Refused(f"'prompts' must be a list of one entry per turn ({len(turns)})")
    rebuilt: list[RecordedTurn] = []
    for index, (turn, ref) in enumerate(zip(turns, prompts, strict=True)):
        if ref is not None:
            try:
                turn = _rebuilt_turn(turn, ref, document["system"], keep_thinking, rebuilt)
            except _Refused as exc:
                raise _Refused(f"prompts[{index}]: {exc}") from None
        rebuilt.append(turn)
    return rebuilt


def _rebuilt_turn(
    turn: RecordedTurn,
    ref: Any,
    system: str | None,
    keep_thinking: bool,
    earlier: list[RecordedTurn],
) -> RecordedTurn:
    """``turn`` with its prompt and prompt text rebuilt from the turns before it."""
    run = turn.recording
    if run is None:
        raise _Refused("its answer has no recording to rebuild the prompt of")
    shared = ref.get("history") if isinstance(ref, dict) else None
    if not _optional_int(shared) or shared is None or shared < 0:
        raise _Refused(f"expected {{'history': a count, 'text': ...}}, got {ref!r:.80}")
    before = _history(system, keep_thinking, earlier)
    if shared > len(before) or (shared and not isinstance(run.prompt, list)):
        raise _Refused(f"its prompt cannot share {shared} messages of a history of {len(before)}")
    prompt = [*before[:shared], *run.prompt] if shared else run.prompt
    text, prompt_text = ref.get("text"), run.prompt_text
    if text is not None:
        prompt_text = _rebuilt_text(text, prompt_text, earlier)
    record = {**run.record, "prompt": prompt}
    recording = dataclasses.replace(run, prompt=prompt, prompt_text=prompt_text, record=record)
    return dataclasses.replace(turn, recording=recording)


def _rebuilt_text(text: Any, stored: str | None, earlier: list[RecordedTurn]) -> str:
    """The prompt text ``[turn, keep, rest]`` says: an earlier turn's first ``keep``, ``rest``."""
    whole: str | None = None
    if isinstance(text, list) and len(text) == 3 and stored is None:
        at, keep, rest = text
        if _optional_int(at) and at is not None and 0 <= at < len(earlier):
            source = earlier[at].recording
            whole = None if source is None else source.prompt_text
        ok = _optional_int(keep) and keep is not None and isinstance(rest, str)
        if whole is not None and ok and 0 < keep <= len(whole):
            return whole[:keep] + str(rest)
    raise _Refused(
        "'text' must be [an earlier turn, how many characters of its prompt text start "
        f"this one, the rest], with this answer's prompt_text null; got {text!r:.80}"
    )


def _chat(document: dict[str, Any]) -> ChatRecording:
    _check_types(document, _CHAT_TYPES)
    keep_thinking = document.get("keep_thinking", False)
    if not isinstance(keep_thinking, bool):
        raise _Refused(f"'keep_thinking' must be true or false, got {keep_thinking!r:.20}")
    turns = [_turn(at, user, answer) for at, user, answer in _pairs(document["messages"])]
    # Answers given as text (a seeded history) come first: a history set replaces every turn.
    first_run = next((i for i, t in enumerate(turns) if t.recording is not None), len(turns))
    late = next(
        (i for i, t in enumerate(turns[first_run:], first_run) if t.recording is None), None
    )
    if late is not None:
        raise _Refused(f"messages[{2 * late + 1}] has no recording, after answers that have one")
    turns = _with_prompts(document, keep_thinking, turns)
    tokens = sum(len(run.tokens) for run in (t.recording for t in turns) if run is not None)
    if tokens > MAX_TOKENS:
        raise _Refused(f"it has {tokens} tokens, over the {MAX_TOKENS}-token limit")
    version = document.get("nbstream")
    return ChatRecording(
        system=document["system"],
        keep_thinking=keep_thinking,
        settings=document["settings"],
        turns=tuple(turns),
        version=version if isinstance(version, str) else None,
    )


def load(path: str | PathLike[str]) -> Recording | ChatRecording:
    """Read a recording written by ``run.save(path)`` or ``ChatWidget.save(path)``; nothing runs.

    Args:
        path: The recording's file.

    Returns:
        A run's :class:`Recording` (for ``nbstream.replay`` and ``StreamWidget``), or a
        chat's :class:`ChatRecording` (for ``ChatWidget``).

    Raises:
        ValueError: The file is not a recording this nbstream can load (truncated, not
            JSON, another format or major version, a field missing or of the wrong type,
            over :data:`MAX_BYTES` or :data:`MAX_TOKENS`); the message says what and what
            to do. A newer minor version's fields are skipped with a warning naming them.

    Example::

        >>> recording = nbstream.load("answer.json")
        >>> nbstream.replay(recording, speed=None).wait() == recording.text
        True
    """
    where = Path(path)
    document = _read(where)
    found = document.get("format") if isinstance(document, dict) else None
    chat = isinstance(found, str) and found.startswith(CHAT_FORMAT.rsplit("/", 1)[0] + "/")
    hint = _CHAT_HINT if chat else _HINT
    try:
        if _kind(document) == CHAT_FORMAT:
            _check_minor(where, document, _CHAT_FIELDS, CHAT_MINOR)
            _check_message_fields(where, document)
            return _chat(document)
        _check_minor(where, document, _FIELDS, MINOR)
        return _recording(document)
    except _Refused as exc:
        raise _refuse(where, str(exc), hint) from None


def as_recording(recording: Recording | ChatRecording | str | PathLike[str]) -> Recording:
    """A run's :class:`Recording` from one, or from the path of its file.

    Raises:
        TypeError: Neither a recording nor a path.
        ValueError: A file that is not a run's recording (a chat's: the message says to
            open it with ``ChatWidget``).
    """
    loaded = load(recording) if isinstance(recording, (str, PathLike)) else recording
    if isinstance(loaded, Recording):
        return loaded
    if isinstance(loaded, ChatRecording):
        raise ValueError(
            f"this is a chat's recording ({len(loaded.turns)} turns), not one run's: "
            "ChatWidget(nbstream.load(path)) replays it; nbstream.replay and StreamWidget "
            "take one run's (its turns[i].recording, or run.save(path))"
        )
    raise TypeError(
        "expected a recording (nbstream.load(path)) or the path of one, "
        f"got {type(recording).__name__}"
    )
