"""``ChatWidget``: a multi-turn chat in the notebook, streaming each answer like ``StreamWidget``.

A conversation is a list of turns: a user message and the answer to it. ``history`` is what
the next :meth:`ChatWidget.generate` gives the model: the system message if any, then every
turn whose answer completed (or whose partial answer the user kept), as alternating user
and assistant messages. ``transcript`` is every turn shown, whatever its end state. Only
the newest answer streams; its text reaches the views as deltas of the current run (as in
``StreamWidget``), and the transcript trait changes only when a turn starts or ends.
See PROTOCOL.md for every trait and message.

A chat saves its transcript (:meth:`ChatWidget.save`, format ``nbstream.chat/1`` of
:mod:`nbstream.recording`). ``ChatWidget(nbstream.load(path))`` replays it, turn by turn,
without a model; ``ChatWidget(model, tokenizer, history=nbstream.load(path))`` resumes it:
its turns are the recorded ones, and the model answers the next message.

This module composes the parts, each in a module named for what it holds:
:mod:`~nbstream.widgets.chat_turns` (the conversation, the run each message starts, a
recorded chat replayed), :mod:`~nbstream.widgets.chat_page` (the page's messages, answered
through the chat's API), :mod:`~nbstream.widgets.chat_replay` (a chat's recording: saved,
replayed, resumed) and :mod:`~nbstream.widgets.chat_view` (the turns as the views and the
saved output show them).
"""

from __future__ import annotations

import functools
import os
import warnings
from pathlib import Path
from typing import Any, overload

import traitlets

from .._errors import input_checked
from ..generation import Generation
from ..recording import save_chat
from .branches import BranchingWidget
from .chat_page import ChatPage
from .chat_replay import recorded_chat
from .chat_turns import ChatTurns, check_idle
from .chat_view import saved_chat
from .settings_panel import PANEL_SETTINGS

__all__ = ["ChatWidget"]

_STATIC = Path(__file__).parent.parent / "static"


class ChatWidget(BranchingWidget):
    """A multi-turn chat: each turn a message, the newest answer streamed with its state and Stop.

    ``generate``, ``wait``, ``stop`` and ``on_complete`` behave as on ``StreamWidget``;
    ``generate(text)`` takes the user message instead of a prompt.

    A stopped or failed answer stays in the transcript, marked, and is left out of the
    ``history`` the model sees next unless it is kept (:meth:`keep_partial`, or the "Keep
    partial" button).

    The last answer can be branched (:meth:`branch`, or "Continue with this token" in the
    alternatives popover): its bubble then switches between the variants (:meth:`show`:
    0 is the original answer, k is ``branches[k - 1]``), and only the variant shown is in
    ``history`` and ``transcript``. A partial answer kept stays with its variant: showing
    that variant again puts it back in ``history``.

    A saved chat (:meth:`save`) comes back two ways. ``ChatWidget(nbstream.load(path))``
    replays it without a model: each message sent (an empty one, or :meth:`generate` with
    no text, is the next recorded one) gets its recorded answer at its recorded pace,
    marked as a replay; a message that was not recorded is refused, naming the recorded
    one. ``ChatWidget(model, tokenizer, history=nbstream.load(path))`` resumes it: every
    recorded turn is there, with its state, and the model answers the next message with
    the recorded ``history``.

    Args:
        model: As for :class:`~nbstream.StreamWidget`: ``None`` (the default model), a
            loaded causal LM with a chat template, a hub id or folder, an
            :class:`~nbstream.Endpoint`, or a chat's recording (``nbstream.load(path)``:
            replayed, no model).
        tokenizer: The loaded model's tokenizer (only with a loaded model).
        system: The system message sent first; ``None`` for the chat template's default
            (or, replaying or resuming a recording, its system message).
        keep_thinking: Send a reasoning model's thinking back in its tags with ``history``.
        history: The conversation to start from: a list of ``{"role", "content"}``
            messages, or a chat's recording (``nbstream.load(path)``) to resume.
        **settings: The widget's settings (the names of :func:`nbstream.stream`) and the
            teaching views' toggles.

    Example:
        >>> import nbstream
        >>> chat = nbstream.ChatWidget(system="Answer briefly.", max_new_tokens=64)
        >>> chat                                # display it
        >>> chat.generate("Name two colors.")
        >>> chat.wait()                         # the answer, if it completed
        >>> chat.generate("And two more?")      # the model sees the first turn too
        >>> chat.history                        # exactly what the next generate gives the model
        >>> chat.save("colors.json")            # later: nbstream.ChatWidget(nbstream.load(...))
    """

    _esm = _STATIC / "chat.js"
    _css = _STATIC / "chat.css"

    # -- internal synced state (status, metrics, error_info, input_error, run_id: RunWidget) --
    #: The transcript as the views show it, set when a turn starts or ends (never per
    #: frame): the answer being generated has content "" and streams as deltas. Its
    #: ``in_history`` is false only for a turn that ended out of the conversation (stopped
    #: or failed, not kept): the view marks those "not in the conversation".
    _messages: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)

    # -- public synced state ------------------------------------------------------------------
    #: The system message sent first (None: the chat template's default, if any). A setting
    #: like the others: the settings panel edits it, and an invalid one (an empty message)
    #: is reported in ``settings_errors`` and refused by the next answer. It cannot change
    #: while an answer is being generated (RuntimeError).
    system = traitlets.Any(None, allow_none=True).tag(sync=True)

    def __init__(
        self,
        model: Any = None,
        tokenizer: Any = None,
        system: str | None = None,
        *,
        keep_thinking: bool = False,
        history: Any = None,
        **settings: Any,
    ) -> None:
        # The conversation, the run of each turn, a recorded chat replayed (checked first).
        self._turns = ChatTurns(model, system, keep_thinking, history)
        self._conversation = self._turns.conversation
        super().__init__(self._turns.model, tokenizer, **settings)
        # The page's messages, answered through this chat's own API.
        self._page = ChatPage(self, report=self._report_input_error, busy=self._slot.busy)
        self.system = self._conversation.system
        if self._turns.recorded is not None:
            self._reset_turns()  # the answers its history gave as text; the others replay
        elif history is not None:
            self.history = history

    @property
    def keep_thinking(self) -> bool:
        """Whether a reasoning model's earlier thinking goes back to it in ``history``.

        The thinking goes in its tags, before each answer. Off by default: the model gets its
        answers only; ``transcript`` keeps the thinking either way, under ``"thinking"``.
        """
        return self._turns.keep_thinking

    @keep_thinking.setter
    def keep_thinking(self, value: bool) -> None:
        self._turns.keep_thinking = value

    # -- Python API ---------------------------------------------------------------------------
    @input_checked
    def generate(self, text: str | None = None, **settings: Any) -> Generation:
        """Add a user message; its answer streams into a new message.

        The model gets ``history`` plus this message.

        Args:
            text: The user message (replaying a recording: ``None``, or the next recorded
                message, whose recorded answer is replayed).
            **settings: Override the widget's settings for this answer.

        Returns:
            The answer's run, a :class:`~nbstream.Generation`.

        Raises:
            RuntimeError: An answer is queued or running.
            ValueError: An empty message, or a conversation over the model's context (or,
                replaying a recording, a message it did not record); nothing starts and the
                transcript is unchanged.

        Example:
            >>> chat.generate("Name two colors.").wait()
        """
        return self._send_turn(text, settings, replace_last=False)

    @overload
    def send(self, content: str, buffers: None = None, **settings: Any) -> Generation: ...
    @overload
    def send(self, content: Any, buffers: Any = None) -> None: ...
    def send(self, content: Any, buffers: Any = None, **settings: Any) -> Generation | None:
        """Ipywidgets' ``Widget.send(content, buffers)``: a custom message to the views.

        Deprecated as a chat turn: ``send(text)`` with a string still starts one, with a
        ``DeprecationWarning``; use :meth:`generate`.

        Args:
            content: A dict (a message to the views), or a string (deprecated: a turn).
            buffers: Binary buffers sent with a message to the views.
            **settings: With a string, the turn's settings, as for :meth:`generate`.

        Returns:
            The run of a deprecated string turn; else ``None``.
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

    @input_checked
    def edit_last(self, text: str, **settings: Any) -> Generation:
        """Replace the last user message (and its answer) by ``text``, and answer it.

        Args:
            text: The new last user message.
            **settings: Override the widget's settings for this answer.

        Returns:
            The new answer's run.

        Example:
            >>> chat.edit_last("Name three colors.").wait()
        """
        return self._send_turn(text, settings, replace_last=True)

    @input_checked
    def regenerate(self, **settings: Any) -> Generation:
        """Answer the last user message again; the new answer replaces the old one.

        Args:
            **settings: Override the widget's settings for this answer (e.g. a seed).

        Returns:
            The new answer's run.

        Example:
            >>> chat.regenerate(do_sample=True, seed=1).wait()
        """
        with self._lock:
            text = self._turns.last_message()
        return self._send_turn(text, settings, replace_last=True)

    @input_checked
    def branch(self, step: int, token: Any, **settings: Any) -> Generation:
        """Continue the last answer (the variant shown) as if it had taken ``token`` at ``step``.

        The branch streams into the last bubble and becomes the answer shown, so
        ``history`` holds it once it completes. The original and every branch stay
        (:attr:`branches`, :meth:`show`). See :meth:`nbstream.Generation.branch`.

        Args:
            step: The step (0-based token index) where the answer takes another token.
            token: A token id, or one of ``run.trace[step].alternatives``.
            **settings: Override the run's own settings for the branch.

        Returns:
            The branch's run.

        Raises:
            RuntimeError: An answer is being generated.
            ValueError: No answer that a run made.

        Example:
            >>> chat.generate("The sky is", alternatives=5).wait()
            >>> chat.branch(0, chat.run.trace[0].alternatives[1]).wait()
        """
        return self._launch(lambda: self._conversation.branch_last(step, token, settings))

    @property
    def branches(self) -> list[Generation]:
        """Every branch of the last answer, in the order made.

        The original is not one: :meth:`show` and :attr:`shown` count from it, so 0 is the original
        answer and k is ``branches[k - 1]``.
        """
        with self._lock:
            return list(self._variant_runs()[1:])

    def _variant_runs(self) -> list[Generation]:
        return self._turns.variant_runs()

    def _select(self, run: Generation) -> None:
        self._turns.select(run)

    @input_checked
    def keep_partial(self, turn: int = -1) -> None:
        """Keep a cancelled or failed answer (the newest by default) in the ``history``.

        The turn's user message and partial answer then reach the model with the next
        message, as if the answer had completed. Of a branched answer, the variant shown
        is kept, and stays kept: :meth:`show` it again and it is back in ``history``.

        Args:
            turn: Which turn (an index into the transcript's turns; -1 the newest).

        Raises:
            RuntimeError: An answer is being generated (it was asked without the partial
                one, and ``history`` must not say otherwise).

        Example:
            >>> chat.generate("Tell me a long story")
            >>> chat.stop()
            >>> chat.keep_partial()                 # the next answer sees the story so far
        """
        with self._lock:
            check_idle(self._slot.busy(), "before keeping a partial answer")
            self._conversation.keep_partial(turn)
            with self.hold_sync():
                self.input_error = ""
                self._messages = self._turns.view_messages()
            self._publish_fallback()

    def clear(self) -> None:
        """Stop any answer and empty the conversation (the system message stays)."""
        self.stop()
        with self._lock:
            self._turns.clear()  # a replay starts over
            self._reset_turns()

    @property
    def history(self) -> list[dict[str, str]]:
        """What the next :meth:`generate` gives the model (before its own user message).

        The system message if any, then the user message and answer of every turn that
        completed or whose partial answer was kept, as ``{"role", "content"}`` dicts.
        Settable, to seed a conversation: the transcript becomes these turns. Set to a
        chat's recording (``nbstream.load(path)``), it resumes that chat: the transcript
        becomes the recorded turns, each answer with its recorded state, and ``history``
        is the recorded one.
        """
        with self._lock:
            return self._conversation.history

    @history.setter
    def history(self, messages: Any) -> None:
        turns = self._turns.resumable(messages)  # a recording's turns, else None
        with self._lock:
            check_idle(self._slot.busy(), "before setting its history")
            self._turns.seed(messages, turns)
            self.system = self._conversation.system
            self._reset_turns()

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """Every message shown, in order, with the state of each answer.

        User messages are ``{"role": "user", "content", "in_history"}``; answers add
        ``"status"`` (``queued``, ``running``, ``complete``, ``failed``, ``cancelled``) and
        ``"kept"``. ``in_history`` says whether the next :meth:`generate` gives it to the model.
        """
        with self._lock:
            return self._conversation.transcript

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the whole transcript to ``path``: a chat's recording (JSON).

        Every turn is saved: the user's message and the answer shown, each answer with the
        recording of its run (tokens, their times, alternatives, thinking, end state,
        metrics and record), and whether it was kept; then the system message and the
        settings. ``nbstream.load(path)`` reads it back: ``ChatWidget(recording)`` replays
        it, ``ChatWidget(model, tokenizer, history=recording)`` resumes it. Of a branched
        answer, the variant shown is saved.

        Args:
            path: Where to write it (the format is ``nbstream.chat/1``, see
                :mod:`nbstream.recording`).

        Returns:
            The path written.

        Raises:
            RuntimeError: An answer is being generated.
            ValueError: The system message is not one (an empty one): fix it first.

        Example:
            >>> chat.save("lesson.json")
            >>> nbstream.ChatWidget(nbstream.load("lesson.json"))   # replays it, no model
        """
        with self._lock:
            check_idle(self._slot.busy(), "before saving it")
            panel = {setting: getattr(self, trait) for trait, setting in PANEL_SETTINGS.items()}
            chat = recorded_chat(self._conversation, {**self._settings, **panel})
        return save_chat(chat, path)

    # -- internals ------------------------------------------------------------------------------
    @traitlets.validate("system")
    def _valid_system(self, proposal: dict[str, Any]) -> Any:
        value = proposal["value"]
        # The answer being generated was asked with the old one: history must not lie.
        check_idle(value != self.system and self._slot.busy(), "first")
        return value

    @traitlets.observe("system")
    def _system_changed(self, change: dict[str, Any]) -> None:
        # Kept as given, like every setting: a bad one is reported and refused at the next
        # answer (settings_errors), never silently dropped from what the model gets.
        self._conversation.system = change["new"]
        self._check_setting("system")

    def _setting_error(self, name: str, value: Any) -> str | None:
        if name != "system":
            return super()._setting_error(name, value)
        return self._turns.system_error(value)

    def _send_turn(self, text: Any, settings: dict[str, Any], replace_last: bool) -> Generation:
        run_settings = functools.partial(self._run_settings, settings)
        turn = self._turns.next_turn(text, replace_last, run_settings, self._model, self._tokenizer)
        return self._launch(turn)

    def _on_start(self, run: Generation, run_id: int) -> None:
        self._messages = self._turns.started(run_id)
        super()._on_start(run, run_id)

    def _token_runs(self) -> list[tuple[int, Generation]]:
        # Every answer shown that came from a run (seeded history turns have no tokens).
        return self._turns.token_runs()

    def _end_traits(self, run: Generation) -> dict[str, Any]:
        return {**super()._end_traits(run), "_messages": self._turns.view_messages()}

    def _reset_turns(self) -> None:
        """Show the conversation's new turns from scratch (a clear, a history set)."""
        with self._lock:
            with self.hold_sync():
                self._forget_run()
                self._messages = self._turns.view_messages()
                self._publish_branches()
            self._publish_fallback()

    # -- from the views -----------------------------------------------------------------------
    def _on_view_message(self, kind: Any, content: dict[str, Any]) -> None:
        if kind in ("branch", "show_branch"):
            self._branch_message(kind, content)
        elif kind in ("clear", "keep", "send", "edit_last", "regenerate"):
            self._page.answer(kind, content)  # through the chat's own API, as a call

    # -- display ------------------------------------------------------------------------------
    def _fallback(self) -> tuple[str, dict[str, str]]:
        with self._lock:  # the transcript and its turns, read together
            transcript, turns = self.transcript, list(self._conversation.turns)
        return saved_chat(transcript, turns, self._slot.run)

    def __repr__(self) -> str:
        # The default repr serializes every trait (the whole transcript); this one stays cheap.
        return self._turns.describe(self.status)
