"""Reading a recording's file and checking every field before anything is shown or replayed.

A recording may come from anyone (a lesson's file, a download): :func:`read_recording`
refuses, in words that say what to do, a file too large, not JSON, of another format or
version, or with a field missing or of the wrong type, before it builds the objects of
:mod:`nbstream.recording_format`. :func:`nbstream.load` calls it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ._version import __version__
from .recording_format import (
    CHAT_FIELDS,
    CHAT_FORMAT,
    CHAT_HINT,
    CHAT_MINOR,
    FIELDS,
    FORMAT,
    HINT,
    MESSAGE_FIELDS,
    MINOR,
    NO_KINDS,
    SHARED,
    STATUSES,
    ChatRecording,
    RecordedAlternative,
    RecordedToken,
    RecordedTurn,
    Recording,
    chat_history,
)
from .settings import SETTINGS, validate_settings
from .streaming import StopFilter, ThinkingSplitter

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_TOKENS",
    "MAX_TOKEN_MS",
    "TOO_LARGE",
    "read_recording",
]

logger = logging.getLogger(__name__)

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
TOO_LARGE = (
    "a recording for a lesson is far smaller (a 500-token run with 5 alternatives is "
    "~0.1 MiB); save a shorter run, or one with fewer alternatives"
)


# -- reading ---------------------------------------------------------------------------------
class _Refused(Exception):
    """What is wrong with a document; :func:`load` says it with the file's name and a hint."""


def _refuse(path: Path, what: str, hint: str = HINT) -> ValueError:
    return ValueError(f"{path} is not a recording nbstream can load: {what}; {hint}")


def _read(path: Path) -> Any:
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise _refuse(path, f"it is {size} bytes, over the {MAX_BYTES}-byte limit", TOO_LARGE)
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read the recording {path}: {exc}") from exc
    if len(data) > MAX_BYTES:
        raise _refuse(path, f"it is over the {MAX_BYTES}-byte limit", TOO_LARGE)
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
    unknown = sorted(found - set(MESSAGE_FIELDS))
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
    if record["status"] not in STATUSES:
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
    kinds: Mapping[int, tuple[str, str]] = NO_KINDS
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
        shared = sorted(set(embedded) & set(SHARED))
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
    before = chat_history(system, keep_thinking, earlier)
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


def read_recording(where: Path) -> Recording | ChatRecording:
    """Read and check the recording at ``where`` (what :func:`nbstream.load` does).

    Args:
        where: The file.

    Returns:
        A run's recording, or a chat's.

    Raises:
        ValueError: The file is not a recording this nbstream can load, saying why.

    Example:
        >>> read_recording(Path("answer.json")).text
        'Hello'
    """
    document = _read(where)
    found = document.get("format") if isinstance(document, dict) else None
    chat = isinstance(found, str) and found.startswith(CHAT_FORMAT.rsplit("/", 1)[0] + "/")
    hint = CHAT_HINT if chat else HINT
    try:
        if _kind(document) == CHAT_FORMAT:
            _check_minor(where, document, CHAT_FIELDS, CHAT_MINOR)
            _check_message_fields(where, document)
            return _chat(document)
        _check_minor(where, document, FIELDS, MINOR)
        return _recording(document)
    except _Refused as exc:
        raise _refuse(where, str(exc), hint) from None
