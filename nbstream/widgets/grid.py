"""A prompt grid: many prompts (rows) against models or settings (columns), every cell a run.

:class:`Grid` holds the cells' runs; each is an ordinary :class:`~nbstream.Generation`
started with :func:`nbstream.stream`. A model's runs wait in its queue in the order they
were started, so the grid starts its cells row by row: one model's cells run one after the
other, fairly, never interleaved, while columns on different models run at once.

Example:
    >>> import nbstream
    >>> from nbstream.testing import tiny_model
    >>> model, tokenizer = tiny_model()
    >>> g = nbstream.Grid(["Hi", "Bye"], model=model, tokenizer=tokenizer,
    ...                   settings=[{"temperature": 0}, {"top_k": 5}], max_new_tokens=5)
    >>> runs = g.generate()
    >>> [len(row) for row in g.wait()]
    [2, 2]
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..generation import Generation, replay, stream
from ..prompt_template import Prompts
from .divergence import TextDivergence, text_divergence
from .grid_columns import GridColumn, check_prompts, grid_columns, refused_backend
from .grid_save import is_grid_folder, read_index, write_grid
from .grid_table import cell_row, check_pandas, html_table
from .grid_widget import GridDisplay, GridWidget, cells_summary

__all__ = ["Grid", "read_grid_folder"]

logger = logging.getLogger(__name__)

#: A cell that has not run yet (before ``generate()``).
IDLE = "idle"


class Grid:
    """Rows of prompts against columns of models or settings, every cell a streamed run.

    Everything is checked (prompts, settings, models) before any model loads or any cell
    runs. ``generate()`` starts every cell and returns at once; each cell is a
    :class:`~nbstream.Generation` (``g.cell(row, col)``) with its own state. Cells on one
    model run one after the other, row by row; columns on different models run at once.
    Shown in a notebook, the grid is a table that streams every cell (:attr:`widget`).

    Args:
        prompts: The rows: a list of prompts (strings or message lists), or
            :func:`nbstream.template`'s result (whose fields the table keeps).
        models: One model per column (a hub id or folder, ``None`` for the default model,
            a ``(model, tokenizer)`` pair, an :class:`~nbstream.Endpoint` or a loaded
            recording), as for :class:`~nbstream.CompareWidget`.
        settings: One dict of settings per column (with ``models=``: one per model).
        model: One model for every column, when ``models`` is not given (``None``: the
            default model; a loaded model goes with ``tokenizer``).
        tokenizer: The loaded model's tokenizer.
        **common: Settings every column shares, under each column's own
            (``max_new_tokens=60``).

    Example:
        >>> import nbstream
        >>> prompts = nbstream.template("Translate to French: {text}",
        ...                             [{"text": "a cat"}, {"text": "the sea"}])
        >>> g = nbstream.Grid(prompts, settings=[{"temperature": 0}, {"temperature": 0.9}],
        ...                   max_new_tokens=30)
        >>> runs = g.generate()      # every cell starts; returns at once
        >>> g.wait()                 # each row: one result per column (None unless complete)
        >>> g.statuses[0]
        ['complete', 'complete']
    """

    def __init__(
        self,
        prompts: Sequence[Any],
        models: Sequence[Any] | None = None,
        settings: Sequence[Any] | None = None,
        *,
        model: Any = None,
        tokenizer: Any = None,
        **common: Any,
    ) -> None:
        rows = check_prompts(prompts)
        columns = grid_columns(model, tokenizer, models, settings, common)
        self._setup(rows, columns, prompts)

    def _setup(self, rows: list[Any], columns: list[GridColumn], prompts: Any) -> None:
        self._prompts = rows
        self._fields: list[dict[str, Any]] | None = (
            [dict(f) for f in prompts.fields] if isinstance(prompts, Prompts) else None
        )
        self._template: Any = prompts.template if isinstance(prompts, Prompts) else None
        self._columns = columns
        # Guards the cells' table: generate() swaps runs in while readers copy it.
        self._lock = threading.RLock()
        self._cells: list[list[Generation | None]] = [[None] * len(columns) for _ in rows]
        # Called with the cells each generate() started (the shown table listens).
        self._listeners: list[Callable[[list[tuple[int, int]]], None]] = []
        # Makes a cell's run (None: nothing to run); a saved grid replays its recordings.
        self._starter: Callable[[int, int], Generation | None] = self._stream_cell
        # The grid shown in a notebook: its widget, made when first shown.
        self._display = GridDisplay(self, self._listeners, self._column_model)

    # -- what the grid is --------------------------------------------------------------------

    @property
    def prompts(self) -> list[Any]:
        """The rows' prompts, top to bottom."""
        return list(self._prompts)

    @property
    def fields(self) -> list[dict[str, Any]] | None:
        """Each row's template fields (:func:`nbstream.template`); ``None`` without one."""
        return None if self._fields is None else [dict(f) for f in self._fields]

    @property
    def template(self) -> Any:
        """The template the rows filled, or ``None``."""
        return self._template

    @property
    def columns(self) -> list[str]:
        """Each column's heading: its model, its own settings, or both."""
        return [column.name for column in self._columns]

    @property
    def column_settings(self) -> list[dict[str, Any]]:
        """Every setting each column's cells run with (shared ones included)."""
        return [dict(column.settings) for column in self._columns]

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, columns)``."""
        return len(self._prompts), len(self._columns)

    # -- running -----------------------------------------------------------------------------

    def _stream_cell(self, row: int, col: int) -> Generation | None:
        column = self._columns[col]
        prompt = self._prompts[row]
        try:
            return stream(column.backend, None, prompt, **column.settings)
        except (TypeError, ValueError) as exc:
            # This row's prompt is refused by this model (too long, no chat template):
            # the cell fails saying why, and every other cell still runs.
            logger.warning("nbstream: grid cell (%d, %d) refused: %s", row, col, exc)
            return stream(refused_backend(exc), None, prompt, **column.settings)

    def _column_model(self, row: int, col: int) -> tuple[Any, Any, Any]:
        model, tokenizer = self._columns[col].pair
        return model, tokenizer, col  # a column's cells share one view

    def _chosen(self, row: int | None, col: int | None) -> list[tuple[int, int]]:
        rows, cols = self.shape
        if row is not None and not 0 <= row < rows:
            raise IndexError(f"row {row} is out of range: the grid has {rows} rows")
        if col is not None and not 0 <= col < cols:
            raise IndexError(f"col {col} is out of range: the grid has {cols} columns")
        return [
            (i, j)
            for i in range(rows)
            for j in range(cols)
            if (row is None or i == row) and (col is None or j == col)
        ]

    def generate(self, row: int | None = None, col: int | None = None) -> list[Generation]:
        """Start every cell (or one row's, or one column's) and return at once.

        Cells start row by row, so each model's queue takes them fairly; a cell still
        queued or running keeps its run.

        Args:
            row: Only this row's cells.
            col: Only this column's cells.

        Returns:
            The runs started, row by row.

        Example:
            >>> runs = g.generate()
        """
        started: list[tuple[int, int]] = []
        runs = []
        with self._lock:
            for i, j in self._chosen(row, col):
                current = self._cells[i][j]
                if current is not None and not current.done:
                    continue
                run = self._starter(i, j)
                if run is None:
                    continue
                self._cells[i][j] = run
                started.append((i, j))
                runs.append(run)
        for listener in list(self._listeners):
            listener(started)
        return runs

    def wait(self, timeout: float | None = None) -> list[list[str | None]]:
        """Block until every started cell has ended; never raises for a cell's failure.

        An interrupt (the kernel's stop button) stops every cell, then propagates.

        Args:
            timeout: At most this many seconds in all; ``None`` waits as long as it takes.

        Returns:
            :attr:`results`.

        Raises:
            TimeoutError: ``timeout`` expired; the cells go on.

        Example:
            >>> g.wait()[0]
            ['Bonjour', None]
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for run in self._runs():
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not run.wait_done(left):
                    raise TimeoutError(
                        f"the grid's cells are still running after {timeout} s; they go on "
                        "(call stop() to cancel them)"
                    )
        except KeyboardInterrupt:
            self.stop(reason="the kernel was interrupted")
            raise
        self._display.settle()
        return self.results

    def stop(
        self, row: int | None = None, col: int | None = None, *, reason: str | None = None
    ) -> int:
        """Stop every cell, one row's or one column's; queued ones never start.

        Args:
            row: Only this row's cells.
            col: Only this column's cells.
            reason: Why, for each run's ``cancel_reason``.

        Returns:
            How many cells were queued or running (they end ``cancelled``).

        Example:
            >>> g.stop(row=2)
            3
        """
        with self._lock:
            runs = [self._cells[i][j] for i, j in self._chosen(row, col)]
        # Later cells first: a queued cell must not get the model as the one before stops.
        return sum(bool(run.stop(reason)) for run in reversed(runs) if run is not None)

    def cell(self, row: int, col: int) -> Generation | None:
        """The run of one cell (``None`` before its first ``generate()``).

        Example:
            >>> g.cell(0, 1).stop()
        """
        self._chosen(row, col)
        with self._lock:
            return self._cells[row][col]

    def _runs(self) -> list[Generation]:
        with self._lock:
            return [run for cells in self._cells for run in cells if run is not None]

    def _table(self) -> list[list[Generation | None]]:
        with self._lock:
            return [list(cells) for cells in self._cells]

    # -- what the cells did ------------------------------------------------------------------

    @property
    def statuses(self) -> list[list[str]]:
        """Each row's cells' states, one per column.

        ``"idle"`` (not started), ``"queued"``, ``"running"``, ``"complete"``, ``"failed"``
        or ``"cancelled"``.
        """
        return [[IDLE if r is None else r.status for r in cells] for cells in self._table()]

    @property
    def results(self) -> list[list[str | None]]:
        """Each row's cells' texts: a complete cell's result, ``None`` for any other."""
        return [[None if r is None else r.result for r in cells] for cells in self._table()]

    @property
    def texts(self) -> list[list[str]]:
        """Each row's cells' text so far, partial included (see :attr:`statuses`)."""
        return [["" if r is None else r.partial_text for r in cells] for cells in self._table()]

    def divergence(self, row: int) -> TextDivergence | None:
        """Where a row's answers part (the compare's text divergence); ``None`` if they agree.

        While cells stream, only what each has reached counts; a row with a cell not
        started, or with one column, has none.

        Example:
            >>> g.divergence(0)
            TextDivergence(char=3, tokens=[' chat', ' chien'], steps=[1, 1])
        """
        self._chosen(row, None)
        runs = self._table()[row]
        if len(runs) < 2 or any(run is None for run in runs):
            return None
        return text_divergence(
            [run for run in runs if run is not None], [c.tokenizer for c in self._columns]
        )

    def table(self) -> list[dict[str, Any]]:
        """One dict per cell, row by row: what :meth:`to_pandas` holds.

        Keys: ``row``, ``prompt``, the template's fields (a field named like one of these
        keys is ``field_<name>``), ``column``, ``status``, ``result``, ``text`` (partial
        included), ``tokens``, ``elapsed_s``, ``finish_reason``, ``differs_at`` (the
        character where the row's answers part, ``None`` where they agree), ``divergence``
        (this cell's words for it) and ``record`` (the run's, once it has ended).

        Example:
            >>> g.table()[0]["status"]
            'complete'
        """
        rows = []
        table = self._table()
        for i, runs in enumerate(table):
            found = self.divergence(i)
            fields = self._fields[i] if self._fields is not None else {}
            for j, run in enumerate(runs):
                rows.append(
                    cell_row(i, self._prompts[i], fields, self._columns[j].name, run, found, j)
                )
        return rows

    def to_pandas(self) -> Any:
        """The grid as a pandas DataFrame, one row per cell (the columns of :meth:`table`).

        Raises:
            ImportError: pandas is not installed (``pip install pandas``).

        Example:
            >>> df = g.to_pandas()
            >>> df[df.status == "complete"][["prompt", "column", "result"]]
        """
        pandas = check_pandas()
        return pandas.DataFrame(self.table())

    # -- kept and reopened ------------------------------------------------------------------

    def save(self, folder: str | Path) -> Path:
        """Write every cell's recording and an index to ``folder``; ``nbstream.load`` reads it.

        The index (``grid.json``) holds the template, each row's prompt and fields, the
        columns' names and settings, and every cell's state; each cell that ran is a
        recording of its own (``cells/r{row}c{col}.json``).

        Args:
            folder: Where (created if missing).

        Returns:
            The folder.

        Raises:
            RuntimeError: A cell is still queued or running (nothing is written).

        Example:
            >>> g.save("translations")
            >>> nbstream.load("translations").results == g.results
            True
        """
        index = {
            "template": self._template,
            "prompts": self._prompts,
            "fields": self._fields,
            "columns": [
                {"name": c.name, "model": c.model, "own": c.own, "settings": c.settings}
                for c in self._columns
            ],
        }
        return write_grid(folder, index, self._table())

    @classmethod
    def _loaded(cls, index: dict[str, Any], recordings: list[list[Any]]) -> Grid:
        """A saved grid: each cell replays its recording (at once now, at its pace later)."""
        grid = cls.__new__(cls)
        columns = [
            GridColumn(str(c.get("name", "")), None, dict(c.get("own") or {}),
                       dict(c.get("settings") or {}), None, str(c.get("model") or ""))
            for c in index["columns"]
        ]  # fmt: skip
        fields = index.get("fields")
        prompts: Any = list(index["prompts"])
        if isinstance(fields, list) and len(fields) == len(prompts):
            prompts = Prompts(prompts, fields, index.get("template"))
        grid._setup(list(prompts), columns, prompts)
        # Loaded, every cell shows its recorded end at once; generate() replays at its pace.
        grid._starter = lambda i, j: _replayed(recordings[i][j], None)
        grid.generate()
        grid.wait()  # instant replays: their ends are there when load() returns
        grid._starter = lambda i, j: _replayed(recordings[i][j], 1.0)
        # Each cell's full view replays that cell's own recording (its tokens' texts).
        grid._display.cell_model = lambda i, j: (recordings[i][j], None, (i, j))
        grid._display.replay = True
        return grid

    # -- shown in a notebook ---------------------------------------------------------------------

    @property
    def widget(self) -> GridWidget:
        """The grid as a notebook widget: a table that streams every cell (made on first use).

        Showing the grid shows it. Each cell shows its state, its figures (tokens, time, why
        it ended) and its text as it streams; a row's cells are marked where their answers
        part; **Stop** stops a cell, a row or every cell; **Open** shows a cell in full below
        the table, with its token views. Closing it leaves the cells running.

        Example:
            >>> g.widget.open_cell(0, 1)  # cell (0, 1) in full below the table
        """
        return self._display.widget()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        return self._display.bundle(repr(self), self._repr_html_)

    def _ipython_display_(self) -> None:
        self._display.show(repr(self), self._repr_html_)

    def _repr_html_(self) -> str:
        # The table as it is now (a snapshot): what a front end without widgets shows.
        return html_table(self._prompts, self.columns, self._table())

    def __repr__(self) -> str:
        # The same words as the widget's text copy.
        return f"<nbstream.Grid {cells_summary(self.statuses, self.shape[1])}>"


def _replayed(recording: Any, speed: float | None) -> Generation | None:
    return None if recording is None else replay(recording, speed=speed)


def read_grid_folder(folder: Path) -> Grid | None:
    """The grid saved in ``folder`` (``nbstream.load`` calls it), or ``None`` if none is.

    Args:
        folder: A folder ``g.save`` wrote.

    Returns:
        A :class:`Grid` whose cells replay their recordings, without a model.

    Raises:
        ValueError: The folder has a grid's index that cannot be read.

    Example:
        >>> g = read_grid_folder(Path("translations"))
    """
    if not is_grid_folder(folder):
        return None
    index, recordings = read_index(folder)
    return Grid._loaded(index, recordings)
