"""What a CompareWidget shows around its columns: the header, kept in step, and its saved output.

The header (:mod:`~nbstream.widgets.compare_header`) holds the shared prompt and the **Same
seed** and **Blind** boxes (written here, checked first), and shows the columns' states, the
shared seed and the round's vote row: :class:`CompareView` writes them whenever a column's
state, a box or the round changes (a Run all, a vote, Reveal), and rewrites the saved output
(each column's label, state and text, for what cannot run widgets) with them. It also
follows the columns' lives: a column whose answer changes marks where the columns part; with
every column closed from elsewhere, the comparison closes too.

Example:
    >>> view = CompareView(CompareHeader, runs, prompt="Hi", same_seed=False, blind=False,
    ...                    owner=cw, live=lambda: None)
    >>> view.open()  # the header says the columns' states; its clicks reach cw
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import ipywidgets
import traitlets

from .compare_header import CompareHeader, HeaderOwner, summary_line
from .compare_records import Runs, fallback
from .compare_runs import RunAll
from .display import Bundle, FallbackDisplay, shown_by_widget

__all__ = ["CompareOwner", "CompareView"]

logger = logging.getLogger(__name__)


class CompareOwner(HeaderOwner, Protocol):
    """The compare a view belongs to: the header's clicks call it, and the view closes it."""

    comm: Any

    def close(self) -> None:
        """Stop every column and close the compare."""


class CompareView:
    """A CompareWidget's header and row of columns, kept in step with its columns.

    Args:
        kind: The compare's header class (the page knows it by its module and name).
        runs: The compare's columns, their lineup, their marks and the shared seed.
        prompt: The shared prompt.
        same_seed: The **Same seed** box.
        blind: The **Blind** box.
        owner: The compare: the header's clicks call it, and the view closes it.
        live: The compare's live view bundle (its widget's own ``_repr_mimebundle_``).

    Example:
        >>> view.fallback()["text/plain"].splitlines()[0]
        'Prompt: Name two colors.'
    """

    def __init__(
        self,
        kind: type[CompareHeader],
        runs: RunAll,
        *,
        prompt: str,
        same_seed: bool,
        blind: bool,
        owner: CompareOwner,
        live: Callable[[], Any],
    ) -> None:
        self._runs = runs
        self._columns = columns = runs.columns
        self._lineup = runs.lineup
        self._lock = runs.lock
        self._owner = owner
        self._live = live
        #: The compare's saved output: the live view, and its fallback rewritten as the
        #: columns change.
        self.output = FallbackDisplay(runs.lock, "nbstream-compare")
        #: The header: the shared prompt, Run all, Stop all, the boxes, the vote row (shown
        #: from the start comparing models; the Blind box shows it later).
        self.header = kind(
            prompt=prompt,
            same_seed=same_seed,
            blind=blind,
            voting=runs.lineup.by_model,
            statuses=[c.status for c in columns],
            in_run_all=[c.in_run_all for c in columns],
        )
        #: The columns side by side, wrapping on a narrow page.
        self.row = ipywidgets.HBox(
            columns, layout=ipywidgets.Layout(flex_flow="row wrap", align_items="stretch")
        )
        self.row.add_class("nbstream-compare-columns")
        #: True until the compare is complete (:meth:`open`), and again once it is closed.
        self.closing = True
        self._wire()

    def _wire(self) -> None:
        """Connect the header and the columns (once every part exists)."""
        self.header.answer(self._owner)
        for column in self._columns:
            # The shared prompt is every column's prompt, so a column's own Run uses it.
            traitlets.dlink((self.header, "prompt"), (column, "prompt"))
            # status: a run starts or ends; run_id: also another answer shown (show(i), a
            # show_branch click), whose status is often the same ("complete"), yet whose
            # tokens, and so where the columns part, are not.
            column.observe(self._column_changed, names=["status", "run_id", "in_run_all"])
            column.observe(self._column_closed, names=["comm"])
        self.header.observe(self._column_changed, names=["same_seed"])
        self.header.observe(self._blind_changed, names=["blind"])

    def open(self) -> None:
        """The compare is complete: every heading, and the header, say where things stand."""
        self.closing = False
        self._lineup.relabel()
        self.refresh()

    def refresh(self) -> None:
        """Show the columns' states in the header, and in the saved output (any thread)."""
        with self._lock:
            statuses = [column.status for column in self._columns]
            header = self.header
            if header.comm is None:
                return
            lineup = self._lineup
            with header.hold_sync():
                header.statuses = statuses
                header.in_run_all = [c.in_run_all for c in self._columns]
                header.summary = summary_line(
                    statuses,
                    shared_seed=self._runs.shared_seed,
                    competing=lineup.competing,
                    rounds=lineup.rounds,
                )
                for name, value in lineup.vote_state().items():
                    setattr(header, name, value)
            self.output.republish(self.shown)

    def set_box(self, name: str, value: Any) -> None:
        """Write the header's prompt box, or its Same seed or Blind box, checked first.

        Raises ``TypeError`` for a prompt that is no string, or a box that is not a bool.
        """
        if name == "prompt" and not isinstance(value, str):
            raise TypeError(f"prompt must be a string, got {type(value).__name__}")
        if name == "same_seed" and not isinstance(value, bool):
            raise TypeError(f"same_seed must be True or False, got {value!r}")
        if name == "blind" and not isinstance(value, bool):
            raise TypeError(f"blind must be True or False, got {value!r:.80}")
        setattr(self.header, name, value)

    def run_all(self, prompt: str | None, settings: dict[str, Any]) -> Runs:
        """Run all: the prompt into the box (unless ``None``), then every column on it."""
        with self._runs.run_lock:
            if prompt is not None:
                self.set_box("prompt", prompt)
            runs = self._runs.start(self.header.prompt, settings)
            self.header.input_error = ""
            for run in runs:
                # The columns are shown inside the compare, never on their own.
                shown_by_widget(run, self.output)
            return runs

    def vote(self, label: str) -> dict[str, int]:
        """Vote for the column labelled ``label`` (``CompareWidget.vote``); the header shows it."""
        with self._lock:
            votes = self._lineup.rounds.vote(label, self._lineup.going())
        self.refresh()
        return votes

    def reveal(self) -> dict[str, str]:
        """End the round's secret (see ``CompareWidget.reveal``): every heading and the header."""
        with self._lock:
            self._lineup.rounds.reveal()
            mapping = self._lineup.mapping()
        self._lineup.relabel()
        self.refresh()
        return mapping

    def close(self) -> bool:
        """Stop and close every column, the header and the row; False if already closing."""
        if self.closing:
            return False
        self.closing = True
        self._runs.stop()
        self._runs.close()
        self.header.close()
        self.row.close()
        return True

    def describe(self) -> str:
        """The compare's repr: its columns' states, and its models unless a round hides them."""
        lineup, statuses = self._lineup, [column.status for column in self._columns]
        if lineup.hidden:
            return f"<CompareWidget blind labels={lineup.labels!r} statuses={statuses!r}>"
        if lineup.by_model:
            return f"<CompareWidget models={lineup.names!r} statuses={statuses!r}>"
        return f"<CompareWidget statuses={statuses!r}>"

    # -- the columns and the header change -------------------------------------------------
    def _column_changed(self, change: dict[str, Any]) -> None:
        # A column's state, or the Same seed checkbox: the header's summary follows.
        self.refresh()
        if change.get("name") in ("status", "run_id"):
            self._runs.marks.mark(change.get("owner"))

    def _column_closed(self, change: dict[str, Any]) -> None:
        # A column closed from elsewhere: its cell ran again (the new widgets close the old
        # ones), or its output was cleared. With every column gone, so is the comparison.
        closed = all(column.comm is None for column in self._columns)
        if change["new"] is None and closed and not self.closing:
            logger.debug("every column of a CompareWidget closed; closing it")
            self._owner.close()

    def _blind_changed(self, change: dict[str, Any]) -> None:
        with self._lock:
            rounds = self._lineup.rounds
            rounds.blind = bool(change["new"])
            reveals = not change["new"] and rounds.round_blind and not rounds.revealed
        if reveals:
            self._owner.reveal()  # turning blind off during a blind round shows which was which
            return
        self._lineup.relabel()
        self.refresh()

    # -- display ----------------------------------------------------------------------------
    def fallback(self) -> dict[str, str]:
        """The text/plain and text/markdown fallbacks: each column's label, state and text."""
        lineup = self._lineup
        return fallback(
            self.header.prompt, self._columns, lambda: lineup.hidden, lineup.vote_words()
        )

    def bundle(self) -> dict[str, Any] | None:
        """The live view and its fallbacks (``None`` once closed)."""
        if self._owner.comm is None:
            return None
        view = self._live()
        if view is None:
            return None
        data = view[0] if isinstance(view, tuple) else view
        return {**data, **self.fallback()}

    def shown(self) -> Bundle | None:
        """What a display shows: the live view's bundle, its fallbacks, a host's metadata."""
        data = self.bundle()
        if data is None:
            return None
        # A host's metadata for a view (Colab: which custom widget manager draws it) comes
        # with an anywidget's own bundle; the compare is a VBox, so it takes its header's.
        return None, data, self.header.view_metadata()
