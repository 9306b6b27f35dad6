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
  the same answer the same way.
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any, NamedTuple

from ._version import __version__

__all__ = [
    "FORMAT",
    "MAX_BYTES",
    "MAX_TOKENS",
    "MINOR",
    "RecordedAlternative",
    "RecordedToken",
    "Recording",
    "as_recording",
    "load",
    "save",
]

logger = logging.getLogger(__name__)

#: The format's name and major version: a reader refuses any other.
FORMAT = "nbstream.recording/1"
#: Its minor version: a newer one only adds fields, which an older reader names and skips.
MINOR = 0
#: The largest file :func:`load` reads (a 500-token run with 5 alternatives is ~0.1 MiB).
MAX_BYTES = 64 * 1024 * 1024
#: The most tokens a recording may hold.
MAX_TOKENS = 200_000
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
)
_STATUSES = ("complete", "failed", "cancelled")
_HINT = "save the run again with run.save(path)"


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


def _tokens_of(run: Any, pieces: Sequence[str], times: Sequence[float]) -> list[RecordedToken]:
    """The run's tokens: its pieces and times, and its trace where it has one with ids."""
    ids: list[int | None] = list(run.token_ids)
    if len(ids) != len(pieces):
        ids = [None] * len(pieces)  # a server's chunks: text, no ids
    trace = run.trace
    steps = list(trace) if trace is not None and all(step.id is not None for step in trace) else []
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
                tuple(bool(flag) for flag in step.cut),
            )
        )  # fmt: skip
    return tokens


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

    Example::

        >>> run.save("answer.json")
        PosixPath('answer.json')
    """
    record = run.record
    if record is None:
        raise RuntimeError("this run has not ended: wait() for it, or stop() it, before saving")
    alternatives = int(run.settings.get("alternatives") or 0)
    tokens = _tokens_of(run, pieces, times)
    traced = alternatives > 0 and any(token.logprob is not None for token in tokens)
    document = {
        "format": FORMAT,
        "minor": MINOR,
        "nbstream": __version__,
        "prompt": run.prompt,
        "prompt_text": run.prompt_text,
        "thinking_tags": None if run.thinking_tags is None else list(run.thinking_tags),
        "settings": {k: v for k, v in run.settings.items() if k != "budget_s"},
        "alternatives": alternatives if traced else 0,
        "text": run.partial_text,
        "tokens": [_token_row(token, traced) for token in tokens],
        "record": record,
    }
    target = Path(path)
    target.write_text(json.dumps(document, ensure_ascii=False, separators=(",", ":")), "utf-8")
    return target


# -- reading ---------------------------------------------------------------------------------
def _refuse(path: Path, what: str) -> ValueError:
    return ValueError(f"{path} is not a recording nbstream can load: {what}; {_HINT}")


def _read(path: Path) -> Any:
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise _refuse(path, f"it is {size} bytes, over the {MAX_BYTES}-byte limit")
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read the recording {path}: {exc}") from exc
    if len(data) > MAX_BYTES:
        raise _refuse(path, f"it is over the {MAX_BYTES}-byte limit")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _refuse(path, f"it is not complete JSON (truncated or damaged? {exc})") from exc


def _check_format(path: Path, document: Any) -> None:
    if not isinstance(document, dict):
        raise _refuse(path, f"it holds a JSON {type(document).__name__}, not an object")
    found = document.get("format")
    if not isinstance(found, str) or not found.startswith("nbstream.recording/"):
        raise _refuse(path, f"its format is {found!r}, not {FORMAT!r}")
    if found != FORMAT:
        raise _refuse(
            path, f"its format is {found!r}: this nbstream ({__version__}) reads {FORMAT!r}"
        )
    minor = document.get("minor")
    if isinstance(minor, bool) or not isinstance(minor, int) or minor < 0:
        raise _refuse(path, f"'minor' must be an int >= 0, got {minor!r:.40}")
    unknown = sorted(set(document) - set(_FIELDS))
    if unknown:
        newer = f" (written by nbstream {document.get('nbstream')!r:.40}, minor {minor})"
        message = (
            f"{path}: this nbstream ({__version__}) cannot show these fields of the "
            f"recording{newer if minor > MINOR else ''}: {', '.join(unknown)}; "
            "they are skipped"
        )
        warnings.warn(message, UserWarning, stacklevel=3)


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


def _check_fields(path: Path, document: dict[str, Any]) -> None:
    for name, types in _TYPES.items():
        if name not in document:
            raise _refuse(path, f"the field {name!r} is missing")
        if not isinstance(document[name], types) or isinstance(document[name], bool):
            kind = type(document[name]).__name__
            raise _refuse(path, f"the field {name!r} is a {kind}, not {types[0].__name__}")
    record = document["record"]
    for name, types in _RECORD_TYPES.items():
        if not isinstance(record.get(name), types):
            raise _refuse(path, f"record[{name!r}] is missing or not {types[0].__name__}")
    if record["status"] not in _STATUSES:
        raise _refuse(path, f"record['status'] is {record['status']!r:.40}, not an end state")
    tags = document["thinking_tags"]
    if tags is not None and (len(tags) != 2 or not all(isinstance(t, str) for t in tags)):
        raise _refuse(path, "'thinking_tags' must be two strings, or null")
    if len(document["tokens"]) > MAX_TOKENS:
        raise _refuse(
            path, f"it has {len(document['tokens'])} tokens, over the {MAX_TOKENS}-token limit"
        )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _optional_int(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _alternative(value: Any) -> RecordedAlternative | None:
    ok = (
        isinstance(value, list)
        and len(value) == 3
        and _optional_int(value[0])
        and isinstance(value[1], str)
        and _number(value[2])
    )
    return RecordedAlternative(value[0], value[1], float(value[2])) if ok else None


def _token(row: Any, traced: bool) -> RecordedToken | None:
    """The token of one ``tokens`` row, or ``None`` when the row is malformed."""
    width = 8 if traced else 3
    if not isinstance(row, list) or len(row) != width:
        return None
    token_id, piece, ms = row[:3]
    if not (_optional_int(token_id) and isinstance(piece, str) and _number(ms) and ms >= 0):
        return None
    if not traced:
        return RecordedToken(token_id, piece, ms / 1000, piece)
    logprob, rank, alts, cut, text = row[3:]
    alternatives = [_alternative(alt) for alt in alts] if isinstance(alts, list) else [None]
    if (
        not (logprob is None or _number(logprob))
        or not _optional_int(rank)
        or not isinstance(cut, list)
        or not all(flag in (0, 1) and not isinstance(flag, float) for flag in cut)
        or not (text is None or isinstance(text, str))
        or None in alternatives
    ):
        return None
    return RecordedToken(
        token_id, piece, ms / 1000, piece if text is None else text,
        None if logprob is None else float(logprob), rank,
        tuple(alt for alt in alternatives if alt is not None), tuple(bool(f) for f in cut),
    )  # fmt: skip


def _recording(path: Path, document: dict[str, Any]) -> Recording:
    traced = document["alternatives"] > 0
    tokens = []
    for index, row in enumerate(document["tokens"]):
        token = _token(row, traced)
        if token is None:
            shape = "[id, piece, ms" + (
                ", logprob, rank, alternatives, cut, text]" if traced else "]"
            )
            raise _refuse(path, f"tokens[{index}] is not {shape}: {row!r:.80}")
        tokens.append(token)
    tags = document["thinking_tags"]
    version = document.get("nbstream")
    return Recording(
        prompt=document["prompt"],
        prompt_text=document["prompt_text"],
        thinking_tags=None if tags is None else (tags[0], tags[1]),
        settings=document["settings"],
        alternatives=document["alternatives"],
        text=document["text"],
        tokens=tuple(tokens),
        record=document["record"],
        version=version if isinstance(version, str) else None,
    )


def load(path: str | PathLike[str]) -> Recording:
    """Read a recording written by ``run.save(path)``; nothing runs.

    Args:
        path: The recording's file.

    Returns:
        The :class:`Recording`, for ``nbstream.replay``.

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
    _check_format(where, document)
    _check_fields(where, document)
    return _recording(where, document)


def as_recording(recording: Recording | str | PathLike[str]) -> Recording:
    """A :class:`Recording` from one, or from the path of its file."""
    if isinstance(recording, Recording):
        return recording
    if isinstance(recording, (str, PathLike)):
        return load(recording)
    raise TypeError(
        "expected a recording (nbstream.load(path)) or the path of one, "
        f"got {type(recording).__name__}"
    )
