"""A chat's recording, as a :class:`~nbstream.ChatWidget` saves, replays and resumes it.

``ChatWidget(nbstream.load(path))`` replays a saved chat without a model: each message
sent gets its recorded answer at its recorded pace; ``ChatWidget(model, tokenizer,
history=nbstream.load(path))`` resumes it: the recorded turns, each answer an ended
replay, and the model answers the next message. The format is ``nbstream.chat/1`` of
:mod:`nbstream.recording`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..conversation import Conversation, Turn, check_system
from ..generation import Generation, replay
from ..recording import ChatRecording, RecordedTurn

__all__ = ["RESUME", "given_turns", "recorded_chat", "replayed_run", "resumed"]

#: What a chat replaying a recording offers instead of a model's answer.
RESUME = "resume it on a model: ChatWidget(model, tokenizer, history=nbstream.load(path))"


def recorded_chat(conversation: Conversation, settings: Mapping[str, Any]) -> ChatRecording:
    """The chat's recording: every turn (the variant shown), its system message and settings.

    ``settings``: the widget's, by setting name (those unset are left out). Raises
    ``ValueError`` when the system message is not one (an empty one).
    """
    return ChatRecording(
        system=check_system(conversation.system),
        keep_thinking=bool(conversation.keep_thinking),
        settings={k: v for k, v in settings.items() if v is not None},
        turns=tuple(_recorded_turn(turn) for turn in conversation.turns),
    )


def _recorded_turn(turn: Turn) -> RecordedTurn:
    if turn.run is None:
        return RecordedTurn(turn.user, turn.answer)
    return RecordedTurn(turn.user, turn.text, turn.run.to_recording(), turn.kept)


def _turn_of(recorded: RecordedTurn, speed: float | None) -> Turn:
    """A turn of the conversation for a recorded one: its answer replayed (or its text)."""
    if recorded.recording is None:
        return Turn(recorded.user, answer=recorded.answer)
    turn = Turn(recorded.user, replay(recorded.recording, speed))
    turn.kept = recorded.kept
    return turn


def resumed(chat: ChatRecording) -> list[Turn]:
    """The recorded turns, each answer an ended replay of its recording (instant)."""
    turns = [_turn_of(recorded, None) for recorded in chat.turns]
    for turn in turns:
        if turn.run is not None:
            turn.run.wait_done()
    return turns


def given_turns(chat: ChatRecording) -> list[Turn]:
    """The turns a replayed chat starts with: those its history gave as text."""
    given = []
    for recorded in chat.turns:
        if recorded.recording is not None:
            break
        given.append(Turn(recorded.user, answer=recorded.answer))
    return given


def replayed_run(
    chat: ChatRecording,
    conversation: Conversation,
    text: Any,
    replace_last: bool,
    speed: float | None,
) -> Generation:
    """Replay the next recorded answer (or the last again), if ``text`` is its message.

    ``text``: None, "" (the next recorded message) or a checked message. Called with the
    widget's lock held and no run in progress; the new turn joins ``conversation``.
    """
    turns = conversation.turns
    if replace_last and not turns:
        raise ValueError("there is no message to replay again yet; send one first")
    index = len(turns) - (1 if replace_last else 0)
    if index >= len(chat.turns):
        raise ValueError(
            f"every recorded turn ({len(chat.turns)}) has been replayed: this chat "
            f"replays a recording and has no model to answer more; {RESUME}"
        )
    recorded = chat.turns[index]
    if text not in (None, "") and text != recorded.user:
        raise ValueError(
            f"this chat replays a recording and has no model to answer {text!r:.80}: "
            f"the next recorded message is {recorded.user!r:.200}; send it (or an "
            f"empty message) to replay its recorded answer, or {RESUME}"
        )
    if recorded.recording is None:
        raise ValueError(
            "the recorded answer to this message was given as text in its history, "
            "not generated: there is nothing to replay"
        )
    turn = _turn_of(recorded, speed)
    conversation.turns = [*turns[:index], turn]
    assert turn.run is not None
    return turn.run
