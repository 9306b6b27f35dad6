"""``ChatWidget``: a multi-turn chat in the notebook, streaming each answer like ``StreamWidget``.

A conversation is a list of turns: a user message and the answer to it. ``history`` is what
the next :meth:`ChatWidget.generate` gives the model: the system message if any, then every
turn whose answer completed (or whose partial answer the user kept), as alternating user
and assistant messages. ``transcript`` is every turn shown, whatever its end state. Only
the newest answer streams; its text reaches the views as deltas of the current run (as in
``StreamWidget``), and the transcript trait changes only when a turn starts or ends.
See PROTOCOL.md for every trait and message.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import traitlets

from ._display import chat_fallback_bundle
from ._widget_base import RunWidget, error_summary
from .backends.local import ContextLengthError, check_encodable
from .generation import CANCELLED, COMPLETE, FAILED, TERMINAL, Generation, stream

logger = logging.getLogger(__name__)

_STATIC = Path(__file__).parent / "static"
_HISTORY_ROLES = ("system", "user", "assistant")


@dataclass
class _Turn:
    """A user message and its answer: a run, or (seeded from Python) a given text."""

    user: str
    run: Generation | None = None
    answer: str = ""
    kept: bool = False
    run_id: int | None = None

    @property
    def status(self) -> str:
        return self.run.status if self.run is not None else COMPLETE

    @property
    def text(self) -> str:
        return self.run.partial_text if self.run is not None else self.answer

    @property
    def in_history(self) -> bool:
        if self.run is None:
            return True
        if not self.run.done:
            return False
        return self.run.status == COMPLETE or self.kept


def _check_text(text: Any, what: str = "the message") -> str:
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"{what} is empty; type some text")
    check_encodable(text, what)
    return text


def _check_system(system: Any) -> str | None:
    if system is None:
        return None
    return _check_text(system, "the system message")


def _parse_history(messages: Any) -> tuple[str | None, list[tuple[str, str]]]:
    """(system message, [(user, answer), ...]) of a history; raises saying what is wrong."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(
            "history must be a list of {'role': ..., 'content': ...} messages, "
            f"got {type(messages).__name__}"
        )
    system: str | None = None
    pairs: list[tuple[str, str]] = []
    pending: str | None = None
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            raise ValueError(
                f"history[{i}] must be a dict with exactly the keys 'role' and 'content', "
                f"got {message!r:.80}"
            )
        role, content = message["role"], message["content"]
        if role not in _HISTORY_ROLES:
            raise ValueError(
                f"history[{i}] has role {role!r}; a chat history holds 'system' (first only), "
                "'user' and 'assistant' messages"
            )
        if not isinstance(content, str):
            raise TypeError(f"history[{i}]['content'] must be a str, got {type(content).__name__}")
        if role == "system":
            if i != 0:
                raise ValueError(
                    f"history[{i}] is a system message; only the first message may be one"
                )
            system = _check_text(content, f"history[{i}] (the system message)")
        elif role == "user":
            if pending is not None:
                raise ValueError(
                    f"history[{i}] is a user message, but history[{i - 1}] (user) has no "
                    "answer: user and assistant messages alternate"
                )
            pending = _check_text(content, f"history[{i}] (a user message)")
        else:
            if pending is None:
                raise ValueError(
                    f"history[{i}] is an assistant message that answers no user message: "
                    "user and assistant messages alternate, starting with a user message"
                )
            check_encodable(content, f"history[{i}] (an assistant message)")  # may be empty
            pairs.append((pending, content))
            pending = None
    if pending is not None:
        raise ValueError(
            "the history ends with a user message that has no answer; end it with the "
            "assistant's answer (chat.generate(text) adds the next user message)"
        )
    return system, pairs


class ChatWidget(RunWidget):
    """A multi-turn chat: each turn a message, the newest answer streamed with its state and Stop.

    ``ChatWidget()`` uses the embedded default model; ``ChatWidget(model, tokenizer,
    system=None, **settings)`` any loaded causal LM with a chat template (settings as in
    :func:`nbstream.stream`). ``generate``, ``wait``, ``stop`` and ``on_complete`` behave as
    on ``StreamWidget``; ``generate(text)`` takes the user message instead of a prompt.

    A stopped or failed answer stays in the transcript, marked, and is left out of the
    ``history`` the model sees next unless it is kept (:meth:`keep_partial`, or the "Keep
    partial" button).

    Example::

        >>> import nbstream
        >>> chat = nbstream.ChatWidget(system="Answer briefly.", max_new_tokens=64)
        >>> chat                                # display it
        >>> chat.generate("Name two colors.")
        >>> chat.wait()                         # the answer, if it completed
        >>> chat.generate("And two more?")      # the model sees the first turn too
        >>> chat.history                        # exactly what the next generate gives the model
    """

    _esm = _STATIC / "chat.js"
    _css = _STATIC / "chat.css"

    # -- internal synced state (status, metrics, error_info, input_error, run_id: RunWidget) --
    #: The transcript as the views show it, set when a turn starts or ends (never per
    #: frame): the answer being generated has content "" and streams as deltas.
    _messages: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)

    # -- public synced state ------------------------------------------------------------------
    #: The system message sent first (None: the chat template's default, if any). A setting
    #: like the others: the settings panel edits it, and an invalid one (an empty message)
    #: is reported in ``settings_errors`` and refused by the next answer. It cannot change
    #: while an answer is being generated (RuntimeError).
    system = traitlets.Any(None, allow_none=True).tag(sync=True)

    def __init__(
        self, model: Any = None, tokenizer: Any = None, system: str | None = None, **settings: Any
    ) -> None:
        system = _check_system(system)
        self._turns: list[_Turn] = []
        super().__init__(model, tokenizer, **settings)
        self.system = system

    # -- Python API ---------------------------------------------------------------------------
    def generate(self, text: str, **settings: Any) -> Generation:
        """Add a user message; its answer streams into a new message. Returns the run.

        The model gets ``history`` plus this message. ``settings`` override the widget's for
        this answer. Raises ``RuntimeError`` while an answer is queued or running, and
        ``ValueError`` (nothing started, the transcript unchanged) for an empty message or
        a conversation that no longer fits the model's context.
        """
        return self._send_turn(text, settings, replace_last=False)

    @overload
    def send(self, content: str, buffers: None = None, **settings: Any) -> Generation: ...
    @overload
    def send(self, content: Any, buffers: Any = None) -> None: ...
    def send(self, content: Any, buffers: Any = None, **settings: Any) -> Generation | None:
        """ipywidgets' ``Widget.send(content, buffers)``: a custom message to the views.

        Deprecated as a chat turn: ``send(text)`` with a string still starts one, with a
        ``DeprecationWarning``; use :meth:`generate`.
        """
        if isinstance(content, str):
            warnings.warn(
                "ChatWidget.send(text) is now ChatWidget.generate(text)",
                DeprecationWarning,
                stacklevel=2,
            )
            return self.generate(content, **settings)
        if settings:
            raise TypeError(f"send() got an unexpected keyword argument {next(iter(settings))!r}")
        super().send(content, buffers)
        return None

    def edit_last(self, text: str, **settings: Any) -> Generation:
        """Replace the last user message (and its answer) by ``text``, and answer it."""
        return self._send_turn(text, settings, replace_last=True)

    def regenerate(self, **settings: Any) -> Generation:
        """Answer the last user message again; the new answer replaces the old one."""
        with self._lock:
            if not self._turns:
                raise ValueError("there is no answer to regenerate yet; send a message first")
            text = self._turns[-1].user
        return self._send_turn(text, settings, replace_last=True)

    def keep_partial(self, turn: int = -1) -> None:
        """Keep a cancelled or failed answer (the newest by default) in the ``history``.

        The turn's user message and partial answer then reach the model with the next
        message, as if the answer had completed.
        """
        if not isinstance(turn, int) or isinstance(turn, bool):
            raise TypeError(f"turn must be an int, got {type(turn).__name__}")
        with self._lock:
            try:
                t = self._turns[turn]
            except IndexError:
                raise ValueError(
                    f"there is no turn {turn}; the chat has {len(self._turns)}"
                ) from None
            if t.run is None or not t.run.done or t.run.status not in (CANCELLED, FAILED):
                raise ValueError(
                    f"the answer of turn {turn} is {t.status}; only a cancelled or failed "
                    "answer can be kept as partial"
                )
            if not t.run.partial_text:
                raise ValueError(f"the answer of turn {turn} is empty: there is nothing to keep")
            t.kept = True
            with self.hold_sync():
                self.input_error = ""
                self._messages = self._message_list()
            self._publish_fallback()

    def clear(self) -> None:
        """Stop any answer and empty the conversation (the system message stays)."""
        self.stop()
        self._reset_turns([])

    @property
    def history(self) -> list[dict[str, str]]:
        """What the next :meth:`generate` gives the model (before its own user message).

        The system message if any, then the user message and answer of every turn that
        completed or whose partial answer was kept, as ``{"role", "content"}`` dicts.
        Settable, to seed a conversation: the transcript becomes these turns.
        """
        with self._lock:
            return self._history_of(self._turns)

    @history.setter
    def history(self, messages: Any) -> None:
        system, pairs = _parse_history(messages)
        with self._lock:
            if self._busy():
                raise RuntimeError(
                    "the chat is answering; call stop() or wait() before setting its history"
                )
            self.system = system
        self._reset_turns([_Turn(user, answer=answer) for user, answer in pairs])

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """Every message shown, in order, with the state of each answer.

        User messages are ``{"role": "user", "content", "in_history"}``; answers add
        ``"status"`` (``queued``, ``running``, ``complete``, ``failed``, ``cancelled``) and
        ``"kept"``. ``in_history`` says whether the next :meth:`generate` gives it to the model.
        """
        with self._lock:
            turns = list(self._turns)
        out: list[dict[str, Any]] = []
        for t in turns:
            status, text, used = t.status, t.text, t.in_history
            out.append({"role": "user", "content": t.user, "in_history": used})
            out.append(
                {
                    "role": "assistant",
                    "content": text,
                    "status": status,
                    "kept": t.kept,
                    "in_history": used,
                }
            )
        return out

    # -- internals ------------------------------------------------------------------------------
    @traitlets.validate("system")
    def _valid_system(self, proposal: dict[str, Any]) -> Any:
        value = proposal["value"]
        if value != self.system and self._busy():
            # The answer being generated was asked with the old one: history must not lie.
            raise RuntimeError("the chat is answering; call stop() or wait() first")
        return value

    @traitlets.observe("system")
    def _system_changed(self, _change: dict[str, Any]) -> None:
        self._check_setting("system")

    def _setting_error(self, name: str, value: Any) -> str | None:
        if name != "system":
            return super()._setting_error(name, value)
        try:
            _check_system(value)
        except (TypeError, ValueError) as exc:
            return str(exc)
        return None

    def _history_of(self, turns: list[_Turn]) -> list[dict[str, str]]:
        system = self.system
        history = [] if system is None else [{"role": "system", "content": system}]
        for t in turns:
            if t.in_history:
                history.append({"role": "user", "content": t.user})
                history.append({"role": "assistant", "content": t.text})
        return history

    def _send_turn(self, text: Any, settings: dict[str, Any], replace_last: bool) -> Generation:
        text = _check_text(text)
        merged = self._run_settings(settings)

        def make_run() -> Generation:  # with the lock held, and no run in progress
            turns = self._turns
            if replace_last:
                if not turns:
                    raise ValueError("there is no message to edit yet; use generate(text)")
                turns = turns[:-1]
            messages = [*self._history_of(turns), {"role": "user", "content": text}]
            try:
                run = stream(self._model, self._tokenizer, messages, **merged)
            except ContextLengthError as exc:
                raise ContextLengthError(
                    f"the conversation is too long for the model: with this message it is "
                    f"{exc.prompt_tokens} tokens, plus max_new_tokens ({exc.max_new_tokens}) "
                    f"for the answer, over the model's context of {exc.context} tokens. "
                    "Clear the chat, seed a shorter one (chat.history = chat.history[-4:]), "
                    "or lower max_new_tokens; nothing was started",
                    exc.prompt_tokens,
                    exc.max_new_tokens,
                    exc.context,
                ) from None
            self._turns = [*turns, _Turn(text, run)]
            return run

        return self._launch(make_run)

    def _on_start(self, run: Generation, run_id: int) -> None:
        self._turns[-1].run_id = run_id
        self._messages = self._message_list()

    def _token_runs(self) -> list[tuple[int, Generation]]:
        # Every answer shown that came from a run (seeded history turns have no tokens).
        return [
            (t.run_id, t.run) for t in self._turns if t.run is not None and t.run_id is not None
        ]

    def _end_traits(self, run: Generation) -> dict[str, Any]:
        return {**super()._end_traits(run), "_messages": self._message_list()}

    def _reset_turns(self, turns: list[_Turn]) -> None:
        with self._lock:
            self._turns = turns
            with self.hold_sync():
                self._forget_run()
                self._messages = self._message_list()
            self._publish_fallback()

    def _message_list(self) -> list[dict[str, Any]]:
        """The transcript for the views (called with the lock held)."""
        out: list[dict[str, Any]] = []
        for i, t in enumerate(self._turns):
            used = t.in_history
            out.append({"role": "user", "content": t.user, "turn": i, "in_history": used})
            ended = t.run is None or t.run.done
            out.append(
                {
                    "role": "assistant",
                    # An answer being generated reaches the views as deltas, never here.
                    "content": t.text if ended else "",
                    "turn": i,
                    "in_history": used,
                    "status": t.status,
                    "run_id": t.run_id,
                    "kept": t.kept,
                    "error": error_summary(t.run.error) if t.run is not None and ended else None,
                    # Why the answer ended ("length" on a complete one: cut at max_new_tokens).
                    "finish_reason": (
                        t.run.metrics["finish_reason"] if t.run is not None and ended else None
                    ),
                }
            )
        return out

    # -- from the views -----------------------------------------------------------------------
    def _on_view_message(self, kind: Any, content: dict[str, Any]) -> None:
        if kind == "clear":
            self.clear()
            return
        if kind == "keep":
            turn: Any = content.get("turn")
            self._report_input_error(lambda: self.keep_partial(turn))
            return
        if kind not in ("send", "edit_last", "regenerate"):
            return
        if self._busy():
            logger.debug("%s ignored: an answer is already queued or running", kind)
            return
        text: Any = content.get("text")
        if kind == "send":
            self._report_input_error(lambda: self.generate(text))
        elif kind == "edit_last":
            self._report_input_error(lambda: self.edit_last(text))
        else:
            self._report_input_error(self.regenerate)

    # -- display ------------------------------------------------------------------------------
    def _fallback(self) -> tuple[str, dict[str, str]]:
        with self._lock:  # the transcript and its turns, read together
            transcript = self.transcript
            turns = list(self._turns)
        # The saved output marks an answer cut off at max_new_tokens (not a transcript key:
        # the transcript's shape is public and stays as it is).
        for message, turn in zip(transcript[1::2], turns, strict=True):
            run = turn.run
            message["finish_reason"] = (
                run.metrics["finish_reason"] if run is not None and run.done else None
            )
        status = "idle"
        if transcript:
            status = transcript[-1]["status"]
        error = self.error if self._run is not None and status in TERMINAL else None
        return status, chat_fallback_bundle(status, transcript, error_summary(error))

    def __repr__(self) -> str:
        # The default repr serializes every trait (the whole transcript); this one stays cheap.
        return f"<ChatWidget status={self.status!r} turns={len(self._turns)}>"
