"""A CompareWidget's header: its synced traits, its page messages and its summary line.

The header holds the shared prompt, **Run all**, **Stop all**, the **Same seed** and
**Blind** checkboxes, a line on the columns' states, and (comparing models, or blind) a vote
button per column and **Reveal**. Its front end is js/src/compare.js; PROTOCOL.md has its
traits and messages. A click arrives as a message that :class:`CompareHeader` answers
through the compare's own Python API (:class:`HeaderOwner`), so a click and a call behave
alike.

Example:
    >>> summary_line(["complete", "running"], shared_seed=7, competing="", rounds=BlindRound(2))
    '2 columns · 1 running, 1 complete · same seed 7'
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

import anywidget
import traitlets

from ..generation import QUEUED, RUNNING
from .blind import BlindRound
from .display import states_summary
from .route import PageRoute, answer_on_sending_subshell

__all__ = ["CompareHeader", "HeaderOwner", "summary_line"]

logger = logging.getLogger(__name__)

_STATIC = Path(__file__).parent.parent / "static"


class HeaderOwner(Protocol):
    """What the header's clicks call: the compare's own Python API."""

    same_seed: bool

    @property
    def statuses(self) -> list[str]:
        """Each column's state, left to right."""

    def stop(self) -> bool:
        """Stop every column."""

    def vote(self, label: str) -> dict[str, int]:
        """Vote for the column labelled ``label``."""

    def reveal(self) -> dict[str, str]:
        """Show which model each label was."""

    def generate(self, prompt: str | None = None) -> Any:
        """Run all."""


class CompareHeader(anywidget.AnyWidget):
    """The header of a CompareWidget: shared prompt, Run all, Stop all, Same seed, votes.

    Its front end is js/src/compare.js; the traits below are mirrored at its top. The page's
    messages are answered once :meth:`answer` names the compare they act on.

    Example:
        >>> header = CompareHeader(prompt="Name two colors.", statuses=["idle", "idle"])
        >>> header.answer(cw)  # Run all, Stop all, a vote and Reveal now reach cw
    """

    _esm = _STATIC / "compare.js"
    _css = _STATIC / "compare.css"

    # -- synced both ways -------------------------------------------------------------------
    #: The shared prompt box.
    prompt = traitlets.Unicode("").tag(sync=True)
    #: The "Same seed" checkbox.
    same_seed = traitlets.Bool(False).tag(sync=True)
    #: The "Blind" checkbox: columns named only A, B, C, each running a model drawn per run.
    blind = traitlets.Bool(False).tag(sync=True)
    # -- kernel to page ---------------------------------------------------------------------
    #: Each column's state, left to right.
    statuses = traitlets.List(traitlets.Unicode()).tag(sync=True)
    #: One line on the columns' states (and the shared seed).
    summary = traitlets.Unicode("").tag(sync=True)
    #: Why the last Run all click started nothing, or "".
    input_error = traitlets.Unicode("").tag(sync=True)
    #: Each column's ``in_run_all``, left to right: the columns whose current run a Run all
    #: started; the header says their start and their end once (js/src/announce.js).
    in_run_all = traitlets.List(traitlets.Bool()).tag(sync=True)
    #: Whether the header shows a vote button per column and Reveal (models compared, or
    #: blind).
    voting = traitlets.Bool(False).tag(sync=True)
    #: The columns' labels, left to right as shown (the vote buttons).
    labels = traitlets.List(traitlets.Unicode()).tag(sync=True)
    #: Label to count, for the current round.
    votes = traitlets.Dict().tag(sync=True)
    #: Whether a vote is taken now: a round ran, every column ended, and it is not revealed.
    can_vote = traitlets.Bool(False).tag(sync=True)
    #: Label to model, once the round is revealed; ``{}`` before.
    revealed = traitlets.Dict().tag(sync=True)
    #: Why the last vote or reveal was refused, or "".
    vote_error = traitlets.Unicode("").tag(sync=True)

    def __init__(self, **traits: Any) -> None:
        # The page's subshell, so that Stop all is handled while a cell keeps the kernel
        # busy (see nbstream.widgets.route).
        self.route = PageRoute()
        self._owner: HeaderOwner | None = None
        super().__init__(**traits)
        answer_on_sending_subshell(self.comm)

    def answer(self, owner: HeaderOwner) -> None:
        """Answer the page's clicks (Run all, Stop all, a vote, Reveal) by calling ``owner``."""
        self._owner = owner
        self.on_msg(self._handle_message)

    # On the subshell the page last spoke on; ipywidgets' docstrings are the ones to read.
    def send_state(self, key: Any = None) -> None:  # noqa: D102
        with self.route.publishing(self.comm):
            super().send_state(key)

    def send(self, content: Any, buffers: Any = None) -> None:  # noqa: D102
        with self.route.publishing(self.comm):
            super().send(content, buffers)

    def __repr__(self) -> str:
        return f"<CompareWidget header statuses={self.statuses!r}>"

    def view_metadata(self) -> dict[str, Any]:
        """A host's metadata for a view of this header (Colab: which widget manager draws it)."""
        bundle = self._repr_mimebundle_()
        return bundle[1] if isinstance(bundle, tuple) else {}

    # -- the page's messages ------------------------------------------------------------------
    def _handle_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        # Possibly on a subshell's thread while a cell runs (see nbstream.widgets.route).
        self.route.note(self.comm)
        try:
            if self._owner is not None:
                self.handle_page_message(self._owner, content)
        finally:
            self.route.handled(self.comm)

    def handle_page_message(self, owner: HeaderOwner, content: Any) -> None:
        """Answer one message of the page (a click) by calling ``owner``'s Python API."""
        if not isinstance(content, dict):
            return
        kind = content.get("type")
        if kind == "sync":
            # The view turns its controls off unless a kernel answers (a saved notebook).
            self.send({"type": "synced"})
        elif kind == "stop":
            owner.stop()
        elif kind in ("vote", "reveal"):
            self._vote_from_page(owner, kind, content.get("label"))
        elif kind == "run":
            self._run_from_page(owner, content)

    def _run_from_page(self, owner: HeaderOwner, content: dict[str, Any]) -> None:
        """Run all; a refusal is said in the header's ``input_error``."""
        if any(status in (QUEUED, RUNNING) for status in owner.statuses):
            logger.debug("Run all ignored: a column is still queued or running")
            return
        prompt = content.get("prompt")
        # The checkbox travels with the click, as the prompt does: its state update
        # may still be held back by ipywidgets' throttle.
        same_seed = content.get("same_seed")
        if isinstance(same_seed, bool) and same_seed != owner.same_seed:
            owner.same_seed = same_seed
        if isinstance(prompt, str) and not prompt.strip():
            # The API's words ("pass some text") are for code; here nothing was typed.
            self.input_error = "Type a prompt first, then Run all."
            return
        try:
            owner.generate(prompt if isinstance(prompt, str) else None)
        except (TypeError, ValueError, RuntimeError) as exc:
            self.input_error = str(exc)

    def _vote_from_page(self, owner: HeaderOwner, kind: str, label: Any) -> None:
        """A vote button or Reveal; a refusal is said in the header's ``vote_error``."""
        try:
            if kind == "vote":
                owner.vote(label)
            else:
                owner.reveal()
        except (ValueError, RuntimeError) as exc:
            self.vote_error = str(exc)
            return
        self.vote_error = ""


def summary_line(
    statuses: list[str], *, shared_seed: int | None, competing: str, rounds: BlindRound
) -> str:
    """The header's line on the columns' states, the shared seed, and a hidden blind round.

    Args:
        statuses: Each column's state, left to right.
        shared_seed: The seed the sampled columns share (``None``: none).
        competing: Which columns run at once on one processor, in words ("" when none do).
        rounds: The compare's rounds.

    Returns:
        e.g. ``"3 columns · 3 complete · same seed 1234"``.
    """
    line = states_summary(statuses)
    if shared_seed is not None and any(s != "idle" for s in statuses):
        line += f" · same seed {shared_seed}"
    if competing and any(s != "idle" for s in statuses):
        line += f" · {competing}"
    if rounds.round_blind and rounds.number and not rounds.revealed:
        line += f" · blind round {rounds.number}"
    return line
