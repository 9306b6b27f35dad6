"""A CompareWidget's lineup: which model each column runs this round, and how each is headed.

The columns stay where they are on the page (A, B, C left to right, as the DOM, the saved
state and a screen reader read them); a blind round moves the models between them. The
rules of a round (the shuffle, what a hidden round shows, the votes) are
:class:`~nbstream.widgets.blind.BlindRound`'s; the lineup applies them to the columns: their
headings, their ``record["compare"]``, what they show of their capabilities, and the vote row
of the header.

Example:
    >>> lineup = Lineup(pairs, columns, threading.RLock(), lambda: True, by_model=True, blind=True)
    >>> lineup.new_round()
    >>> lineup.hidden, lineup.labels
    (True, ['A', 'B'])
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..generation import Generation
from ..protocol import CompareRecord
from ..recording import Recording
from .blind import LABELS, BlindRound
from .compare_column import CompareColumn, has_ended
from .compare_models import competition, distinct_names

__all__ = ["Lineup"]


class Lineup:
    """Which model each of a CompareWidget's columns runs, its heading, and the votes.

    Args:
        pairs: Each model and its tokenizer, in the order given to ``models=``.
        columns: The compare's columns, left to right (read as they are at each call).
        lock: The compare's lock over its columns' shared state.
        lettered: Whether the columns carry letters now (models compared, or the Blind box).
        by_model: Whether the columns compare models (``models=``), not settings.
        blind: Whether rounds are blind (the **Blind** checkbox).

    Example:
        >>> lineup.dress(columns[0], "temperature 0.7")
        'A · SmolLM2-135M-Instruct · temperature 0.7'
    """

    def __init__(
        self,
        pairs: list[tuple[Any, Any]],
        columns: list[CompareColumn],
        lock: threading.RLock,
        lettered: Callable[[], bool],
        *,
        by_model: bool,
        blind: bool,
    ) -> None:
        self.by_model = by_model
        #: Each model in words, in the order given.
        self.names = distinct_names(pairs)
        #: Which models replay a recording.
        self.replays = [isinstance(m, Recording) for m, _ in pairs]
        #: Which columns run at once on one processor, in words ("" when none do).
        self.competing = competition(pairs) if by_model else ""
        #: Whether every column runs one model object: then its odds speak for every column
        #: where they part (a model and its adapter are two: their odds differ).
        self.one_model = len({id(m) for m, _ in pairs}) == 1
        #: Who runs in which column, whether the round is hidden, the votes.
        self.rounds = BlindRound(len(pairs), blind=blind)
        self._columns = columns
        self._lock = lock
        self._lettered = lettered
        # Each model's column as last held (its panel's edits follow the model): a blind
        # round hands them out anew. Taken once every column exists (take_slots).
        self._slots: list[dict[str, Any]] = []

    def take_slots(self) -> None:
        """Note each model's column as created (once every column exists)."""
        self._slots = [column.slot() for column in self._columns]

    @property
    def hidden(self) -> bool:
        """Whether the columns hide what they run: blind, and the round not revealed."""
        return self.rounds.hidden

    @property
    def labels(self) -> list[str]:
        """Each column's label, left to right: ``["A", "B", ...]``."""
        return self.rounds.labels

    def own_settings(self) -> list[dict[str, Any]]:
        """Each column's own settings dict, in the order the models were given."""
        with self._lock:
            order = list(self.rounds.order)
        return [dict(self._columns[order.index(i)].own_settings) for i in range(len(order))]

    def runs_by_model(self) -> list[Generation | None]:
        """Each model's last run, in the order the models were given (caller holds the lock)."""
        order = self.rounds.order
        return [self._columns[order.index(i)].run for i in range(len(order))]

    def going(self) -> list[str]:
        """The labels of the columns whose answers have not ended."""
        return [self.labels[i] for i, c in enumerate(self._columns) if not has_ended(c)]

    def mapping(self) -> dict[str, str]:
        """Label to model in words, in label order (the lock held)."""
        return {label: self._model_words(p) for p, label in enumerate(self.rounds.labels)}

    def _model_words(self, position: int) -> str:
        column = self._columns[position] if position < len(self._columns) else None
        words = column.settings_words if column is not None else ""
        name = self.names[self.rounds.order[position]]
        if column is not None and (column.own_settings or not self.by_model) and words:
            return f"{name} · {words}"
        return name

    def dress(self, column: CompareColumn, words: str) -> str:
        """A column's heading: its letter, then (unless hidden) its model and settings."""
        with self._lock:
            order = self.rounds.order
            position = self._columns.index(column) if column in self._columns else len(order)
            index = order[position] if position < len(order) else position
            letter = LABELS[position] if position < len(LABELS) else "?"
            if self.hidden:
                return letter  # a replay's column too: that would say what it runs
            if not self._lettered():
                return words
            name = self.names[index] if index < len(self.names) else ""
            shown = [letter, name]
            if words and (words != "model defaults" or not self.by_model):
                shown.append(words)
            return " · ".join(part for part in shown if part)

    def relabel(self) -> None:
        """Every column's heading and Prompt view again (never with the lock held)."""
        for column in self._columns:
            column.relabel()

    def new_round(self) -> None:
        """A Run all: a new round; blind, each column gets a model drawn anew."""
        # What each model's column holds now (its panel's edits follow the model); taken
        # before the compare's lock, as a column's lock always is.
        held = [column.slot() for column in self._columns]
        with self._lock:
            for slot, index in zip(held, self.rounds.order, strict=True):
                self._slots[index] = slot
            # The round ending is kept (its votes, and who was which if it showed it), named
            # as its columns were before they are handed out anew.
            self.rounds.close(list(self.mapping().values()))
            moved = self.rounds.start()
            order = self.rounds.order
        # The columns stay in place on the page (A, B, C left to right, as the DOM, the saved
        # state and a screen reader read them); the models move between them.
        for position in moved:
            self._columns[position].serve(self._slots[order[position]])
        self.relabel()

    def note(self, column: CompareColumn) -> CompareRecord | None:
        """``column``'s ``record["compare"]``: its model and the order held back while hidden."""
        with self._lock:
            if column not in self._columns:
                return None
            return self.rounds.note(self._columns.index(column), self.names)

    def saved_rounds(self) -> list[dict[str, Any]]:
        """Every round so far as a saved folder's index keeps it (see ``BlindRound.saved``)."""
        with self._lock:
            rounds = self.rounds
            now = [rounds.saved(list(self.mapping().values()))] if rounds.number else []
            return [*rounds.past, *now]

    def covered_caps(self) -> dict[str, bool]:
        """What a hidden round shows of every column's capabilities: no token views.

        A token's probability and alternatives are its model's own figures (a small model's
        are flatter), and where one token ends the tokenizer's: either would tell the
        columns apart. They come at Reveal, with the other figures.
        """
        return {"can_trace": False, "can_explain": False}

    def vote_state(self) -> dict[str, Any]:
        """The header's vote row: labels, votes, whether a vote is open, what was revealed."""
        try:
            self.rounds.check_vote_open(self.going())
            open_now = True
        except RuntimeError:
            open_now = False
        return {
            "voting": self._lettered(),
            "labels": self.rounds.labels,
            "votes": dict(self.rounds.votes),
            "can_vote": open_now,
            "revealed": self.mapping() if self.rounds.revealed else {},
        }

    def vote_words(self) -> str:
        """The round's votes and what was revealed, in one line ("" before any vote)."""
        with self._lock:
            if not self.rounds.number or not self._lettered():
                return ""
            return self.rounds.words(self.mapping() if self.rounds.revealed else {})
