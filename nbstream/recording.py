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

This module writes recordings and is where their names are imported from; the format's
objects are in :mod:`nbstream.recording_format`, the reading and its checks (and the
limits, :data:`MAX_BYTES` and :data:`MAX_TOKENS`) in :mod:`nbstream.recording_checks`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from os import PathLike
from pathlib import Path
from types import MappingProxyType
from typing import Any

from . import recording_checks
from ._version import __version__
from .recording_checks import MAX_BYTES, MAX_TOKENS
from .recording_format import (
    CHAT_FORMAT,
    CHAT_MINOR,
    FORMAT,
    MINOR,
    NO_KINDS,
    SHARED,
    ChatRecording,
    RecordedAlternative,
    RecordedToken,
    RecordedTurn,
    Recording,
    chat_history,
)

__all__ = [
    "CHAT_FORMAT",
    "CHAT_MINOR",
    "FOLDER_READERS",
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
        kinds=tokens[0].kinds if traced else NO_KINDS,
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
    # The limit is read where load() reads it, so that the two never disagree.
    limit = recording_checks.MAX_BYTES
    if len(data) > limit:
        raise ValueError(
            f"not saved to {target}: this recording is {len(data)} bytes, over the "
            f"{limit}-byte limit of nbstream.load; {recording_checks.TOO_LARGE}"
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
    embedded = {k: v for k, v in _document(run).items() if k not in SHARED}
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
        before = chat_history(chat.system, chat.keep_thinking, chat.turns[:index])
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


#: What :func:`load` tries on a folder, in order: each takes the folder and returns what it
#: holds, or ``None`` when it is not of its kind. The engine never imports the widgets that
#: save folders (a prompt grid), so ``nbstream`` registers their readers here.
FOLDER_READERS: list[Callable[[Path], Any]] = []


def load(path: str | PathLike[str]) -> Recording | ChatRecording | Any:
    """Read a recording written by ``run.save(path)`` or ``ChatWidget.save(path)``; nothing runs.

    Args:
        path: The recording's file, or a grid's folder (``Grid.save``).

    Returns:
        A run's :class:`Recording` (for ``nbstream.replay`` and ``StreamWidget``), a
        chat's :class:`ChatRecording` (for ``ChatWidget``), or for a folder a
        :class:`~nbstream.Grid` that replays its cells.

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
    if where.is_dir():  # a saved grid (g.save(folder)): its reader, registered by nbstream
        for reader in FOLDER_READERS:
            found = reader(where)
            if found is not None:
                return found
        raise ValueError(
            f"cannot read the recording {where}: it is a folder, with no saved grid in it "
            "(grid.json); give a recording's file"
        )
    return recording_checks.read_recording(where)


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
