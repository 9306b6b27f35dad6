"""A grid cell opened in full: a StreamWidget that shows the cell's own run.

The cell's run is the grid's (:meth:`nbstream.Grid.cell`), not one this view started: the
view follows it (:meth:`GridCellView.watch`), streaming or ended, with everything a
StreamWidget shows (the rendered answer, its figures, the token views, branches). Its
**Stop** is the run's own Stop; its **Run** reruns the cell through the grid, with the
cell's prompt and its column's settings. Closing the view (the grid's Close, a cleared
output, a cell run again) leaves the run to the grid: only a Stop stops it.

Example:
    >>> view = GridCellView(model, tokenizer)
    >>> view.watch(g.cell(0, 1), "row 1 · top_k=5", rerun=lambda: g.generate(0, 1)[0])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..generation import Generation
from . import cells
from .stream import StreamWidget

__all__ = ["GridCellView"]

# The reasons a widget's own closing gives its run: the cell's run is the grid's, and goes on.
_CLOSING = frozenset({cells.CLOSED, cells.CLOSED_BY_CLEARING, cells.CLOSED_BY_RERUN})


class GridCellView(StreamWidget):
    """One grid cell in full: its run's answer, figures and token views, Stop and Run.

    Args:
        model: The cell's column's model (a recording for a saved grid's cell), as for
            :class:`~nbstream.StreamWidget`.
        tokenizer: Its tokenizer.
        **settings: As for :class:`~nbstream.StreamWidget`.

    Example:
        >>> view.watch(g.cell(2, 0), "row 3 · defaults")
        >>> view.stop()  # stops the grid's cell (2, 0)
    """

    def __init__(self, model: Any, tokenizer: Any, **settings: Any) -> None:
        # Starts the shown cell again through the grid (set by watch()).
        self._rerun: Callable[[], Generation | None] = lambda: None
        super().__init__(model, tokenizer, **settings)
        # Run and Stop stay: Run reruns the cell, whose prompt is the grid's.
        self.show_prompt = False

    def watch(
        self,
        run: Generation,
        label: str,
        prompt: Any = None,
        rerun: Callable[[], Generation | None] | None = None,
    ) -> None:
        """Show ``run`` (the cell's), streaming or ended, under ``label``.

        Args:
            run: The cell's run.
            label: What the view's bar says it is (its row and column).
            prompt: The cell's prompt, for the view's box (a string; ``None``: kept).
            rerun: Starts the cell again through the grid; returns the new run, or
                ``None`` when the cell is still going (the view's Run and ``generate()``).
        """
        if rerun is not None:
            self._rerun = rerun
        with self._lock:
            with self.hold_sync():
                self.label = label
                if isinstance(prompt, str):
                    self.prompt = prompt
            if run is self._slot.run:
                return
            if run.done:
                self._variants = [run]
                self._replay(run)  # its end state at once, then its text
                return
            # The run this view showed before is another cell's, going on under the grid.
            self._slot.run = None

            def make_run() -> Generation:
                self._variants = [run]
                return run

            self._launch(make_run)

    def generate(self, prompt: Any = None, **settings: Any) -> Generation:
        """Run the cell again through the grid (its prompt, its column's settings).

        Raises:
            TypeError: A prompt or settings were given (a cell's are the grid's).
            RuntimeError: The cell is still queued or running.
        """
        if prompt is not None or settings:
            raise TypeError(
                "a grid cell runs its row's prompt with its column's settings: call "
                "generate() with no arguments, or make a grid with the prompts you want"
            )
        run = self._rerun()
        if run is None:
            raise RuntimeError("this cell is still queued or running: stop() it or wait() first")
        return run

    def stop(self, reason: str | None = None) -> bool:
        """Stop the cell's run (the grid's); the view's own closing leaves it running."""
        if reason in _CLOSING:
            return False
        return super().stop(reason)

    def _run_from_view(self, prompt: Any) -> None:
        # Run in the view: the cell again, whatever the (hidden) box holds.
        self._report_input_error(self.generate)

    def __repr__(self) -> str:
        return f"<nbstream grid cell {self.label!r} status={self.status!r}>"
