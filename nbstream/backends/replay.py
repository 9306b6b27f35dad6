"""Replay: a backend that streams a :class:`~nbstream.recording.Recording` again, no model.

Its job puts the recorded text pieces into the buffer at the recorded pace divided by
``speed`` (``speed=None``: all at once), checks for Stop between tokens, and ends as the
recording did: a complete recording replays ``complete``, a cancelled one ``cancelled``,
a failed one ``failed`` with :class:`RecordedFailure`. ``run.trace`` is the recorded trace.

A widget given a recording (``StreamWidget(nbstream.load(path))``, or a chat's in
``ChatWidget``) runs it through this backend: it answers only the recorded prompts, shows
the recorded tokens with the texts they were recorded with (:class:`RecordedTokenizer`),
and refuses what needs the model (a branch, the sampling explainer's logits) in words
that say so.
"""

from __future__ import annotations

import math
import time
from typing import Any, cast

from ..recording import ChatRecording, RecordedToken, Recording
from ..streaming import TokenBuffer
from ..trace import TokenTrace
from .base import Backend, Job, RunControl

__all__ = [
    "RECORDING_CANNOT_BRANCH",
    "RECORDING_HAS_NO_LOGITS",
    "RecordedFailure",
    "RecordedTokenizer",
    "ReplayBackend",
    "ReplayJob",
    "check_speed",
]

#: Why a replay cannot branch (``run.branch``, the popover's Continue).
RECORDING_CANNOT_BRANCH = (
    "A recording cannot branch: it has only the tokens it recorded (a token's popover shows "
    "the alternatives the model had there). To continue from another token, run the prompt "
    "on the model and branch that run."
)
#: Why a replay has no distribution (``run.distribution``, the sampling explainer).
RECORDING_HAS_NO_LOGITS = (
    "A recording has no logits: it has only the tokens it recorded and their top "
    "alternatives (run.trace). How a token was picked needs the model: run the prompt on it."
)


def check_speed(speed: Any) -> float | None:
    """A replay's ``speed``, checked: a number > 0 (infinite: instant), or ``None`` (instant).

    Args:
        speed: How many times faster than recorded.

    Returns:
        The pace to divide the recorded times by, or ``None`` for all at once.

    Raises:
        ValueError: Not a number > 0 (nor ``None``); the message says what to pass.

    Example::

        >>> check_speed(2), check_speed(None), check_speed(float("inf"))
        (2.0, None, None)
    """
    if speed is None:
        return None
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not speed > 0:
        raise ValueError(f"speed must be a number > 0, or None for instant; got {speed!r:.40}")
    return None if math.isinf(speed) else float(speed)


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's byte-level alphabet: the character a byte-level BPE vocabulary writes a byte as."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    alphabet = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in alphabet:
            alphabet[byte] = chr(256 + extra)
            extra += 1
    return alphabet


class RecordedFailure(RuntimeError):
    """The failure a replayed run recorded (the replay itself went well)."""


class _RecordedDecoder:
    """Items are ``(id, piece)`` pairs: the text is the pieces, the ids are kept."""

    def __init__(self) -> None:
        self._ids: list[int] = []

    def feed(self, items: list[Any]) -> str:
        self._ids += [token_id for token_id, _ in items if token_id is not None]
        return "".join(piece for _, piece in items)

    def finish(self, emitted: str) -> str:
        return ""

    def pieces(self, items: list[Any]) -> list[str]:
        return [self.feed([item]) for item in items]

    @property
    def ids(self) -> list[int]:
        return list(self._ids)


class RecordedTokenizer:
    """What a widget decodes a replay's tokens with: the texts they were recorded with.

    It knows the recorded tokens and their alternatives, nothing else (an id it has not
    seen decodes as ``<id>``). The recording's ``kinds`` say which are special tokens and
    which hold part of a character: such a token's vocabulary piece is its bytes in a
    byte-level BPE's alphabet, so the token views show it as the live run's did.

    Args:
        recording: The recording whose token texts it knows (a chat's: every answer's).

    Example::

        >>> recording = nbstream.load("answer.json")
        >>> RecordedTokenizer(recording).decode(recording.token_ids[:1]) == recording.tokens[0].text
        True
    """

    def __init__(self, recording: Recording | ChatRecording) -> None:
        runs = _runs_of(recording)
        kinds = {token_id: kind for run in runs for token_id, kind in run.kinds.items()}
        #: The recorded special tokens.
        self.all_special_ids = tuple(
            sorted(i for i, (kind, _) in kinds.items() if kind == "special")
        )
        alphabet = _byte_alphabet()
        self._pieces = {
            token_id: "".join(alphabet[byte] for byte in bytes.fromhex(shown))
            for token_id, (kind, shown) in kinds.items()
            if kind == "bytes"
        }
        tokens = [token for run in runs for token in run.tokens]
        texts: dict[int, str] = {}
        for token in tokens:
            for alt in token.alternatives:
                if alt.id is not None:
                    texts.setdefault(alt.id, alt.text)
        for token in tokens:
            if token.id is not None:
                texts[token.id] = token.text  # its own text wins over an alternative's
        self._texts = texts

    def decode(self, ids: Any, **_options: Any) -> str:
        """The recorded texts of ``ids``, joined."""
        return "".join(self._texts.get(int(i), f"<{int(i)}>") for i in ids)

    def convert_ids_to_tokens(self, token_id: int) -> str | None:
        """A byte token's piece (its bytes, byte-level); ``None`` for any other token."""
        return self._pieces.get(int(token_id))


def _runs_of(recording: Recording | ChatRecording) -> list[Recording]:
    """The runs of a recording: itself, or a chat's recorded answers."""
    return recording.recordings if isinstance(recording, ChatRecording) else [recording]


def _traced(run: Recording) -> bool:
    return bool(run.alternatives) and all(token.id is not None for token in run.tokens)


class _RecordedTrace:
    """``run.trace`` of a replay: the recorded tokens, as many as were replayed."""

    def __init__(self, tokens: tuple[RecordedToken, ...]) -> None:
        self._tokens = tokens

    def records(self, ids: list[int]) -> list[TokenTrace]:
        # Duck-typed: a RecordedToken has every name of a TokenTrace a reader uses.
        return cast("list[TokenTrace]", list(self._tokens[: len(ids)]))


class ReplayJob(Job):
    """One replay of a recording.

    Args:
        recording: What to replay.
        speed: The recorded pace is divided by it (``None``: instant).
    """

    def __init__(self, recording: Recording, speed: float | None) -> None:
        settings = dict(recording.settings)
        # The tags the run used, exactly: [] turns detection off, as it was.
        settings["thinking_tags"] = list(recording.thinking_tags or [])
        super().__init__(recording.prompt, settings)
        self.recording = recording
        self.speed = check_speed(speed)
        self.prompt_text = recording.prompt_text
        self.prompt_tokens = recording.record.get("prompt_tokens")
        self.seed = recording.record.get("seed")
        if recording.alternatives and all(t.id is not None for t in recording.tokens):
            self.trace_capture = _RecordedTrace(recording.tokens)

    def run(self, buffer: TokenBuffer, control: RunControl) -> str:
        """Put the recorded pieces at their pace, then end as the recording did."""
        buffer.put(self.prompt)  # the first put is the prompt: skipped
        start = time.perf_counter()
        for token in self.recording.tokens:
            if self.speed is not None:
                due = start + token.time_s / self.speed
                while not control.should_stop() and time.perf_counter() < due:
                    control.cancel_event.wait(min(0.05, max(0.0, due - time.perf_counter())))
            if control.should_stop():
                return "eos"  # the lifecycle ends it cancelled
            buffer.put((token.id, token.piece))
        return self._recorded_end(control)

    def _recorded_end(self, control: RunControl) -> str:
        recording = self.recording
        if recording.status == "failed":
            error = recording.error or {}
            raise RecordedFailure(
                f"the recorded run failed: {error.get('type')}: {error.get('message')}"
            )
        if recording.status == "cancelled":
            control.cancel_reason = recording.cancel_reason
            control.cancel_event.set()
            return "eos"
        return recording.finish_reason or "eos"

    def decoder(self) -> _RecordedDecoder:
        """The recorded pieces are the text; their ids are kept for ``token_ids``."""
        return _RecordedDecoder()

    def count_tokens(self, buffer: TokenBuffer) -> int | None:
        """The replayed tokens, when the recording counted tokens."""
        if self.recording.record["metrics"].get("tokens") is None:
            return None
        return len(buffer.items)

    def record_notes(self) -> dict[str, Any]:
        """The replay's record says it is one, and of what."""
        record = self.recording.record
        model = record.get("model") or {}
        return {
            "replay": {
                "of": {"created_at": record.get("created_at"), "model": model.get("name")},
                "speed": self.speed,
            }
        }


class ReplayBackend(Backend):
    """Runs a recording, not a model: :meth:`prepare` takes only the recorded prompts.

    Args:
        recording: The recording to replay: a run's, or a chat's (each answer's prompt is
            the messages it was asked with).
        speed: The recorded pace is divided by it: a number > 0 (``None`` or infinite:
            instant).

    Raises:
        ValueError: A ``speed`` that is not a number > 0 (:func:`check_speed`).

    Example::

        >>> backend = ReplayBackend(nbstream.load("answer.json"), speed=None)
        >>> nbstream.stream(backend, None, backend.recording.prompt).wait()
    """

    def __init__(self, recording: Recording | ChatRecording, speed: float | None = 1.0) -> None:
        self.recording = recording
        self.speed = check_speed(speed)
        # The token views show a recording's tokens when it has their trace, with ids.
        self.supports_alternatives = any(_traced(run) for run in _runs_of(recording))
        self.tokenizer = RecordedTokenizer(recording)

    def check_alternatives(self, k: int) -> None:
        """A recording shows the alternatives it recorded, whatever ``k``; none without a trace.

        Args:
            k: How many top candidates per token were asked for.

        Raises:
            ValueError: The recording has no trace to show.
        """
        if not self.supports_alternatives:
            raise ValueError(
                f"alternatives={k}: this recording has no token probabilities (it was "
                "recorded without alternatives=k); drop alternatives, or record the run "
                "again with alternatives=5"
            )

    def why_no_branch(self) -> str:
        """A replay never branches: it has only the tokens it recorded."""
        return RECORDING_CANNOT_BRANCH

    def check_steer(self, steer: Any) -> None:
        """A replay plays recorded text: it takes only the steering it was recorded with.

        Args:
            steer: The checked ``steer`` setting asked for (None: fine).

        Raises:
            ValueError: Another steering than the recording's (nothing is steered in a replay).
        """
        if steer is None or any(
            run.settings.get("steer") == steer for run in _runs_of(self.recording)
        ):
            return
        raise ValueError(
            "steer: a replay plays the recorded text and runs no model, so it cannot be "
            "steered; run the prompt on the model with steer=(direction, strength), or drop "
            "steer (the recording's own steering, if any, is in its record)"
        )

    def describe(self) -> dict[str, Any] | None:
        """The recorded model, marked as replayed."""
        runs = _runs_of(self.recording)
        model = dict((runs[0].record.get("model") if runs else None) or {})
        model["replayed"] = True
        return model

    def prepare(
        self,
        prompt: Any,
        settings: dict[str, Any],
        *,
        prefix_ids: list[int] | None = None,
        assistant_prefix: str | None = None,
        prefix_steps: int = 0,
    ) -> ReplayJob:
        """The replay's job: its settings are the recording's, whatever ``settings`` says.

        Raises:
            ValueError: ``prompt`` is not the recorded one (the message names it), or a
                ``steer`` other than the recording's (:meth:`check_steer`).
        """
        self.check_steer(settings.get("steer"))
        if isinstance(self.recording, ChatRecording):
            return self._chat_job(self.recording, prompt)
        recorded = self.recording.prompt
        if prompt != recorded:
            raise ValueError(
                f"this recording has no answer to {prompt!r:.200}: the prompt it recorded is "
                f"{recorded!r:.300}; replay that one, or run this prompt on the model"
            )
        return ReplayJob(self.recording, self.speed)

    def _chat_job(self, chat: ChatRecording, prompt: Any) -> ReplayJob:
        for run in chat.recordings:
            if run.prompt == prompt:
                return ReplayJob(run, self.speed)
        asked = [turn.user for turn in chat.turns]
        raise ValueError(
            f"this chat's recording has no answer to {prompt!r:.200}: it recorded answers to "
            f"{asked!r:.300}; replay it with ChatWidget(recording), or resume it on a model "
            "with ChatWidget(model, tokenizer, history=recording)"
        )
