"""A ChatWidget's turns: the conversation it holds, the run of each turn, a recorded chat's.

:class:`ChatTurns` is what a :class:`~nbstream.ChatWidget` knows of its conversation apart
from its views: the turns and the rules of what the model gets
(:class:`~nbstream.conversation.Conversation`, shared with the terminal chat), the run each
message starts (the model's answer, or a recorded chat's replayed one), a new history or a
recording to resume, and the turns as the views list them. The widget holds its lock around
every call and follows the runs; nothing here sends to a page.

Example:
    >>> turns = ChatTurns(model, system="Answer briefly.", keep_thinking=False, history=None)
    >>> start = turns.next_turn("Name two colors.", False, lambda: {}, model, tokenizer)
    >>> run = start()                  # with the chat's lock held, no run in progress
    >>> turns.view_messages()[0]["content"]
    'Name two colors.'
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..backends.replay import ReplayBackend
from ..conversation import Conversation, Turn, check_system, check_text
from ..generation import Generation
from ..recording import ChatRecording, Recording
from .chat_replay import RESUME, given_turns, replayed_run, resumed
from .chat_view import view_messages

__all__ = ["ChatTurns", "check_idle"]

#: How a ChatWidget refuses what must wait for its answer (``check_idle``).
_ANSWERING = "the chat is answering; call stop() or wait() "


def check_idle(busy: bool, until: str) -> None:
    """Refuse what changes the conversation while an answer is queued or running.

    Args:
        busy: Whether an answer is queued or running.
        until: What waits, in words after "call stop() or wait()" (``"before saving it"``).

    Raises:
        RuntimeError: ``busy``: the answer was asked with the conversation as it is.
    """
    if busy:
        raise RuntimeError(f"{_ANSWERING}{until}")


class ChatTurns:
    """A ChatWidget's conversation: its turns, the run each message starts, a recorded chat.

    Args:
        model: The chat's model, or a chat's recording (``nbstream.load(path)``: replayed,
            no model).
        system: The system message; ``None`` for the template's (or the recording's).
        keep_thinking: Send a reasoning model's thinking back with ``history``.
        history: The conversation to start from (see :attr:`ChatWidget.history`), or
            ``None``; refused when replaying a chat.

    Raises:
        TypeError: ``keep_thinking`` not a bool, one run's recording (not a chat's), or a
            replayed chat given a history.

    Example:
        >>> ChatTurns(nbstream.load("lesson.json"), None, False, None).recorded is not None
        True
    """

    def __init__(self, model: Any, system: str | None, keep_thinking: bool, history: Any) -> None:
        if not isinstance(keep_thinking, bool):
            raise TypeError(f"keep_thinking must be True or False, got {keep_thinking!r:.80}")
        if isinstance(model, ChatRecording):
            model = ReplayBackend(model)  # replayed at its recorded pace
        if isinstance(model, Recording):
            raise TypeError(
                "this is one run's recording (run.save), not a chat's: "
                "StreamWidget(recording) replays it; ChatWidget replays a chat saved with "
                "chat.save(path)"
            )
        #: The model the chat's widget runs: a recorded chat's replay, or the one given.
        self.model = model
        replay = isinstance(model, ReplayBackend)
        #: The chat the widget replays (no model), or None.
        self.recorded = (
            model.recording if replay and isinstance(model.recording, ChatRecording) else None
        )
        if self.recorded is not None:
            if history is not None:
                raise TypeError(
                    "a replayed chat has its recorded history; to resume it on a model, pass "
                    "the model and the recording: ChatWidget(model, tokenizer, history=recording)"
                )
            system = self.recorded.system if system is None else system
            keep_thinking = keep_thinking or self.recorded.keep_thinking
        #: The turns and the rules of what the model gets, shared with the terminal chat.
        self.conversation = Conversation(system, keep_thinking=keep_thinking)
        self._speed = model.speed if replay else None
        self.given()

    @property
    def turns(self) -> list[Turn]:
        """The turns shown, in order."""
        return self.conversation.turns

    @property
    def keep_thinking(self) -> bool:
        """Whether a reasoning model's earlier thinking goes back to it (checked: a bool)."""
        return bool(self.conversation.keep_thinking)

    @keep_thinking.setter
    def keep_thinking(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"keep_thinking must be True or False, got {value!r:.80}")
        self.conversation.keep_thinking = value

    # -- the next turn ------------------------------------------------------------------------
    def next_turn(
        self,
        text: Any,
        replace_last: bool,
        settings: Callable[[], dict[str, Any]],
        model: Any,
        tokenizer: Any,
    ) -> Callable[[], Generation]:
        """What starts the run of the message ``text`` (the last one's again: ``replace_last``).

        Checked now, before any lock: the message, and (a model answering) the settings of the
        run. The returned call starts it, with the chat's lock held and no run in progress; a
        refusal then (a conversation over the context, a message the recording did not
        record) leaves the turns as they were.

        Args:
            text: The user message (replaying: ``None`` or "" for the next recorded one).
            replace_last: Replace the last turn (edit it, or answer it again).
            settings: The run's settings, the widget's with the call's (checked when called).
            model: The chat's model.
            tokenizer: Its tokenizer.

        Returns:
            The call that starts the run.
        """
        if self.recorded is not None:
            # The recorded settings apply, as in a StreamWidget replaying a run.
            recorded, speed = self.recorded, self._speed
            checked = check_text(text) if text not in (None, "") else text
            return lambda: replayed_run(recorded, self.conversation, checked, replace_last, speed)
        if text is None:
            raise TypeError("generate(text): the user message is missing")
        text = check_text(text)
        merged = settings()

        def make_run() -> Generation:  # with the lock held, and no run in progress
            if replace_last and not self.turns:
                raise ValueError("there is no message to edit yet; use generate(text)")
            return self.conversation.start(
                model,
                tokenizer,
                text,
                merged,
                replace_last=replace_last,
                advice="clear the chat, seed a shorter one (chat.history = chat.history[-4:]), "
                "or lower max_new_tokens",
            )

        return make_run

    def last_message(self) -> str:
        """The last user message (to answer again); ``ValueError`` before any."""
        if not self.turns:
            raise ValueError("there is no answer to regenerate yet; send a message first")
        return self.turns[-1].user

    def started(self, run_id: int) -> list[dict[str, Any]]:
        """The newest turn's run started as ``run_id``: the transcript for the views."""
        self.turns[-1].run_id = run_id
        return self.view_messages()

    # -- the answers shown --------------------------------------------------------------------
    def variant_runs(self) -> list[Generation]:
        """The last answer's runs: the original, then its branches (none without a run)."""
        turns = self.turns
        if not turns or turns[-1].run is None:
            return []
        return turns[-1].variants or [turns[-1].run]

    def select(self, run: Generation) -> None:
        """Show ``run``, one of :meth:`variant_runs`, as the last answer."""
        self.conversation.show_variant(self.variant_runs().index(run))

    def token_runs(self) -> list[tuple[int, Generation]]:
        """Every answer shown that came from a run, with its run id (not a seeded turn's)."""
        return [(t.run_id, t.run) for t in self.turns if t.run is not None and t.run_id is not None]

    def view_messages(self) -> list[dict[str, Any]]:
        """The transcript as the views show it (``ChatWidget._messages``)."""
        return view_messages(self.turns)

    # -- the conversation anew ----------------------------------------------------------------
    def clear(self) -> None:
        """Forget every turn; a replayed chat starts over (with its history's given turns)."""
        self.conversation.clear()
        self.given()

    def given(self) -> None:
        """A replayed chat's first turns: the answers its history gave as text (the rest replay).

        Nothing for a chat on a model.
        """
        if self.recorded is not None:
            self.conversation.turns = given_turns(self.recorded)

    def resumable(self, messages: Any) -> list[Turn] | None:
        """Check a new ``history``: a chat's recording gives its turns (else ``None``).

        Raises:
            RuntimeError: This chat replays a recording.
            TypeError: A string, a path or one run's recording.
        """
        if self.recorded is not None:
            raise RuntimeError(
                "this chat replays a recording: its history is the recorded one; to go on "
                f"from it, {RESUME}"
            )
        if isinstance(messages, (str, os.PathLike, Recording)):
            raise TypeError(
                "history must be a list of {'role': ..., 'content': ...} messages, or a "
                "chat's recording: load a file saved by ChatWidget.save first "
                "(history=nbstream.load(path))"
            )
        return resumed(messages) if isinstance(messages, ChatRecording) else None

    def seed(self, messages: Any, turns: list[Turn] | None) -> None:
        """Replace the conversation: ``messages`` checked first, or a recording's ``turns``."""
        if turns is None:
            self.conversation.seed(messages)  # checked first: a bad one changes nothing
            return
        assert isinstance(messages, ChatRecording)
        self.conversation.system = messages.system
        self.conversation.keep_thinking = messages.keep_thinking
        self.conversation.turns = turns

    @staticmethod
    def system_error(value: Any) -> str | None:
        """What is wrong with ``value`` as the system message, or ``None`` (a setting's error)."""
        try:
            check_system(value)
        except (TypeError, ValueError) as exc:
            return str(exc)
        return None

    def describe(self, status: str) -> str:
        """The chat's repr: its state and turns, and what of them replays a recording."""
        turns = list(self.turns)
        if self.recorded is not None:
            return f"<ChatWidget replay status={status!r} turns={len(turns)}>"
        recorded = sum(1 for t in turns if t.run is not None and t.run.is_replay)
        of = f" ({recorded} replayed from a recording)" if recorded else ""
        return f"<ChatWidget status={status!r} turns={len(turns)}{of}>"
