"""What a chat's page asks of the kernel: a message sent, edited, answered again, kept, a clear.

Each of the chat's own custom messages from a view (PROTOCOL.md, "Page to kernel:
ChatWidget") is answered through the chat's Python API (:class:`ChatOwner`), so a click and
a call behave alike. A refusal becomes the widget's ``input_error`` in the page's words;
nothing raises into the comm handler. A message sent while an answer is queued or running
is ignored (PROTOCOL rule 7): the page's controls are off then, so it crossed the answer's
start.

Example:
    >>> page = ChatPage(chat, report=print, busy=lambda: False)
    >>> page.answer("send", {"type": "send", "text": "Name two colors."})  # chat.generate(...)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from ..generation import Generation

__all__ = ["ChatOwner", "ChatPage"]

logger = logging.getLogger(__name__)


class ChatOwner(Protocol):
    """What the page's messages call: the chat's own Python API."""

    def clear(self) -> None:
        """Stop any answer and empty the conversation."""

    def keep_partial(self, turn: int = -1) -> None:
        """Keep a cancelled or failed answer in the history."""

    def generate(self, text: str | None = None) -> Generation:
        """Send a message."""

    def edit_last(self, text: str) -> Generation:
        """Replace the last message, and answer it."""

    def regenerate(self) -> Generation:
        """Answer the last message again."""


class ChatPage:
    """Answers a chat's page: its messages, each through the chat's own API.

    Args:
        owner: The chat.
        report: Runs a request, and shows what it refused as the widget's ``input_error``.
        busy: Whether an answer is queued or running.

    Example:
        >>> page.answer("keep", {"type": "keep", "turn": 0})  # chat.keep_partial(0)
    """

    def __init__(
        self,
        owner: ChatOwner,
        *,
        report: Callable[[Callable[[], Any]], None],
        busy: Callable[[], bool],
    ) -> None:
        self._owner = owner
        self._report = report
        self._busy = busy

    def answer(self, kind: Any, content: dict[str, Any]) -> None:
        """Answer one message of the page (``kind``: its ``type``)."""
        owner = self._owner
        if kind == "clear":
            owner.clear()
            return
        if kind == "keep":
            turn: Any = content.get("turn")
            self._report(lambda: owner.keep_partial(turn))
            return
        if kind not in ("send", "edit_last", "regenerate"):
            return
        if self._busy():
            logger.debug("%s ignored: an answer is already queued or running", kind)
            return
        text: Any = content.get("text")
        if kind == "send":
            self._report(lambda: owner.generate(text))
        elif kind == "edit_last":
            self._report(lambda: owner.edit_last(text))
        else:
            self._report(owner.regenerate)
