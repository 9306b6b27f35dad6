"""A CompareWidget's columns as one: made, run together, waited for, stopped and saved.

A **Run all** (``cw.generate()``) is all or nothing: every column is checked, then started
left to right; should one fail to start, those already started are stopped and the error
names the column. With **Same seed**, every sampled column gets one seed: the one given, or
one drawn per Run all (a column's own Run reuses the last). ``cw.wait()`` waits for every
column, then for the marks of where they part (a forward pass of the model). The columns'
lineup (:mod:`~nbstream.widgets.lineup`: which model each runs this round) and their marks
(:mod:`~nbstream.widgets.divergence`) are made here, with the columns they read.

Example:
    >>> runs = RunAll(pairs, lambda: True, by_model=False, blind=False, seed=7)
    >>> runs.make(CompareColumn, pairs, [{}, {"temperature": 0.7}], [{}, {}], {}, "Hi")
    >>> with runs.run_lock:
    ...     started = runs.start("Name two colors.", {})
    >>> runs.shared_seed
    7
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ipywidgets

from ..generation import Generation, GenerationError
from ..settings import validate_settings
from .compare_column import CompareColumn, check_ready
from .compare_records import Runs, compare_index, save_runs
from .divergence import DivergenceMarks
from .lineup import Lineup

__all__ = ["RunAll"]

# After a KeyboardInterrupt in wait(), how long to wait for the stopped runs to end.
INTERRUPT_GRACE_S = 10.0


def _draw_seed() -> int:
    # As the engine draws a sampled run's seed: from torch's global generator (so
    # torch.manual_seed(n) before generate() still decides it), below 2**32 (exact in JSON).
    from ..backends.local import draw_seed

    return draw_seed()


class RunAll:
    """A CompareWidget's columns, made and run together with the shared seed.

    Args:
        pairs: Each model and its tokenizer, in the order given (one column each).
        same_seed: Whether the **Same seed** box is checked now.
        by_model: Whether the columns compare models (``models=``), not settings.
        blind: Whether rounds are blind (the **Blind** checkbox).
        seed: The shared seed given; ``None`` draws one at each Run all.

    Example:
        >>> runs.make(CompareColumn, pairs, [{"temperature": 0.7}, {}], [{}, {}], {}, "Hi")
        >>> runs.seed_for_run()  # what a sampled column's own Run gets
        7
    """

    def __init__(
        self,
        pairs: list[tuple[Any, Any]],
        same_seed: Callable[[], bool],
        *,
        by_model: bool,
        blind: bool,
        seed: int | None,
    ) -> None:
        #: The compare's lock over its columns' shared state (reentrant: what a column's
        #: change shows may take it again).
        self.lock = threading.RLock()
        #: The columns, left to right (:meth:`make` makes them).
        self.columns: list[CompareColumn] = []
        #: Which model each column runs this round, how each is headed, the votes. The
        #: columns carry letters (and the header votes) comparing models, or blind.
        self.lineup = lineup = Lineup(
            pairs,
            self.columns,
            self.lock,
            lambda: by_model or lineup.rounds.blind,
            by_model=by_model,
            blind=blind,
        )
        #: Where the columns part, and each column's mark that says so.
        self.marks = DivergenceMarks(
            self.columns,
            self.lock,
            pairs[0][1],  # the words of where the columns part
            one_model=lineup.one_model,
            replays=lineup.replays,
        )
        self._seed = seed
        self._shared_seed: int | None = seed
        self._same_seed = same_seed
        #: Serializes Run all (stop() takes no lock: stopping twice is harmless). Never held
        #: while a column's traits change (their observers take :attr:`lock`), so a column
        #: ending during a Run all cannot deadlock it.
        self.run_lock = threading.Lock()

    def make(
        self,
        kind: type[CompareColumn],
        pairs: list[tuple[Any, Any]],
        own: list[dict[str, Any]],
        merged: list[dict[str, Any]],
        views: dict[str, bool],
        prompt: str,
    ) -> None:
        """Make the columns (``kind``: the compare's column class), left to right.

        Args:
            kind: The compare's column class (the page knows it by its module and name).
            pairs: Each column's model and tokenizer.
            own: Each column's own settings (its dict of ``settings=``).
            merged: All of each column's settings.
            views: The teaching views' toggles, for every column.
            prompt: The shared prompt.
        """
        for (model, tokenizer), mine, clean in zip(pairs, own, merged, strict=True):
            self.columns.append(self._column(kind, model, tokenizer, mine, clean, views, prompt))
        # Each model's column as created: a blind round hands them out anew.
        self.lineup.take_slots()

    def _column(
        self,
        kind: type[CompareColumn],
        model: Any,
        tokenizer: Any,
        own: dict[str, Any],
        clean: dict[str, Any],
        views: dict[str, bool],
        prompt: str,
    ) -> CompareColumn:
        lineup = self.lineup
        column = kind(model, tokenizer, own, lambda: lineup.hidden, **clean)
        for name, value in views.items():
            setattr(column, name, value)
        column.join(
            shared_seed=self.seed_for_run,
            dress=lineup.dress,
            covered_caps=lineup.covered_caps,
            note=lineup.note,
        )
        column.prompt = prompt
        column.label = column.describe()
        column.show_prompt = False
        column.add_class("nbstream-column")
        column.layout = ipywidgets.Layout(flex="1 1 240px", min_width="220px")
        return column

    # -- the shared seed ----------------------------------------------------------------------
    @property
    def seed(self) -> int | None:
        """The shared seed given (``None``: one is drawn at each Run all)."""
        return self._seed

    @seed.setter
    def seed(self, value: int | None) -> None:
        if value is not None:
            validate_settings({"seed": value})
        self._seed = value
        self._shared_seed = value

    @property
    def shared_seed(self) -> int | None:
        """The seed the last Run all gave the sampled columns; ``None`` without same seed."""
        return self._shared_seed if self._same_seed() else None

    def seed_for_run(self) -> int | None:
        """The seed a sampled column's run gets while same seed is on (drawn once if needed)."""
        if not self._same_seed():
            return None
        with self.lock:
            if self._shared_seed is None:
                self._shared_seed = self._seed if self._seed is not None else _draw_seed()
            return self._shared_seed

    # -- Run all, wait, stop ------------------------------------------------------------------
    def start(self, text: str, settings: dict[str, Any]) -> Runs:
        """Start every column on ``text``, all or none (:attr:`run_lock` held by the caller)."""
        check_ready(text, self.columns)
        if self._same_seed():
            self._shared_seed = self._seed if self._seed is not None else _draw_seed()
        self.lineup.new_round()
        # Every column first, then the runs: the header counts them all from the start.
        for column in self.columns:
            column.set_in_run_all(True)
        runs: list[Generation] = []
        try:
            for column in self.columns:
                runs.append(column.generate_in_run_all(text, **settings))
        except BaseException as exc:
            # All or nothing: a column that cannot start stops those already started.
            for run in reversed(runs):
                run.stop()
            for column in self.columns[len(runs) :]:
                column.set_in_run_all(False)  # not part of this Run all after all
            for kind in (TypeError, ValueError, RuntimeError):
                if isinstance(exc, kind):
                    raise kind(f"column {len(runs) + 1}: {exc}") from exc
            raise
        return Runs(runs, lambda: self.lineup.hidden)

    def wait(self, timeout: float | None) -> list[str | None]:
        """Wait until every column's run, and the marks of where they part, have ended.

        Returns each column's ``result``, left to right.
        """
        started = [(column, column.run) for column in self.columns if column.run is not None]
        if not started:
            raise RuntimeError("nothing to wait for: call generate() first")
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for column, run in started:
                assert run is not None
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not run.wait_done(left):
                    states = ", ".join(column.status for column in self.columns)
                    raise TimeoutError(
                        f"the columns are still running after {timeout} s ({states}); they go "
                        "on (call stop() to cancel them)"
                    )
                # Let the column publish its end state, so that status agrees on return.
                with contextlib.suppress(GenerationError):
                    column.wait(0)
            # The marks of where the columns part, started by the last column's end: their
            # forward pass is work on the model, done before wait() returns (a script that
            # ends here must not end under it: torch aborts the process).
            for thread in self.marks.threads():
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except KeyboardInterrupt:
            self.stop()
            for _column, run in started:
                assert run is not None
                run.wait_done(INTERRUPT_GRACE_S)
            raise
        return [column.result for column in self.columns]

    def save(self, path: str | os.PathLike[str], prompt: str) -> list[Path]:
        """Save each model's last run, and the index of every round, in the folder ``path``.

        Raises ``RuntimeError`` while a blind round is hidden (see ``CompareWidget.save``).
        """
        lineup = self.lineup
        with self.lock:
            if lineup.hidden:
                raise RuntimeError(
                    "this blind round is hidden: its files would say which column was which "
                    "model; Reveal (cw.reveal()) first, then save"
                )
            runs = lineup.runs_by_model()
            rounds = lineup.saved_rounds()
        return save_runs(runs, path, index=compare_index(prompt, list(lineup.names), rounds))

    def stop(self) -> bool:
        """Stop every column; True if any had a run to stop."""
        stopped = False
        # Right to left: queued columns leave the line before the running one lets go of
        # the model, so none of them starts only to be stopped.
        for column in reversed(self.columns):
            stopped = column.stop() or stopped
        return stopped

    def close(self) -> None:
        """Close every column (each stops its run first)."""
        for column in self.columns:
            column.close()
