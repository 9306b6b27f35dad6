"""The rules of a chat conversation, one piece of code for every front end.

:class:`nbstream.ChatWidget` in the notebook and ``nbstream chat`` in the terminal both keep
their turns in a :class:`Conversation`, so a conversation holds the same messages in either:

- a turn is a user message and the answer to it: a run, or (a seeded history) a given text;
- the ``history`` the next answer gets is the system message if any, then the user message
  and answer of every turn whose answer completed, or whose partial answer was kept on
  purpose (:meth:`Conversation.keep_partial`); a stopped or failed answer is left out;
- an answer being generated is not in the history yet, and not left out of it either: it
  joins the history if it completes (:attr:`Turn.left_out` is false while it runs);
- an answer can be branched (:meth:`Conversation.branch_last`: "what if it had taken this
  token?"); a turn then holds every variant of its answer, and only the one shown
  (:attr:`Turn.run`, :meth:`Conversation.show_variant`) is in the history and the
  transcript; a kept partial belongs to its variant, and is in the history again
  whenever that variant is shown;
- a conversation that no longer fits the model's context is refused before anything
  starts (:class:`~nbstream.backends.local.ContextLengthError`, saying what to do).

A :class:`Conversation` holds no lock: its owner (the widget, the terminal loop) serializes
the calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .backends.local import ContextLengthError, check_encodable
from .generation import CANCELLED, COMPLETE, FAILED, Generation, stream

__all__ = ["Conversation", "Turn", "check_system", "check_text"]

HISTORY_ROLES = ("system", "user", "assistant")


@dataclass
class Turn:
    """A user message and its answer: a run, or (seeded from a history) a given text."""

    user: str
    run: Generation | None = None
    answer: str = ""
    #: The owner's number for the run (a widget's ``run_id``); None for a seeded answer.
    run_id: int | None = None
    #: Every variant of the answer once it was branched: the original (variant 0), then
    #: each branch in the order made (variant k is the k-th branch: a ChatWidget's
    #: ``branches[k - 1]``); ``run`` is the one shown. Empty while there is only the
    #: original.
    variants: list[Generation] = field(default_factory=list)
    #: The variants whose partial answer was kept (:meth:`Conversation.keep_partial`): a
    #: keep belongs to the answer kept, so showing that variant again brings it back.
    kept_runs: list[Generation] = field(default_factory=list, repr=False)

    @property
    def kept(self) -> bool:
        """Whether the answer shown is a partial one kept in the history on purpose."""
        return self.run is not None and any(r is self.run for r in self.kept_runs)

    @kept.setter
    def kept(self, value: bool) -> None:
        # Compared by identity: two runs are the same answer only if they are one object.
        others = [r for r in self.kept_runs if r is not self.run]
        self.kept_runs = [*others, self.run] if value and self.run is not None else others

    @property
    def status(self) -> str:
        """The answer's state: its run's, or complete for an answer given as text."""
        return self.run.status if self.run is not None else COMPLETE

    @property
    def ended(self) -> bool:
        """Whether the answer is over: it has no run, or its run is done."""
        return self.run is None or self.run.done

    @property
    def text(self) -> str:
        """The answer's text so far: its run's partial text, or the answer given as text."""
        return self.run.partial_text if self.run is not None else self.answer

    @property
    def in_history(self) -> bool:
        """Whether the next answer gets this turn: it completed, or its partial was kept."""
        if self.run is None:
            return True
        if not self.run.done:
            return False
        return self.run.status == COMPLETE or self.kept

    @property
    def left_out(self) -> bool:
        """Whether the turn ended out of the conversation (stopped or failed, not kept).

        False while the answer is generated: it is not out, it joins if it completes.
        """
        return self.ended and not self.in_history


def check_text(text: Any, what: str = "the message") -> str:
    """``text`` if it can be a message; raises ``TypeError``/``ValueError`` saying why not."""
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"{what} is empty; type some text")
    check_encodable(text, what)
    return text


def check_system(system: Any) -> str | None:
    """A system message (None: the chat template's default), checked as a message."""
    if system is None:
        return None
    return check_text(system, "the system message")


def parse_history(messages: Any) -> tuple[str | None, list[tuple[str, str]]]:
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
        if role not in HISTORY_ROLES:
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
            system = check_text(content, f"history[{i}] (the system message)")
        elif role == "user":
            if pending is not None:
                raise ValueError(
                    f"history[{i}] is a user message, but history[{i - 1}] (user) has no "
                    "answer: user and assistant messages alternate"
                )
            pending = check_text(content, f"history[{i}] (a user message)")
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


class Conversation:
    """A system message and the turns of a chat, with the rules of what the model gets.

    ``system`` is kept as given (a front end checks it with :func:`check_system` and reports
    a bad one as it reports a bad setting); ``turns`` is the transcript, in order.

    Example::

        >>> import nbstream
        >>> from nbstream.conversation import Conversation
        >>> model, tokenizer = nbstream.load_model()
        >>> chat = Conversation(system="Answer briefly.")
        >>> chat.start(model, tokenizer, "Name two colors.", {"max_new_tokens": 30}).wait()
        >>> chat.history          # the system message, the question and its answer
    """

    def __init__(self, system: str | None = None, *, keep_thinking: bool = False) -> None:
        self.system: Any = check_system(system)
        self.turns: list[Turn] = []
        #: Whether a reasoning model's earlier thinking goes back to it in the history, in
        #: its tags before the answer (for models trained to see it); by default only the
        #: answers do.
        self.keep_thinking = keep_thinking

    @property
    def history(self) -> list[dict[str, str]]:
        """What the next answer gets before its own user message (see the module's rules)."""
        return self.history_of(self.turns)

    def history_of(self, turns: Sequence[Turn]) -> list[dict[str, str]]:
        """The history a conversation of ``turns`` would give the model."""
        history = [] if self.system is None else [{"role": "system", "content": self.system}]
        for t in turns:
            if t.in_history:
                history.append({"role": "user", "content": t.user})
                history.append({"role": "assistant", "content": self._answer_of(t)})
        return history

    def _answer_of(self, turn: Turn) -> str:
        run = turn.run
        if not self.keep_thinking or run is None:
            return turn.text
        thinking, tags = run.thinking, run.thinking_tags
        if thinking is None or tags is None:
            return turn.text
        return f"{tags[0]}{thinking}{tags[1]}\n\n{turn.text}"

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """Every message, in order, with the state of each answer.

        User messages are ``{"role": "user", "content", "in_history"}``; answers add
        ``"status"`` and ``"kept"``, and ``"thinking"`` for an answer of a reasoning model
        that thought (its thinking, kept apart from the content). ``in_history``: whether
        the next answer gets it.
        """
        out: list[dict[str, Any]] = []
        for t in list(self.turns):
            status, text, used = t.status, t.text, t.in_history
            out.append({"role": "user", "content": t.user, "in_history": used})
            answer = {
                "role": "assistant",
                "content": text,
                "status": status,
                "kept": t.kept,
                "in_history": used,
            }
            thinking = t.run.thinking if t.run is not None else None
            if thinking is not None:
                answer["thinking"] = thinking
            out.append(answer)
        return out

    def start(
        self,
        model: Any,
        tokenizer: Any,
        text: Any,
        settings: dict[str, Any],
        *,
        replace_last: bool = False,
        advice: str = "start a new conversation or lower max_new_tokens",
    ) -> Generation:
        """Start the answer to ``text`` (replacing the last turn if ``replace_last``).

        The model gets :attr:`history` (without the replaced turn) and ``text``. Raises
        before anything starts, the turns unchanged: ``TypeError``/``ValueError`` for an
        empty message or bad settings, :class:`ContextLengthError` when the conversation
        no longer fits the model's context (its message ends with ``advice``: what to do
        in the front end that asked).
        """
        text = check_text(text)
        turns = self.turns
        if replace_last:
            if not turns:
                raise ValueError("there is no message to replace yet; send one first")
            turns = turns[:-1]
        messages = [*self.history_of(turns), {"role": "user", "content": text}]
        try:
            run = stream(model, tokenizer, messages, **settings)
        except ContextLengthError as exc:
            raise ContextLengthError(
                f"the conversation is too long for the model: with this message it is "
                f"{exc.prompt_tokens} tokens, plus max_new_tokens ({exc.max_new_tokens}) "
                f"for the answer, over the model's context of {exc.context} tokens. "
                f"{advice[:1].upper()}{advice[1:]}; nothing was started",
                exc.prompt_tokens,
                exc.max_new_tokens,
                exc.context,
            ) from None
        self.turns = [*turns, Turn(text, run)]
        return run

    def keep_partial(self, turn: int = -1) -> Turn:
        """Keep a cancelled or failed answer in the history.

        The newest by default; of a branched answer, the variant shown. The keep stays with that
        variant: showing it again (:meth:`show_variant`) puts it back in the history.
        """
        if not isinstance(turn, int) or isinstance(turn, bool):
            raise TypeError(f"turn must be an int, got {type(turn).__name__}")
        try:
            t = self.turns[turn]
        except IndexError:
            raise ValueError(f"there is no turn {turn}; the chat has {len(self.turns)}") from None
        if t.run is None or not t.run.done or t.run.status not in (CANCELLED, FAILED):
            raise ValueError(
                f"the answer of turn {turn} is {t.status}; only a cancelled or failed "
                "answer can be kept as partial"
            )
        if not t.run.partial_text:
            raise ValueError(f"the answer of turn {turn} is empty: there is nothing to keep")
        t.kept = True
        return t

    def branch_last(self, step: int, token: Any, settings: dict[str, Any]) -> Generation:
        """Branch the last answer at ``step`` with ``token``; the branch becomes the answer shown.

        See :meth:`Generation.branch`; ``settings`` override the answer's own.

        Raises before anything changes: ``ValueError`` without an answer made by a run (none
        yet, or seeded from a history), and whatever :meth:`Generation.branch` raises (a
        bad step or token, an answer still being generated, a model that cannot branch).
        """
        if not self.turns:
            raise ValueError("there is no answer to branch yet; send a message first")
        turn = self.turns[-1]
        if turn.run is None:
            raise ValueError(
                "the last answer was given in the history, not generated: it has no tokens "
                "to branch from"
            )
        run = turn.run.branch(step, token, **settings)
        if not turn.variants:
            turn.variants = [turn.run]
        turn.variants.append(run)
        self._show(turn, run)
        return run

    def show_variant(self, index: int, turn: int = -1) -> Generation:
        """Show variant ``index`` of a turn's answer; returns its run.

        0 is the original answer, k is the k-th branch (``Turn.variants[k]``; a ChatWidget's
        ``branches[k - 1]``). The history and the transcript then hold that one, kept if its partial
        answer was kept.
        """
        try:
            t = self.turns[turn]
        except IndexError:
            raise ValueError(f"there is no turn {turn}; the chat has {len(self.turns)}") from None
        variants = t.variants or ([t.run] if t.run is not None else [])
        if not 0 <= index < len(variants):
            raise ValueError(f"the answer of turn {turn} has no variant {index}")
        self._show(t, variants[index])
        return variants[index]

    @staticmethod
    def _show(turn: Turn, run: Generation) -> None:
        # What was kept stays with its variant (Turn.kept_runs): showing one again brings
        # back exactly what the history held for it.
        turn.run = run

    def seed(self, messages: Any) -> None:
        """Replace the conversation by ``messages`` (a history: checked before any change)."""
        system, pairs = parse_history(messages)
        self.system = system
        self.turns = [Turn(user, answer=answer) for user, answer in pairs]

    def clear(self) -> None:
        """Forget every turn (the system message stays)."""
        self.turns = []
