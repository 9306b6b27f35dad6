"""A prompt grid's table in the page: its synced traits and the page's messages.

The table shows a prompt per row and, per column, each cell's state (the stream widget's
words and colours), its figures (tokens, time, why it ended), its text as it streams, and
where the row's answers part; **Stop** stops a cell, a row or every cell, **Open** shows a
cell in full below the table (with its token views). Its front end is js/src/grid.js; the
traits below are mirrored there (``GridTableTraits`` of js/src/protocol.d.ts). The text
travels as messages (:mod:`.grid_feed`), never as a trait resent per frame. A click arrives
as a message that :class:`GridTable` answers through the grid's own Python API
(:class:`TableOwner`), so a click and a call behave alike.

Example:
    >>> table = GridTable(rows=["Hi"], columns=["defaults"])
    >>> table.answer(owner)  # Stop, Run and Open now reach the grid
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Protocol

import anywidget
import traitlets

from ..protocol import (
    GridDeltaMessage,
    GridPulledMessage,
    GridResetMessage,
    GridTableMessage,
    ProbeMessage,
)
from .page_views import PageViews
from .route import PageRoute, answer_on_sending_subshell, send_unasked

__all__ = ["INVALID", "GridTable", "TableOwner", "cell_index", "pull_held"]

logger = logging.getLogger(__name__)

_STATIC = Path(__file__).parent.parent / "static"


class TableOwner(Protocol):
    """What the table's clicks call: the grid's own Python API, and its widget's."""

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, columns)``."""

    def stop(self, row: int | None = None, col: int | None = None) -> int:
        """Stop every cell, a row's, a column's or one."""

    def generate(self, row: int | None = None, col: int | None = None) -> Any:
        """Start the cells (every one, a row's, a column's or one) that are not going."""

    def open_cell(self, row: int | None, col: int | None) -> None:
        """Show a cell in full below the table (``None``: none)."""

    def reset(self, view: str | None) -> GridResetMessage:
        """Every cell's text sent so far (the answer to a ``sync``)."""

    def pull(
        self, view: str, held: list[list[list[int]]]
    ) -> list[GridDeltaMessage | GridResetMessage]:
        """What a pulling view lacks of every cell's text (``held``: its ``[run_id, text]``s)."""


#: A row or column number the page sent that is not one (out of range, not an int).
INVALID = -1


#: A run widget's offsets, all 0: a grid's pull carries its own per cell (``pull_held``), and
#: :meth:`PageViews.answer` then adds only the traits changed since the view's version.
_NO_RUN = {"run_id": 0, "text": 0, "tokens": 0, "thinking": 0}


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def pull_held(cells: Any, shape: tuple[int, int]) -> list[list[list[int]]] | None:
    """A grid ``pull``'s ``cells`` (per row, per column ``[run_id, text]``), or None if malformed.

    Example:
        >>> pull_held([[[1, 5], [0, 0]]], (1, 2)), pull_held([[[1, -5]]], (1, 1))
        ([[[1, 5], [0, 0]]], None)
    """
    rows, cols = shape
    if not isinstance(cells, list) or len(cells) != rows:
        return None
    for row in cells:
        if not isinstance(row, list) or len(row) != cols:
            return None
        for cell in row:
            if not isinstance(cell, list) or len(cell) != 2 or not all(map(_count, cell)):
                return None
    return cells


def cell_index(value: Any, size: int) -> int | None:
    """A row or column number from the page: an int in range, ``None``, or :data:`INVALID`.

    Example:
        >>> cell_index(2, 3), cell_index(None, 3), cell_index(3, 3), cell_index(True, 3)
        (2, None, -1, -1)
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < size:
        return INVALID
    return value


class GridTable(anywidget.AnyWidget):
    """The table of a prompt grid: every cell's state, figures and streamed text.

    Its front end is js/src/grid.js; the traits below are mirrored at its top. The page's
    messages are answered once :meth:`answer` names the grid they act on.
    """

    _esm = _STATIC / "grid.js"
    _css = _STATIC / "grid.css"

    # -- kernel to page: set once ----------------------------------------------------------
    #: Each row's heading (its prompt in words), top to bottom.
    rows = traitlets.List(traitlets.Unicode()).tag(sync=True)
    #: Each column's heading, left to right.
    columns = traitlets.List(traitlets.Unicode()).tag(sync=True)
    #: Whether the cells replay recordings (a grid ``nbstream.load`` read).
    replay = traitlets.Bool(False).tag(sync=True)
    # -- kernel to page: set when a cell starts, changes state or ends (never per frame) --
    #: Each row's cells: ``{status, run_id, tokens, elapsed_s, finish_reason, error}``.
    cells = traitlets.List(traitlets.List(traitlets.Dict())).tag(sync=True)
    #: Per row, where its answers part (``{char, words}``), or None.
    marks = traitlets.List(traitlets.Dict(allow_none=True)).tag(sync=True)
    #: One line on the cells' states.
    summary = traitlets.Unicode("").tag(sync=True)
    #: The cell shown in full below the table, ``[row, col]``; ``[]`` for none.
    opened = traitlets.List(traitlets.Int()).tag(sync=True)
    #: Every cell's whole text once no cell is queued or running, for a view that no kernel
    #: answers (a saved notebook); ``[]`` while one is (the views get the text as messages).
    texts = traitlets.List(traitlets.List(traitlets.Unicode(allow_none=True))).tag(sync=True)

    def __init__(self, **traits: Any) -> None:
        # Every write of the traits, and the feed's sends, in one order (several threads).
        self.lock = threading.RLock()
        # The page's subshell, so that Stop is handled while a cell keeps the kernel busy
        # (``g.wait()``; see nbstream.widgets.route).
        self.route = PageRoute()
        self._owner: TableOwner | None = None
        # The kernel's changes of synced traits, numbered for views that pull (PROTOCOL.md,
        # Pulling); the page writes none of the table's traits.
        self._pages = PageViews()
        super().__init__(**traits)
        answer_on_sending_subshell(self.comm)
        self._pages.numbering = True

    def notify_change(self, change: Any) -> None:
        """Number each change of a synced trait (under the lock) for views that pull."""
        lock = self.__dict__.get("lock")
        if lock is None or "_pages" not in self.__dict__:  # being built: one thread only
            super().notify_change(change)
            return
        with lock:
            super().notify_change(change)
            self._pages.number(change.get("name"), lambda n: self.trait_metadata(n, "sync"))

    def answer(self, owner: TableOwner) -> None:
        """Answer the page's messages (sync, Stop, Run, Open) by calling ``owner``."""
        self._owner = owner
        self.on_msg(self._handle_message)

    def set_traits(self, **traits: Any) -> None:
        """Set several traits as one message to the page (under the table's lock)."""
        with self.lock, self.hold_sync():
            for name, value in traits.items():
                setattr(self, name, value)

    # On the subshell the page last spoke on; ipywidgets' docstrings are the ones to read.
    def send_state(self, key: Any = None) -> None:  # noqa: D102
        with self.route.publishing(self.comm):
            super().send_state(key)

    def send(self, content: Any, buffers: Any = None) -> None:  # noqa: D102
        with self.route.publishing(self.comm):
            super().send(content, buffers)

    def send_feed(self, content: GridTableMessage) -> None:
        """One of the feed's messages to every view (while the table has a comm)."""
        if self.comm is not None:
            self.send(content)

    def view_metadata(self) -> dict[str, Any]:
        """A host's metadata for this widget's view (Colab: which widget manager draws it)."""
        bundle = self._repr_mimebundle_()
        return bundle[1] if isinstance(bundle, tuple) else {}

    def __repr__(self) -> str:
        # The default repr serializes every trait (every cell); this one stays cheap.
        return f"<nbstream grid table {len(self.rows)}x{len(self.columns)}: {self.summary}>"

    # -- the page's messages ------------------------------------------------------------------
    def _handle_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        # Possibly on a subshell's thread while a cell runs (see nbstream.widgets.route).
        self.route.note(self.comm)
        try:
            if self._owner is not None:
                self.handle_page_message(self._owner, content)
        except Exception:  # never raise into the comm handler
            logger.exception("nbstream: the grid could not answer the page")
        finally:
            self.route.handled(self.comm)

    def pull_answer(self, owner: TableOwner, content: dict[str, Any]) -> GridPulledMessage | None:
        """The answer to a ``pull``, or None for a malformed one.

        The traits changed since its version, and every cell's text after its offsets.
        """
        view, version = content.get("view"), content.get("version")
        held = pull_held(content.get("cells"), owner.shape)
        if not isinstance(view, str) or not _count(version) or held is None:
            return None
        with self.lock:
            traits = self._pages.answer(
                {**_NO_RUN, "view": view, "version": version}, lambda *_: [], self.get_state
            )
            if traits is None:
                return None
            answer: GridPulledMessage = {
                "type": "pulled",
                "view": view,
                "version": traits["version"],
                "messages": owner.pull(view, held),
            }
        if "state" in traits:
            answer["state"] = traits["state"]
        return answer

    def handle_page_message(self, owner: TableOwner, content: Any) -> None:
        """Answer one message of the page (a click, a view's sync) by calling ``owner``."""
        if not isinstance(content, dict):
            return
        kind = content.get("type")
        rows, cols = owner.shape
        row = cell_index(content.get("row"), rows)
        col = cell_index(content.get("col"), cols)
        if INVALID in (row, col):
            # Never widened to every cell: a Stop meant for one cell must not stop all.
            logger.debug("nbstream: a grid message for no cell ignored: %r", content)
            return
        if kind == "sync":
            view = content.get("view")
            # Sent under the feed's lock, as it sends its deltas: no delta goes out between
            # the reset's text and the reset, so the two never disagree.
            with self.lock:
                self.send_feed(owner.reset(view if isinstance(view, str) else None))
            if isinstance(view, str):
                # Whether what the kernel sends unasked reaches this view: one that never
                # gets the probe pulls instead (PROTOCOL.md, Pulling; js/src/pull.js).
                probe: ProbeMessage = {"type": "probe", "view": view}
                send_unasked(self.comm, lambda: self.send_feed(probe))
        elif kind == "pull":
            # Answered inside this handler: a host that shows a view only the answers to its
            # own messages (Colab) never shows a push.
            with self.lock:  # likewise: the answer's texts and what the feed sends agree
                answer = self.pull_answer(owner, content)
                if answer is not None:  # a malformed pull is ignored
                    self.send_feed(answer)
        elif kind == "stop":
            owner.stop(row, col)
        elif kind == "run":
            owner.generate(row, col)
        elif kind == "open":
            both = row is not None and col is not None
            owner.open_cell(row if both else None, col if both else None)
