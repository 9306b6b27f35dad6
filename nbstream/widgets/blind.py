"""The rules of a blind round: who is which column, what shows before Reveal, and the votes.

A :class:`BlindRound` is a :class:`~nbstream.CompareWidget`'s rounds: which model each column
runs this round (shuffled when the round is blind), whether the round is hidden (blind and not
yet revealed), and the votes. The ``shown_*`` functions say what of a column a hidden round may
show: the answers and their states; never a model's name, settings, figures, capabilities, or
whether a column replays a recording. Every path from a column to a user (its synced state and
so the saved notebook, its messages to the page, its record, error, repr and text copies)
passes through one of them, so a trait added later stays hidden until it is listed in
:data:`SHOWN_TRAITS` (and ``tests/test_blind.py`` fails until it is listed somewhere).

Nothing here needs a widget:

    >>> round_ = BlindRound(2, blind=True)
    >>> round_.hidden, round_.start() is not None, round_.number
    (True, True, 1)
    >>> shown_metrics({"tokens": 12, "tokens_per_s": 10.6, "finish_reason": "eos"})
    {}
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from ..protocol import CompareRecord, ErrorInfo, RunRecord
from .settings_panel import PANEL_SETTINGS

__all__ = [
    "HIDDEN_BRANCH",
    "HIDDEN_ERROR",
    "HIDDEN_LENS",
    "HIDDEN_MODEL",
    "HIDDEN_RUN",
    "LABELS",
    "MASKED_TRAITS",
    "SHOWN_TRAITS",
    "TIE",
    "BlindRound",
    "shown_error",
    "shown_message",
    "shown_metrics",
    "shown_record",
    "shown_snapshot",
    "shown_state",
]

#: The labels of the columns in a vote, left to right as shown.
LABELS = "ABCD"
#: The vote for neither answer (``cw.vote("tie")``, the **Tie** button), counted beside the
#: letters in :attr:`BlindRound.votes`.
TIE = "tie"
#: Said for a column's error while its blind round is hidden (a message can name the model).
HIDDEN_ERROR = "this column's run failed (details at Reveal)"
#: Said when a column's own run, a branch or "Inside the model" is asked for during a hidden
#: blind round.
HIDDEN_RUN = (
    "this blind round is hidden: a column's own run would change its answer unseen; "
    "Run all starts a new round, or Reveal first"
)
HIDDEN_LENS = "Inside the model shows after Reveal: it would tell the models apart"
#: A hidden column's ``branch_unavailable``: the same for every column (a recording's own
#: reason, or a server's, would say what the column runs).
HIDDEN_BRANCH = "This blind round is hidden: Continue with another token comes after Reveal."
#: ``record["model"]["name"]`` while the round is hidden.
HIDDEN_MODEL = "hidden until Reveal"

#: A column's synced traits that a hidden round shows as they are: the answer's state, the
#: shared prompt, the heading (already only a letter), the views' toggles, where the columns
#: part, and ``can_trace`` / ``can_explain`` (the compare already sets them the same for every
#: column while hidden: they decide what the kernel sends).
SHOWN_TRAITS = frozenset(
    {
        "status",
        "run_id",
        "input_error",
        "prompt",
        "label",
        "show_prompt",
        "show_tokens",
        "show_probabilities",
        "show_alternatives",
        "can_trace",
        "can_explain",
        "compare_mark",
        "in_run_all",
        "_branches",
        "branch_shown",
        "settings_schema",
    }
)
# A run's figures: the only metric a hidden round keeps is a cut answer's reason, which the
# answer's state line shows ("complete · stopped at max_new_tokens").
_SHOWN_FINISH = frozenset({"length"})
# What a record keeps while hidden (the answer and its state); every other key of a record
# is set to the neutral value below, and a key listed nowhere is left out.
_RECORD_SHOWN = frozenset(
    {"format", "prompt", "status", "created_at", "versions", "cancel_reason", "thinking"}
)
_RECORD_NEUTRAL: dict[str, Callable[[], Any]] = {
    "model": lambda: {"name": HIDDEN_MODEL, "class": None},
    "prompt_tokens": lambda: None,
    "settings": dict,
    "generation_config": lambda: None,
    "seed": lambda: None,
    "seed_source": lambda: None,
    "warnings": list,
    "settings_unconfirmed": dict,
    "server": lambda: None,
    "branch": lambda: None,
}
# Message fields that are figures (the live token count and time): left out while hidden.
_MESSAGE_FIGURES = ("tokens", "elapsed_s")


class BlindRound:
    """One CompareWidget's rounds: who runs in which column, whether hidden, the votes.

    Args:
        columns: How many columns (2 to 4).
        blind: Whether rounds are blind (the **Blind** checkbox); kept in :attr:`blind`.
        shuffler: Draws a blind round's order; by default the system's randomness, so that
            no seed a notebook sets (torch's, random's) lets anyone work the order out.

    Example:
        >>> round_ = BlindRound(2, blind=True, shuffler=random.Random(3))
        >>> moved = round_.start()
        >>> round_.hidden
        True
        >>> round_.vote("A", going=[])
        {'A': 1, 'B': 0, 'tie': 0}
        >>> round_.reveal(); round_.hidden
        False
        >>> round_.saved(["m2", "m1"])["columns"][0]
        {'label': 'A', 'model': 'm2', 'model_index': 1}
    """

    def __init__(self, columns: int, *, blind: bool = False, shuffler: Any = None) -> None:
        #: Column (left to right on the page) to the index of the model it runs, in the
        #: order the models were given; shuffled per blind round.
        self.order = list(range(columns))
        #: The round, counted from 1 (0: none ran yet).
        self.number = 0
        #: The Blind checkbox now (a round already running keeps :attr:`round_blind`).
        self.blind = blind
        #: Whether the current round is blind.
        self.round_blind = False
        self.revealed = False
        self.votes = _no_votes(LABELS[i] for i in range(columns))
        self.shuffler = shuffler if shuffler is not None else random.SystemRandom()
        #: The rounds ended before this one, as :meth:`saved` wrote each when the next began.
        self.past: list[dict[str, Any]] = []

    @property
    def hidden(self) -> bool:
        """Whether the columns hide what they run: blind, and this round not revealed."""
        return self.blind and not self.revealed

    @property
    def labels(self) -> list[str]:
        """Each column's label, left to right."""
        return [LABELS[p] for p in range(len(self.order))]

    def start(self) -> list[int]:
        """Begin a round; blind, each column gets a model drawn anew.

        Returns:
            The columns (left to right, 0-based) whose model changed.
        """
        self.number += 1
        self.round_blind = self.blind
        self.revealed = False
        order = list(range(len(self.order)))
        if self.round_blind:
            self.shuffler.shuffle(order)
        moved = [p for p, index in enumerate(order) if index != self.order[p]]
        self.order = order
        self.votes = _no_votes(self.labels)
        return moved

    def close(self, words: Sequence[str]) -> None:
        """Keep the round now ending in :attr:`past` (before :meth:`start` begins the next).

        Args:
            words: Each column's model in words, left to right (as :meth:`reveal` names them).
        """
        if self.number:
            self.past.append(self.saved(words))

    def saved(self, words: Sequence[str]) -> dict[str, Any]:
        """The current round as a saved folder's index keeps it: its votes, and who was which.

        Who was which (each column's label, model in words and model index) is kept only when
        the round showed it: a blind round once revealed, or a round that was not blind. A
        blind round never revealed keeps its votes and ``"revealed": false``, nothing more
        (only Reveal tells which was which; ``nbstream.arena`` refuses such a round).

        Args:
            words: Each column's model in words, left to right (as :meth:`reveal` names them).

        Returns:
            ``{"round", "blind", "revealed", "votes"}`` and, when shown, ``"columns"``.
        """
        entry: dict[str, Any] = {
            "round": self.number,
            "blind": self.round_blind,
            "revealed": self.revealed,
            "votes": dict(self.votes),
        }
        if self.revealed or not self.round_blind:
            entry["columns"] = [
                {"label": label, "model": words[p], "model_index": self.order[p]}
                for p, label in enumerate(self.labels)
            ]
        return entry

    def reveal(self) -> None:
        """End the hiding of this round (final for it)."""
        if self.number == 0:
            raise RuntimeError("there is nothing to reveal yet: Run all (cw.generate()) first")
        self.revealed = True

    def check_vote_open(self, going: Iterable[str]) -> None:
        """Refuse a vote now, saying why; ``going``: the labels of columns not yet ended."""
        if self.number == 0:
            raise RuntimeError("there is no answer to vote on yet: Run all (cw.generate()) first")
        if self.round_blind and self.revealed:
            raise RuntimeError(
                "this round is revealed: its votes are closed (Run all starts a new round)"
            )
        still = sorted(going)
        if still:
            raise RuntimeError(
                f"vote once every answer has ended: column{'s' if len(still) > 1 else ''} "
                f"{', '.join(still)} still running (wait, or Stop all)"
            )

    def vote(self, label: Any, going: Iterable[str]) -> dict[str, int]:
        """Count a vote for ``label`` (a column's letter, or :data:`TIE`); returns the votes."""
        if not isinstance(label, str) or label not in self.votes:
            raise ValueError(
                f"no column is labelled {label!r:.40}; vote for one of "
                f"{', '.join(self.labels)}, or {TIE!r} for neither"
            )
        self.check_vote_open(going)
        self.votes[label] += 1
        return dict(self.votes)

    def note(self, position: int, names: list[str]) -> CompareRecord | None:
        """Column ``position``'s ``record["compare"]``: its model and the order once shown."""
        if self.number == 0:
            return None
        note: CompareRecord = {
            "round": self.number,
            "label": LABELS[position],
            "blind": self.round_blind,
            "column": position,
        }
        if not self.hidden:
            note["model"] = names[self.order[position]]
            note["order"] = [names[i] for i in self.order]
        return note

    def words(self, mapping: Mapping[str, str]) -> str:
        """The round's votes, and ``mapping`` (label to model) once revealed, in one line.

        ``""`` before any vote in a round that is not blind; a tie is said once one is cast.
        """
        parts = []
        if any(self.votes.values()):
            shown = {k: n for k, n in self.votes.items() if k != TIE or n}
            parts.append("Votes: " + ", ".join(f"{k} {n}" for k, n in shown.items()))
        if self.revealed:
            parts.append("Revealed: " + ", ".join(f"{k} = {v}" for k, v in mapping.items()))
        elif self.round_blind:
            parts.append(f"Blind round {self.number}: not revealed")
        return " · ".join(parts)


def _no_votes(labels: Iterable[str]) -> dict[str, int]:
    # Every key from the start, the tie last: the counts read in the order the page shows.
    votes = dict.fromkeys(labels, 0)
    votes[TIE] = 0
    return votes


# -- what a hidden round shows of a column -----------------------------------------------------
def shown_metrics(metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """A run's metrics as a hidden round shows them: no figure, only a cut answer's reason.

    Example:
        >>> shown_metrics({"tokens": 40, "ttft_s": 0.07, "finish_reason": "length"})
        {'finish_reason': 'length'}
    """
    reason = (metrics or {}).get("finish_reason")
    return {"finish_reason": reason} if reason in _SHOWN_FINISH else {}


def shown_error(error: ErrorInfo | Mapping[str, Any] | None) -> ErrorInfo | None:
    """A run's error as a hidden round shows it: that it failed, not its words.

    Example:
        >>> shown_error({"type": "HTTPError", "message": "404 from 127.0.0.1"})["message"]
        "this column's run failed (details at Reveal)"
    """
    if error is None:
        return None
    return {"type": "RunFailed", "message": HIDDEN_ERROR}


def shown_record(record: RunRecord) -> RunRecord:
    """A run's record as a hidden round shows it: the answer's state, no model or settings.

    Every key of a record stays (they are a contract), with a neutral value; a key unknown
    here is left out until Reveal.

    Example:
        >>> shown_record(run.record)["model"]
        {'name': 'hidden until Reveal', 'class': None}
    """
    shown: dict[str, Any] = {}
    for name, value in record.items():
        if name in _RECORD_SHOWN:
            shown[name] = value
        elif name in _RECORD_NEUTRAL:
            shown[name] = _RECORD_NEUTRAL[name]()
        elif name == "metrics":
            shown[name] = shown_metrics(cast("Mapping[str, Any]", value))
        elif name == "error":
            shown[name] = shown_error(cast("Mapping[str, Any] | None", value))
        elif name == "compare":
            shown[name] = value  # the compare's own note, which holds the model back itself
    return cast("RunRecord", shown)


def shown_snapshot(snapshot: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A run's saved copy (the ``snapshot`` trait) with no timing: its Replay is instant.

    Example:
        >>> shown_snapshot({"v": 1, "text": "Hi", "steps": [70, 1, 380, 1]})["steps"]
        [0, 1, 0, 1]
    """
    if snapshot is None:
        return None
    shown = {k: v for k, v in snapshot.items() if k != "thinking_tokens"}
    steps = snapshot.get("steps")
    if isinstance(steps, list):
        # [dt_ms, grown, ...]: the pace is the model's speed.
        shown["steps"] = [0 if i % 2 == 0 else n for i, n in enumerate(steps)]
    return shown


def shown_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message to a column's views without the live figures (token count, time).

    Example:
        >>> shown_message({"type": "delta", "text": "Hi", "tokens": 3, "elapsed_s": 0.4})
        {'type': 'delta', 'text': 'Hi'}
    """
    kind = message.get("type")
    if kind not in ("delta", "thinking", "reset"):
        return dict(message)  # a "tokens" message's "tokens" are its entries, not a count
    shown = {k: v for k, v in message.items() if kind == "reset" or k not in _MESSAGE_FIGURES}
    thinking = shown.get("thinking")
    if isinstance(thinking, Mapping):  # a reset's thinking carries its counters
        shown["thinking"] = {k: v for k, v in thinking.items() if k not in _MESSAGE_FIGURES}
    return shown


def _masks() -> dict[str, Callable[[Any], Any]]:
    masks: dict[str, Callable[[Any], Any]] = {name: lambda _v: None for name in PANEL_SETTINGS}
    masks.update(
        {
            "metrics": shown_metrics,
            "error_info": shown_error,
            "snapshot": shown_snapshot,
            "settings_defaults": lambda _v: {},
            "settings_errors": lambda _v: {},
            "next_run_samples": lambda _v: None,
            "branch_unavailable": lambda _v: HIDDEN_BRANCH,
            "prompt_text": lambda _v: None,
            "prompt_tokens": lambda _v: None,
            "can_lens": lambda _v: False,
            # The Steering slider: no slider (its strength would tell the columns apart).
            "steer_strength": lambda _v: None,
            "steer_direction": lambda _v: None,
        }
    )
    return masks


#: A column's synced traits that a hidden round shows masked, and how: its settings (the
#: Settings panel), figures, error words, saved copy's pace, the model's defaults, its
#: templated prompt and its capabilities.
MASKED_TRAITS: dict[str, Callable[[Any], Any]] = _masks()


def shown_state(state: Mapping[str, Any], widget_keys: Iterable[str] = ()) -> dict[str, Any]:
    """A column's synced state as a hidden round shows it (to the page and the saved notebook).

    Args:
        state: The state (``widget.get_state()``), all of it or some keys.
        widget_keys: The traits every widget has (its model's and view's names, layout):
            shown as they are.

    Returns:
        The state: :data:`SHOWN_TRAITS` as they are, :data:`MASKED_TRAITS` masked, any
        other trait left out.

    Example:
        >>> shown_state({"status": "complete", "temperature": 0.9, "metrics": {"tokens": 9}})
        {'status': 'complete', 'temperature': None, 'metrics': {}}
    """
    keep = SHOWN_TRAITS.union(widget_keys)
    shown: dict[str, Any] = {}
    for name, value in state.items():
        mask = MASKED_TRAITS.get(name)
        if mask is not None:
            shown[name] = mask(value)
        elif name in keep:
            shown[name] = value
    return shown
