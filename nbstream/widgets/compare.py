"""``CompareWidget``: one prompt, two to four settings or models, side by side.

Each column is a :class:`~nbstream.StreamWidget` with its own state, Stop and record; the
header holds the shared prompt, **Run all**, **Stop all**, the **Same seed** and **Blind**
checkboxes, a summary of the columns' states, and (comparing models, or blind) a vote
button per column and **Reveal**. Columns sharing a model run one after the other (the
engine's queue: first in, first out, never interleaved), so a column waiting its turn
shows ``queued``; columns on different models run at once. See PROTOCOL.md for the
header's traits and messages.

This module composes the parts, each in a module named for what it holds:
:mod:`~nbstream.widgets.compare_args` (the arguments, checked),
:mod:`~nbstream.widgets.compare_models` (what each column runs),
:mod:`~nbstream.widgets.compare_column` (the column widget),
:mod:`~nbstream.widgets.compare_header` (the header: traits, page messages, summary),
:mod:`~nbstream.widgets.lineup` (which model each column runs this round, its heading, the
votes), :mod:`~nbstream.widgets.blind` (a blind round's rules),
:mod:`~nbstream.widgets.divergence` (where the columns part, and its marks),
:mod:`~nbstream.widgets.compare_records` (the runs, saved files and text copy),
:mod:`~nbstream.widgets.compare_runs` (the columns made and run together, the shared seed)
and :mod:`~nbstream.widgets.compare_view` (the header kept in step, the saved output).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ipywidgets

from .._errors import input_checked
from ..generation import Generation
from ..protocol import RunRecord
from .blind import HIDDEN_ERROR, HIDDEN_LENS, HIDDEN_RUN, LABELS
from .compare_args import DEFAULT_SETTINGS, check_arguments, check_models, named_settings
from .compare_args import MAX_COLUMNS as MAX_COLUMNS
from .compare_args import MIN_COLUMNS as MIN_COLUMNS
from .compare_column import WIDGET_KEYS, CompareColumn, EveryColumn
from .compare_column import describe_settings as describe_settings
from .compare_header import CompareHeader
from .compare_models import ModelLoadFailed, column_pairs, model_name
from .compare_records import Runs as Runs
from .compare_runs import RunAll
from .compare_view import CompareView
from .divergence import TextDivergence
from .divergence import divergence_words as divergence_words
from .divergence import divergence_words_by_model as divergence_words_by_model
from .divergence import text_divergence as text_divergence
from .divergence import text_divergence_words as text_divergence_words
from .stream import StreamWidget

__all__ = [
    "DEFAULT_SETTINGS",
    "HIDDEN_ERROR",
    "HIDDEN_LENS",
    "HIDDEN_RUN",
    "LABELS",
    "CompareWidget",
    "ModelLoadFailed",
    "TextDivergence",
    "model_name",
]

# Also importable from here, as before the split (imported "as" themselves above):
# MIN_COLUMNS, MAX_COLUMNS, Runs, describe_settings and the divergence functions.

# The traits every anywidget has, shown as they are while a round is hidden (a test reads
# them here, where they were defined before the split).
_WIDGET_KEYS = WIDGET_KEYS


# The page knows a widget by its class's module and name (its ``_anywidget_id``), which
# saved notebooks, PROTOCOL.md and nbstream/protocol.py name: the two classes the page sees
# are defined here, their code in the modules of their parts.
class _Header(CompareHeader):
    """The header of a :class:`CompareWidget` (see :class:`~.compare_header.CompareHeader`)."""


class _Column(CompareColumn):
    """A column of a :class:`CompareWidget` (see :class:`~.compare_column.CompareColumn`)."""


class CompareWidget(ipywidgets.VBox):  # type: ignore[misc]
    """One prompt, two to four settings, streamed side by side (one column per setting).

    Every setting is checked before anything is created. ``cw.columns`` are the columns,
    each a ``StreamWidget`` (``status``, ``result``, ``record``, ``stop()``, ``wait()``, the
    teaching views); ``cw.generate()`` starts them all, ``cw.wait()`` waits for all,
    ``cw.stop()`` stops them all. Columns sharing a model run one after the other, in order:
    a column waiting for the model is ``queued``. On an :class:`~nbstream.Endpoint` they do
    so unless it runs requests at once (vLLM, SGLang, TGI and llama-server by default, or
    ``concurrent=True``): the server then schedules them.

    ``same_seed=True`` (the **Same seed** checkbox) gives every sampled column the same
    seed: ``seed=`` if given, else one drawn at each ``generate()``; greedy columns, and columns
    whose own settings give a seed, keep theirs. Each column's ``record`` says exactly what
    produced it, seed included (a shared seed is ``"given"`` there: the comparison gave it;
    ``cw.shared_seed`` is the last one).

    Args:
        model: As for :class:`~nbstream.StreamWidget`: ``None`` (the default model), a
            loaded causal LM, a hub id or folder, or an :class:`~nbstream.Endpoint`.
        tokenizer: The loaded model's tokenizer (only with a loaded model).
        prompt: The prompt every column answers (the shared prompt box).
        settings: Two to four dicts of settings (the names of :func:`nbstream.stream`),
            one per column, left to right (with ``models=``: one per model).
        models: Two to four models, one per column (a hub id or folder, ``None``, a
            ``(model, tokenizer)`` pair, an :class:`~nbstream.Endpoint` or a loaded
            recording), instead of ``model``.
        blind: Blind rounds: columns named A, B, C, each running a model drawn anew per
            round, with nothing that tells the models apart shown until :meth:`reveal`.
        same_seed: Give every sampled column the same seed; ``None`` turns it on when
            ``seed`` is given.
        seed: The shared seed; ``None`` draws one at each :meth:`generate`.
        **common: Settings for every column (under each column's own dict), and the
            teaching views' toggles.

    Example:
        >>> import nbstream
        >>> cw = nbstream.CompareWidget(
        ...     None, None, "Name two colors.",
        ...     settings=[{"temperature": 0}, {"temperature": 0.7}, {"temperature": 1.3}],
        ...     max_new_tokens=40, same_seed=True,
        ... )
        >>> cw                      # display it: the shared prompt, Run all, Stop all, columns
        >>> runs = cw.generate()
        >>> texts = cw.wait()       # each column's result: its text, or None if not complete
        >>> [column.record["seed"] for column in cw.columns]
    """

    def __init__(
        self,
        model: Any = None,
        tokenizer: Any = None,
        prompt: str = "",
        settings: Sequence[Mapping[str, Any]] = DEFAULT_SETTINGS,
        *,
        models: Sequence[Any] | None = None,
        blind: bool = False,
        same_seed: bool | None = None,
        seed: int | None = None,
        **common: Any,
    ) -> None:
        # Everything is checked before any widget (or thread) exists.
        specs, settings = check_models(model, tokenizer, models, settings, blind)
        own, merged, views, same_seed = check_arguments(prompt, settings, same_seed, seed, common)
        pairs, prompt = column_pairs(model, tokenizer, specs, len(own), prompt)
        # The columns, made and run together: which model each runs this round (the lineup),
        # where they part (the marks), the shared seed, their saved runs.
        self._runs = RunAll(
            pairs, lambda: self.same_seed, by_model=models is not None, blind=blind, seed=seed
        )
        self._columns, self._lineup = self._runs.columns, self._runs.lineup
        try:
            self._runs.make(_Column, pairs, own, merged, views, prompt)
            # The header, kept in step with the columns, and the saved output.
            self._view = CompareView(
                _Header,
                self._runs,
                prompt=prompt,
                same_seed=same_seed,
                blind=blind,
                owner=self,
                live=super()._repr_mimebundle_,
            )
        except BaseException:
            self._runs.close()
            raise
        self._header, self._row = self._view.header, self._view.row
        super().__init__([self._header, self._row])
        self.add_class("nbstream-compare-widget")
        self._view.open()

    # -- Python API ---------------------------------------------------------------------------
    @property
    def columns(self) -> list[StreamWidget]:
        """The columns, one StreamWidget per setting, left to right."""
        return list(self._columns)

    @property
    def settings(self) -> list[dict[str, Any]]:
        """Each column's own settings dict, as given (checked), in the order given.

        In a blind round the settings move with their models; this order does not.
        """
        return self._lineup.own_settings()

    @property
    def prompt(self) -> str:
        """The shared prompt (the header's box; two-way)."""
        return str(self._header.prompt)

    @prompt.setter
    def prompt(self, value: str) -> None:
        self._view.set_box("prompt", value)

    @property
    def same_seed(self) -> bool:
        """Whether sampled columns share one seed (the **Same seed** checkbox)."""
        return bool(self._header.same_seed)

    @same_seed.setter
    def same_seed(self, value: bool) -> None:
        self._view.set_box("same_seed", value)

    @property
    def seed(self) -> int | None:
        """The shared seed given (None: one is drawn at each ``generate()`` while ``same_seed``)."""
        return self._runs.seed

    @seed.setter
    def seed(self, value: int | None) -> None:
        self._runs.seed = value

    @property
    def shared_seed(self) -> int | None:
        """The seed the last ``generate()`` gave the sampled columns; None without same seed."""
        return self._runs.shared_seed

    @property
    def statuses(self) -> list[str]:
        """Each column's state, left to right."""
        return [column.status for column in self._columns]

    @property
    def results(self) -> list[str | None]:
        """Each column's result: its text if its last run completed, else None."""
        return [column.result for column in self._columns]

    @property
    def divergence(self) -> tuple[int, list[int | None]] | TextDivergence | None:
        """Where the columns part: ``None`` while they agree (or a column has no run yet).

        Columns whose models share a tokenizer are compared by token ids: ``(step, tokens)``,
        the first step at which the ids are not all equal and each column's id there, in column
        order (``None`` for a column whose answer had already ended). Columns on different
        tokenizers, or on a server that sends no token ids, are compared by text: a
        :class:`TextDivergence` (the first character where the answers differ, and each
        column's token there). While columns stream, only what each of them has reached counts.
        """
        return self._runs.marks.find()

    @property
    def records(self) -> list[RunRecord | None]:
        """Each column's record (None for a column whose run has not ended)."""
        return [column.record for column in self._columns]

    # -- models, blind rounds and votes -------------------------------------------------------
    @property
    def model_names(self) -> list[str]:
        """Each model in words, in the order given to ``models=`` (not the columns' order).

        Which column runs which model in a blind round shows at :meth:`reveal`.
        """
        return list(self._lineup.names)

    @property
    def blind(self) -> bool:
        """Whether rounds are blind (the **Blind** checkbox): columns named A, B, C, models drawn.

        Turned on, the columns' model names and settings are hidden at once, and the next
        :meth:`generate` draws which model each column runs; turned off during a blind round, it
        reveals it.
        """
        return bool(self._header.blind)

    @blind.setter
    def blind(self, value: bool) -> None:
        self._view.set_box("blind", value)

    @property
    def labels(self) -> list[str]:
        """Each column's label, left to right: ``["A", "B", ...]``."""
        return self._lineup.labels

    @property
    def votes(self) -> dict[str, int]:
        """Label to count of votes for the current round, and ``"tie"``: votes for neither.

        Every count is 0 before one is cast, e.g. ``{"A": 2, "B": 1, "tie": 1}``.
        """
        with self._runs.lock:
            return dict(self._lineup.rounds.votes)

    @property
    def _shuffler(self) -> Any:
        """What draws a blind round's order (a test seeds it)."""
        return self._lineup.rounds.shuffler

    @_shuffler.setter
    def _shuffler(self, value: Any) -> None:
        self._lineup.rounds.shuffler = value

    def vote(self, label: str) -> dict[str, int]:
        """Vote for the better answer: the column labelled ``label`` (as a vote button does).

        ``"tie"`` (the **Tie** button) is a vote for neither: the answers are as good (or as
        bad). It is refused when a letter would be.

        Args:
            label: ``"A"``, ``"B"``, ... as the columns are labelled on the page, or ``"tie"``.

        Returns:
            The round's votes so far, label to count (``"tie"`` last).

        Raises:
            RuntimeError: No round yet, a column still running (vote on whole answers), or
                the round already revealed.
            ValueError: No column has that label.

        Example:
            >>> cw.generate("Explain recursion to a child."); cw.wait()
            >>> cw.vote("B")
            {'A': 0, 'B': 1, 'tie': 0}
            >>> cw.vote("tie")
            {'A': 0, 'B': 1, 'tie': 1}
        """
        return self._view.vote(label)

    def reveal(self) -> dict[str, str]:
        """Show which model (and settings) each label was; final for the round.

        Returns:
            Label to model (with its settings in words when a column had its own), in label
            order, e.g. ``{"A": "SmolLM2-135M-Instruct", "B": "llama3 on 127.0.0.1:8000"}``.

        Raises:
            RuntimeError: No round has run yet.

        Example:
            >>> cw.reveal()
            {'A': 'SmolLM2-135M-Instruct · temperature 0.7', 'B': 'SmolLM2-135M-Instruct'}
        """
        return self._view.reveal()

    def save(self, path: str | os.PathLike[str]) -> list[Path]:
        """Save every column's last run as a recording, and every round's votes, in a folder.

        Replay them side by side with ``CompareWidget(models=[nbstream.load(p) for p in
        paths])``: each column replays its recorded answer at its recorded pace. The folder's
        ``index.json`` keeps the prompt, the models and every round of this widget: its
        votes and, once revealed, who was which (each column's label, model as
        :meth:`reveal` names it, and model index); ``nbstream.arena`` adds up a class's
        folders into a leaderboard.

        Args:
            path: The folder (created if missing); the files are ``column-1.json``, ...,
                one per model, in the order given to ``models=``, and ``index.json``.

        Returns:
            The recordings written, in that order (``index.json`` is beside them).

        Raises:
            RuntimeError: A column has no run, or one still running, or a blind round not
                revealed yet (the files, in the models' order, would say which was which).

        Example:
            >>> cw.reveal()
            >>> paths = cw.save("votes/alice")
            >>> replayed = nbstream.CompareWidget(models=[nbstream.load(p) for p in paths])
            >>> board = nbstream.arena("votes/*")
        """
        return self._runs.save(path, self.prompt)

    @input_checked
    def generate(self, prompt: str | None = None, **settings: Any) -> Runs:
        """Start every column on the prompt; return their runs.

        The runs start left to right; on a shared model they run in that order, each
        waiting ``queued`` for the one before. Should a column fail to start (its model
        refuses the prompt), the columns already started are stopped and the error names
        the column.

        Args:
            prompt: The prompt; ``None`` for the prompt box's text.
            **settings: Override every column's own settings for these runs; checked
                before anything starts.

        Returns:
            The runs, left to right (a list, :class:`Runs`).

        Raises:
            RuntimeError: A column is still queued or running.
            ValueError: An empty prompt, or a column whose settings panel holds an invalid
                value; nothing starts.

        Example:
            >>> runs = cw.generate("Name two colors.")
            >>> [run.status for run in runs]  # doctest: +SKIP
        """
        if settings:
            named_settings("the settings given to generate()", settings)
        return self._view.run_all(prompt, settings)

    def run(self, prompt: str | None = None, **settings: Any) -> list[Generation]:
        """Deprecated: :meth:`generate` (warns ``DeprecationWarning``).

        Args:
            prompt: As for :meth:`generate`.
            **settings: As for :meth:`generate`.

        Returns:
            The runs, as :meth:`generate`.
        """
        warnings.warn(
            "CompareWidget.run() is now CompareWidget.generate()", DeprecationWarning, stacklevel=2
        )
        return self.generate(prompt, **settings)

    def wait(self, timeout: float | None = None) -> list[str | None]:
        """Wait until every column's run has ended; return each column's ``result``.

        A column's entry is its text if it completed, ``None`` if it was stopped or failed
        (its ``status``, ``partial_text`` and ``error`` say more) or never ran: one stopped
        column is part of a comparison, not an error. The columns' marks of where they part
        (one forward pass of the model) are written by then too. ``timeout`` bounds the
        whole wait. A ``KeyboardInterrupt`` (the kernel's interrupt button) stops every
        column, then propagates.

        Args:
            timeout: Seconds for the whole wait; ``None`` waits as long as it takes.

        Returns:
            Each column's ``result``, left to right.

        Raises:
            TimeoutError: The timeout expired; the runs go on.

        Example:
            >>> texts = cw.wait()
        """
        return self._runs.wait(timeout)

    def stop(self) -> bool:
        """Stop every column: queued ones are withdrawn, the running one halts.

        Returns True if any column had a run to stop.
        """
        return self._runs.stop()

    def close(self) -> None:
        """Stop every column and close the widget: its columns, header and views."""
        # Widget.__del__ calls close() also when __init__ raised before anything was made.
        view: CompareView | None = self.__dict__.get("_view")
        if view is not None and view.close():
            super().close()

    # -- teaching views, on every column ------------------------------------------------------
    show_tokens = EveryColumn("show_tokens")
    """Every column shows its answer as tokens (setting it sets every column's)."""
    show_probabilities = EveryColumn("show_probabilities")
    """Every column shades its tokens by probability (setting it sets every column's)."""
    show_alternatives = EveryColumn("show_alternatives")
    """Every column shows a token's alternatives (setting it sets every column's)."""

    # The header answers the page's messages; tests/test_protocol.py reads the kinds it
    # answers through this name, kept from before the header had a module of its own.
    _handle_header_message = staticmethod(CompareHeader.handle_page_message)

    # -- display ------------------------------------------------------------------------------
    def _fallback(self) -> dict[str, str]:
        """The text/plain and text/markdown fallbacks: each column's label, state and text."""
        return self._view.fallback()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        # The live view, plus each column's label, state and text for everything that
        # cannot run widgets (nbconvert, GitHub).
        return self._view.bundle()

    def _ipython_display_(self) -> None:
        # As StreamWidget; the fallback is rewritten whenever a column's state changes.
        self._view.output.display(lambda: self.model_id, self._view.shown, self._fallback)

    def __repr__(self) -> str:
        # The default repr serializes every trait (children included); this one stays cheap,
        # and names no model while a blind round hides them.
        return self._view.describe()
