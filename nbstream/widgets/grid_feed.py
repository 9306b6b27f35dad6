"""The transport from a grid's cells to its table's views: one frame for every cell at once.

One :class:`GridFeed` per grid table. Its thread follows every cell's current run and sends
what each has new as one ``grid_delta`` message per frame (at most ``FRAME_RATE`` a second,
as a single widget's feed: 30 streaming cells cost the page one message a frame, not 30),
each cell's text from the offset it had reached (never the whole text again), and, when a
view asks (``sync``), a ``grid_reset`` holding exactly the text sent so far, so that the
next delta continues it without a gap. A cell's new run, a state change (queued to
running) and its end are reported to the table (``on_change``) in the frame they are seen:
a start before that frame's deltas, an end after its last text. The messages are in
nbstream/protocol.py (``GridDeltaMessage``, ``GridResetMessage``).

Everything the feed writes, and every decision about which run a cell shows, happens under
the table's lock, which a view's ``sync`` takes too: a reset and a delta never disagree.

Example:
    >>> feed = GridFeed(lock=lock, runs=grid_runs, send=table.send, is_open=lambda: True,
    ...                 on_change=table_changed)
    >>> feed.start()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..generation import TERMINAL, Generation
from ..protocol import GridCell, GridDelta, GridDeltaMessage, GridResetMessage, GridText
from .feed import FRAME_RATE

__all__ = ["GRID_THREAD", "CellChanges", "GridFeed", "cell_entry"]

logger = logging.getLogger(__name__)

_FRAME_S = 1.0 / FRAME_RATE
#: The name of a grid's feed thread.
GRID_THREAD = "nbstream-grid-feed"

#: Every cell's current run, row by row (``None``: never started).
Runs = Callable[[], Sequence[Sequence[Generation | None]]]


@dataclass
class _Cell:
    """How far the feed has taken one cell."""

    run: Generation | None = None
    #: Incremented for each new run of the cell.
    run_id: int = 0
    #: Characters of the run's text sent (a reset carries exactly that much).
    sent: int = 0
    #: The state the table shows.
    status: str = "idle"


@dataclass
class CellChanges:
    """What one frame changed: the cells that started, changed state or ended."""

    started: list[tuple[int, int]]
    changed: list[tuple[int, int]]
    ended: list[tuple[int, int]]

    def __bool__(self) -> bool:
        return bool(self.started or self.changed or self.ended)


def cell_entry(status: str, run_id: int, run: Generation | None) -> GridCell:
    """One cell as the table's ``cells`` trait holds it: its state and figures.

    Args:
        status: The state the table shows (the run's, once the feed has seen it).
        run_id: The cell's run id.
        run: Its run (``None``: never started).

    Returns:
        The entry (figures ``None`` until known; the end's once the run has ended).

    Example:
        >>> cell_entry("idle", 0, None)["status"]
        'idle'
    """
    entry: GridCell = {
        "status": status,  # type: ignore[typeddict-item]  # one of WidgetStatus, by the feed
        "run_id": run_id,
        "tokens": None,
        "elapsed_s": None,
        "finish_reason": None,
        "error": None,
    }
    if run is None:
        return entry
    metrics = run.metrics
    elapsed = metrics["elapsed_s"]
    entry["tokens"] = metrics["tokens"]
    entry["elapsed_s"] = None if elapsed is None else round(elapsed, 2)
    if status in TERMINAL:
        entry["finish_reason"] = metrics["finish_reason"]
        error = run.error
        entry["error"] = None if error is None else f"{type(error).__name__}: {error}"
    return entry


class GridFeed:
    """Streams every cell of a grid to the table's views; see the module docstring.

    ``runs()`` gives the cells' runs now; ``send(content)`` sends one custom message to every
    view; ``is_open()`` says whether the table still has a comm; ``on_change(changes)`` is
    called with the lock held for each frame that started, moved or ended a cell.
    """

    def __init__(
        self,
        *,
        lock: threading.RLock,
        runs: Runs,
        send: Callable[[GridDeltaMessage | GridResetMessage], None],
        is_open: Callable[[], bool],
        on_change: Callable[[CellChanges], None],
    ) -> None:
        self._lock = lock
        self._runs = runs
        self._send = send
        self._is_open = is_open
        self._on_change = on_change
        table = runs()
        self._cells = [[_Cell() for _ in row] for row in table]
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    # -- what the table calls ----------------------------------------------------------------
    def start(self) -> None:
        """Follow the cells: a thread while one is queued or running (a frame adopts new runs).

        The thread ends once no cell is going; the next :meth:`start` (or :meth:`wake`)
        starts another. Nothing of a table shown once keeps running while its grid is idle.
        """
        with self._lock:
            self._wake.set()
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(target=self._follow, name=GRID_THREAD, daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """A frame now: cells were started (or stopped) and the table should show it."""
        self.start()

    def close(self) -> None:
        """Stop following (the runs go on: they are the grid's); the thread ends soon."""
        self._closed = True
        self._wake.set()

    @property
    def thread(self) -> threading.Thread | None:
        """The feed's thread, once started."""
        return self._thread

    def entries(self) -> list[list[GridCell]]:
        """Every cell as the ``cells`` trait holds it (lock held)."""
        return [[cell_entry(c.status, c.run_id, c.run) for c in row] for row in self._cells]

    def statuses(self) -> list[list[str]]:
        """The states the table shows (lock held)."""
        return [[c.status for c in row] for row in self._cells]

    def texts(self) -> list[list[str | None]]:
        """Every cell's whole text (``None``: never started); read once no cell is active."""
        return [[None if c.run is None else c.run.partial_text for c in row] for row in self._cells]

    def reset(self, view: str | None) -> GridResetMessage:
        """The answer to a view's ``sync``: every cell's text sent so far (lock taken)."""
        with self._lock:
            cells: list[GridText] = [
                {"row": i, "col": j, "run_id": c.run_id, "text": c.run.partial_text[: c.sent]}
                for i, row in enumerate(self._cells)
                for j, c in enumerate(row)
                if c.run is not None
            ]
        return {"type": "grid_reset", "view": view, "cells": cells}

    def pull(
        self, view: str, held: Sequence[Sequence[Sequence[int]]]
    ) -> list[GridDeltaMessage | GridResetMessage]:
        """What a pulling view lacks of every cell, cut at what the feed has sent (lock taken).

        ``held[i][j]`` is ``[run_id, text]``: the run of cell ``(i, j)`` the view holds and the
        length of its text. A cell whose run it holds, with no more text than was sent, gets
        the rest as a delta would (from its offset); one whose run it does not hold, or holds
        more of than was sent, gets its text so far in a ``grid_reset`` to ``view``, as a
        ``sync`` would (PROTOCOL.md, Pulling: the same rules as a run widget's pull, per cell).
        """
        deltas: list[GridDelta] = []
        texts: list[GridText] = []
        with self._lock:
            for i, row in enumerate(self._cells):
                for j, cell in enumerate(row):
                    run = cell.run
                    if run is None:
                        continue
                    have = held[i][j] if i < len(held) and j < len(held[i]) else (0, 0)
                    run_id, chars = have[0], have[1]
                    if run_id == cell.run_id and chars == cell.sent:
                        continue
                    text = run.partial_text[: cell.sent]
                    if run_id != cell.run_id or chars > cell.sent:
                        texts.append({"row": i, "col": j, "run_id": cell.run_id, "text": text})
                        continue
                    metrics = run.metrics
                    elapsed = metrics["elapsed_s"]
                    deltas.append(
                        {
                            "row": i,
                            "col": j,
                            "run_id": cell.run_id,
                            "offset": chars,
                            "text": text[chars:],
                            "tokens": metrics["tokens"],
                            "elapsed_s": None if elapsed is None else round(elapsed, 2),
                        }
                    )
        messages: list[GridDeltaMessage | GridResetMessage] = []
        if texts:
            messages.append({"type": "grid_reset", "view": view, "cells": texts})
        if deltas:
            messages.append({"type": "grid_delta", "cells": deltas})
        return messages

    # -- the thread --------------------------------------------------------------------------
    def _follow(self) -> None:
        while not self._closed:
            self._wake.clear()
            try:
                active = self.frame()
            except Exception:  # a frame's failure must not end the table's updates
                logger.exception("nbstream: a grid frame failed")
                active = True
            with self._lock:
                # Decided under the lock a start() takes: a start is never lost in between.
                if self._closed or (not active and not self._wake.is_set()):
                    self._thread = None
                    return
            self._wake.wait(_FRAME_S)
        with self._lock:
            self._thread = None

    def frame(self) -> bool:
        """Send one frame (from any thread): starts, then every cell's new text, then ends.

        Returns whether a cell is still queued or running.
        """
        table = self._runs()
        with self._lock:
            started = self._adopt(table)
            if started:
                self._on_change(CellChanges(started, [], []))
        # Read outside the lock (decoding a run's text takes its time): the state first, as
        # a run's text is final once it has ended.
        seen: list[tuple[int, int, Generation, str, str]] = []
        for i, row in enumerate(self._cells):
            for j, cell in enumerate(row):
                run = cell.run
                if run is None or cell.status in TERMINAL:
                    continue
                status = run.status
                seen.append((i, j, run, status, run.partial_text))
        with self._lock:
            deltas, changes = self._collect(seen)
            if deltas and self._is_open():
                self._send({"type": "grid_delta", "cells": deltas})
            if changes:
                self._on_change(changes)
            return any(
                c.run is not None and c.status not in TERMINAL for r in self._cells for c in r
            )

    def _adopt(self, table: Sequence[Sequence[Generation | None]]) -> list[tuple[int, int]]:
        """Make each cell's current run the one it shows (lock held); the cells that changed."""
        started = []
        for i, row in enumerate(table):
            for j, run in enumerate(row):
                cell = self._cells[i][j]
                if run is None or run is cell.run:
                    continue
                cell.run, cell.run_id, cell.sent = run, cell.run_id + 1, 0
                # An end is shown after its text: a run already over shows "running" first.
                status = run.status
                cell.status = "running" if status in TERMINAL else status
                started.append((i, j))
        return started

    def _collect(
        self, seen: list[tuple[int, int, Generation, str, str]]
    ) -> tuple[list[GridDelta], CellChanges]:
        """The frame's deltas and state changes from what was read (lock held)."""
        deltas: list[GridDelta] = []
        changes = CellChanges([], [], [])
        for i, j, run, status, text in seen:
            cell = self._cells[i][j]
            if run is not cell.run:
                continue  # a newer run took the cell meanwhile: the next frame has it
            if cell.status in TERMINAL:
                # Another thread's frame (a wait() settling the table) read it later and has
                # shown its end: this older read must not take the cell back to running.
                continue
            if len(text) > cell.sent:
                metrics = run.metrics
                elapsed = metrics["elapsed_s"]
                deltas.append(
                    {
                        "row": i,
                        "col": j,
                        "run_id": cell.run_id,
                        "offset": cell.sent,
                        "text": text[cell.sent :],
                        "tokens": metrics["tokens"],
                        "elapsed_s": None if elapsed is None else round(elapsed, 2),
                    }
                )
                cell.sent = len(text)
            if status != cell.status:
                cell.status = status
                (changes.ended if status in TERMINAL else changes.changed).append((i, j))
        return deltas, changes
