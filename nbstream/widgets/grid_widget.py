"""A prompt grid shown in a notebook: its table streaming every cell, and one cell in full.

:class:`GridWidget` composes the table (:class:`~.grid_view.GridTable`, js/src/grid.js),
its feed (:class:`~.grid_feed.GridFeed`: every cell's new text in one message a frame) and,
below the table, the cell a user opened (:class:`~.grid_cell.GridCellView`, a StreamWidget
that shows that cell's run with its token views). The widget is a view of a
:class:`~nbstream.Grid`: its clicks call the grid's Python API (Stop, Run), and closing it
leaves the grid's runs going.

Example:
    >>> w = GridWidget(g, cell_model=lambda i, j: (model, tokenizer))
    >>> w.open_cell(0, 1)  # cell (0, 1) in full below the table
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import ipywidgets

from ..generation import TERMINAL, Generation
from ..protocol import GridDeltaMessage, GridMark, GridResetMessage
from .display import Bundle, FallbackDisplay, in_kernel, show
from .divergence import TextDivergence, text_divergence_words
from .grid_cell import GridCellView
from .grid_feed import CellChanges, GridFeed
from .grid_table import markdown_table
from .grid_view import GridTable

__all__ = ["CellModel", "GridDisplay", "GridSource", "GridWidget", "cells_summary", "prompt_words"]

logger = logging.getLogger(__name__)

#: A cell's model for its full view: ``(model, tokenizer)`` as a StreamWidget takes them
#: (a recording and ``None`` for a saved grid's cell), and what views may share it (a key:
#: a column's cells share one view; a saved grid's cells each replay their own recording).
CellModel = Callable[[int, int], tuple[Any, Any, Any]]


class GridSource(Protocol):
    """What the widget reads and calls of its grid (the public API of :class:`nbstream.Grid`)."""

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, columns)``."""

    @property
    def prompts(self) -> list[Any]:
        """The rows' prompts."""

    @property
    def columns(self) -> list[str]:
        """The columns' headings."""

    def cell(self, row: int, col: int) -> Generation | None:
        """A cell's run."""

    def divergence(self, row: int) -> TextDivergence | None:
        """Where a row's answers part."""

    def stop(self, row: int | None = None, col: int | None = None) -> int:
        """Stop cells."""

    def generate(self, row: int | None = None, col: int | None = None) -> list[Generation]:
        """Start cells."""


def prompt_words(prompt: Any) -> str:
    """A row's prompt in words: a string as it is, a message list by its last user message.

    Example:
        >>> prompt_words([{"role": "system", "content": "Be brief."},
        ...               {"role": "user", "content": "Hi"}])
        'Hi'
    """
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt if m.get("role") == "user"]
    return str(users[-1] if users else prompt[-1].get("content", ""))


class GridWidget(ipywidgets.VBox):  # type: ignore[misc]
    """A grid's table and its opened cell; see the module docstring.

    Args:
        grid: The grid it shows.
        cell_model: Each cell's model for its full view (see :data:`CellModel`).
        replay: The cells replay recordings (a saved grid).
    """

    def __init__(self, grid: GridSource, cell_model: CellModel, *, replay: bool = False) -> None:
        self._grid = grid
        self._cell_model = cell_model
        rows, cols = grid.shape
        self.table = GridTable(
            rows=[prompt_words(p) for p in grid.prompts], columns=list(grid.columns), replay=replay
        )
        self._lock: threading.RLock = self.table.lock
        self._feed = GridFeed(
            lock=self._lock,
            runs=self._runs,
            send=self.table.send_feed,
            is_open=lambda: self.table.comm is not None,
            on_change=self._changed,
        )
        # The cell shown in full, and the views made for it (one per key of cell_model).
        self._opened: tuple[int, int] | None = None
        self._views: dict[Any, GridCellView] = {}
        # Per row, where its answers part (the ``marks`` trait's values).
        self._marks: list[GridMark | None] = [None] * rows
        self.detail = ipywidgets.Box(layout=ipywidgets.Layout(display="block"))
        with self._lock:
            self.table.set_traits(
                cells=self._feed.entries(),
                marks=list(self._marks),
                summary=cells_summary(self._feed.statuses(), cols),
            )
        self.table.answer(self)
        # Shown in a kernel: the live view, and a text copy rewritten once every cell ended.
        self._output = FallbackDisplay(self._lock, "nbstream-grid")
        super().__init__([self.table, self.detail])
        self.add_class("nbstream-grid-widget")
        self._feed.start()

    # -- what the table's page asks -----------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, columns)``."""
        return self._grid.shape

    def stop(self, row: int | None = None, col: int | None = None) -> int:
        """Stop every cell, a row's, a column's or one (the runs' own Stop)."""
        stopped = self._grid.stop(row, col)
        self._feed.wake()
        return stopped

    def generate(self, row: int | None = None, col: int | None = None) -> list[Generation]:
        """Start the chosen cells that are not going (through the grid)."""
        return self._grid.generate(row, col)

    def reset(self, view: str | None) -> GridResetMessage:
        """Every cell's text sent so far: the answer to a view's ``sync``."""
        return self._feed.reset(view)

    def pull(
        self, view: str, held: list[list[list[int]]]
    ) -> list[GridDeltaMessage | GridResetMessage]:
        """What a pulling view lacks of every cell's text (see :meth:`GridFeed.pull`)."""
        return self._feed.pull(view, held)

    def open_cell(self, row: int | None, col: int | None) -> None:
        """Show cell ``(row, col)`` in full below the table; ``None`` closes it.

        A cell that never ran has nothing to show: the table stays as it is.
        """
        with self._lock:
            run = None if row is None or col is None else self._grid.cell(row, col)
            if row is None or col is None or run is None:
                self._opened = None
                self.detail.children = ()
                self.table.set_traits(opened=[])
                return
            self._opened = (row, col)
            view = self._view(row, col)
            view.watch(
                run,
                self._label(row, col),
                prompt_words(self._grid.prompts[row]),
                rerun=lambda: _first(self._grid.generate(row, col)),
            )
            self.detail.children = (view,)
            self.table.set_traits(opened=[row, col])

    # -- the grid's news ------------------------------------------------------------------------
    def cells_started(self, started: list[tuple[int, int]]) -> None:
        """The grid started these cells: the table shows them now, the opened cell follows."""
        self._feed.wake()
        with self._lock:
            if self._opened in started:
                self.open_cell(*self._opened)

    # -- shown in a notebook ---------------------------------------------------------------------
    def bundle(self) -> dict[str, Any] | None:
        """The live view and its text copy (``None`` once closed)."""
        if self.comm is None:
            return None
        return {**super()._repr_mimebundle_(), **self._fallback()}

    def settle(self) -> None:
        """Show every cell's end now and rewrite the text copy from the calling thread.

        For a cell that waits for the grid: the feed's thread shows the ends at its next
        frame, and its rewrite of the text copy carries the parent of the cell that started
        the runs, which a headless runner (nbclient, nbconvert) that has moved on drops. Sent
        from the waiting thread, it belongs to the cell that waits, and is kept.
        """
        if self.comm is None:
            return  # closed: nothing shows it
        self._feed.frame()
        self._output.republish(self._shown)

    def show(self) -> None:
        """Display the widget with its text copy (IPython's display, in a kernel)."""
        self._output.display(lambda: self.model_id, self._shown, self._fallback)

    def _shown(self) -> Bundle | None:
        data = self.bundle()
        if data is None:
            return None
        # A host's metadata for a view (Colab: which widget manager draws it) comes with an
        # anywidget's own bundle; the grid is a VBox, so it takes its table's.
        return None, data, self.table.view_metadata()

    def _fallback(self) -> dict[str, str]:
        with self._lock:
            summary = self.table.summary
        markdown = markdown_table(self._grid.prompts, self._grid.columns, self._runs())
        return {"text/plain": f"<nbstream.Grid {summary}>", "text/markdown": markdown}

    def close(self) -> None:
        """Close the table and the cells' views; the grid's runs go on (``g.stop()`` stops)."""
        self._feed.close()
        # Containers first: no open widget may hold a closed one (saving the widget state,
        # ``ipywidgets.embed``, would fail on it).
        super().close()
        self.detail.close()
        for view in self._views.values():
            view.close()
        self._views.clear()
        self.table.close()

    def __repr__(self) -> str:
        # The default repr serializes every trait (children included); this one stays cheap.
        return repr(self.table)

    # -- inside ----------------------------------------------------------------------------------
    def _runs(self) -> list[list[Generation | None]]:
        rows, cols = self._grid.shape
        return [[self._grid.cell(i, j) for j in range(cols)] for i in range(rows)]

    def _view(self, row: int, col: int) -> GridCellView:
        model, tokenizer, key = self._cell_model(row, col)
        view = self._views.get(key)
        if view is None:
            view = GridCellView(model, tokenizer)
            self._views[key] = view
        return view

    def _label(self, row: int, col: int) -> str:
        return f"row {row + 1} \u00b7 {self._grid.columns[col]}"

    def _changed(self, changes: CellChanges) -> None:
        """A frame started, moved or ended cells: the table's traits, in one message (lock held)."""
        cols = self._grid.shape[1]
        statuses = self._feed.statuses()
        traits: dict[str, Any] = {
            "cells": self._feed.entries(),
            "summary": cells_summary(statuses, cols),
        }
        touched = {i for i, _ in changes.started + changes.ended}
        if touched:
            for i in touched:
                self._marks[i] = self._mark(i, statuses[i])
            traits["marks"] = list(self._marks)
        going = any(s not in TERMINAL and s != "idle" for row in statuses for s in row)
        if going and self.table.texts:
            traits["texts"] = []  # a view without a kernel would show ended texts as current
        elif not going and changes.ended:
            traits["texts"] = self._feed.texts()
        self.table.set_traits(**traits)
        if not going and changes.ended:
            self._output.republish(self._shown)  # the text copy says how every cell ended

    def _mark(self, row: int, statuses: list[str]) -> GridMark | None:
        """Where the row's answers part, once each of its cells has ended (else None)."""
        if any(s not in TERMINAL for s in statuses):
            return None
        try:
            found = self._grid.divergence(row)
        except Exception:  # a mark is a help: never at the cost of the table's update
            logger.exception("nbstream: where row %d's answers part could not be found", row)
            return None
        if found is None:
            return None
        return {"char": found.char, "words": text_divergence_words(found)}


def _first(runs: list[Generation]) -> Generation | None:
    return runs[0] if runs else None


def cells_summary(statuses: list[list[str]], cols: int) -> str:
    """How many cells are in which state: the table's line and a grid's repr.

    e.g. ``"10 × 3 cells · 2 running, 4 queued, 24 complete"``.
    """
    flat = [s for row in statuses for s in row]
    head = f"{len(statuses)} \u00d7 {cols} cells"
    if all(status == "idle" for status in flat):
        return f"{head} \u00b7 not run yet"
    order = ["running", "queued", "complete", "cancelled", "failed", "idle"]
    counts = [f"{flat.count(state)} {state}" for state in order if state in flat]
    return f"{head} \u00b7 " + ", ".join(counts)


class GridDisplay:
    """How a grid is shown: its widget (made when first shown, anew once closed), or a table.

    Args:
        grid: The grid.
        listeners: The grid's list of callbacks told which cells each ``generate()`` started.
        cell_model: Each cell's model for its full view (see :data:`CellModel`).
    """

    def __init__(self, grid: GridSource, listeners: list[Any], cell_model: CellModel) -> None:
        self._grid = grid
        self._listeners = listeners
        self._lock = threading.Lock()
        self._widget: GridWidget | None = None
        #: Each cell's model for its full view (a saved grid's: its cells' recordings).
        self.cell_model = cell_model
        #: Whether the cells replay recordings (a grid ``nbstream.load`` read).
        self.replay = False

    def widget(self) -> GridWidget:
        """The grid's widget: the one shown before, or a new one if there was none or it closed."""
        with self._lock:
            widget = self._widget
            if widget is None or widget.comm is None:
                widget = GridWidget(self._grid, self.cell_model, replay=self.replay)
                if self._widget is not None:
                    self._listeners.remove(self._widget.cells_started)
                self._listeners.append(widget.cells_started)
                self._widget = widget
            return widget

    def bundle(self, text: str, html: Callable[[], str]) -> dict[str, Any] | None:
        """In a kernel the live table with its text copy; elsewhere the table as it is now."""
        if in_kernel():
            return self.widget().bundle()
        return {"text/plain": text, "text/html": html()}

    def settle(self) -> None:
        """After a ``wait()``: the shown table has every end, its text copy rewritten here.

        Nothing when the grid was never shown as a widget.
        """
        with self._lock:
            widget = self._widget
        if widget is not None:
            widget.settle()

    def show(self, text: str, html: Callable[[], str]) -> None:
        """IPython's display of the grid (its ``_ipython_display_``)."""
        if in_kernel():
            self.widget().show()
        else:
            show({"text/plain": text, "text/html": html()}, raw=True)
