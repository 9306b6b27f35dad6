"""A class arena: every student's saved blind rounds, added up into one leaderboard.

Each student runs blind rounds in a :class:`~nbstream.CompareWidget`, votes (a letter, or
``"tie"``), reveals, and saves the folder (``cw.save(folder)``); its ``index.json`` keeps
every round's votes and who was which. :func:`arena` reads a class's folders, refuses what
cannot count (saying which file and why), and rates the models.

**The rating: Bradley–Terry.** Each model has a strength ``p``; model *i* beats model *j*
with probability ``p_i / (p_i + p_j)``. A vote for one of two answers is one such
comparison; a vote for A among three answers says A beat B and A beat C (nothing about B
against C). A tie counts as half a win for each side, as Chatbot Arena's leaderboard does:
it says the two are close, and the ratings stay those of the plain model (Davidson's tie
parameter would add a number to explain and changes the order little). The strengths are
the maximum-likelihood fit, by Zermelo's iteration (the MM algorithm; Hunter 2004), shown
on the Elo scale: ``1000 + 400 * log10(p)``, so 400 points apart means 10 to 1 odds. Unlike
Elo's running updates, the fit does not depend on the order the votes came in: a class's
board is the same whichever file is read first.

**The prior.** A model that lost every vote would rate minus infinity (and one that won
every vote, plus infinity). Each model is also given ``prior`` votes (default 1) tied
against a reference model fixed at 1000: every rating is finite, and a model with few
votes stays near 1000 until its votes say otherwise. One vote's weight is small beside a
class's 300.

**The interval: a parametric bootstrap.** The class is voted again from the fit,
``samples`` times (1000 by default): each round's group of models keeps its number of votes,
and each vote is drawn again, a tie at the group's tie rate, else a win for model *i* with
probability ``p_i`` over the sum of the group's strengths (Luce's choice; for two models,
Bradley–Terry's own odds). Each draw is fitted the same way, and ``low``, ``high`` are the
2.5th and 97.5th percentiles of a model's ratings (a 95% interval; ``level=`` changes it).
Why not draw the observed votes again (a bootstrap over votes): when the votes hold no
variation, every draw is the same. Three students who each saw the default model beat a
tiny one twice give 6-0 in every draw, and the board said ``1253, interval 1253 – 1253``: a
certainty six votes cannot give. Thanks to the prior, the fitted odds are 18 to 1, not
certain, so a redrawn class loses a vote now and then: ``1055 – 1253`` (``1261 – 1430``
at 60-0; a 3-3 split, ``877 – 1123``). The tie rate is the group's ``(ties + 1/2) /
(votes + 1)``, so that a pair that tied every vote is not certain of that either. The
draws come from a fixed ``seed``, so the same files give the same board. A unanimous
winner is rated as far from 1000 as its votes can take it, so no draw rates it higher: its
interval reaches down from its rating (an interval always includes the rating itself). A
class of 30 students with 10 votes each takes about half a second.

Example:
    >>> board = nbstream.arena("class/*")      # every student's saved folder
    >>> board.table[0]["model"]                 # the best rated
    'SmolLM2-360M-Instruct'
    >>> board.refused                           # [(path, why), ...]: the files that did not count
    []
    >>> board                                   # in a notebook: the table, to project
"""

from __future__ import annotations

import glob
import html
import importlib
import json
import os
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "COLUMNS",
    "INDEX_FORMAT",
    "INDEX_NAME",
    "Leaderboard",
    "arena",
    "bradley_terry",
]

#: The file a saved compare folder's votes are in (``cw.save(folder)`` writes it).
INDEX_NAME = "index.json"
#: Its format, versioned: a reader refuses a newer version rather than misread it.
INDEX_FORMAT = "nbstream.compare/1"
#: The columns of :attr:`Leaderboard.table`, in order.
COLUMNS = ("model", "rating", "low", "high", "votes", "wins", "ties")

_FORMAT_NAME, _, _FORMAT_VERSION = INDEX_FORMAT.rpartition("/")
# A student's index is a few kilobytes; a file far larger is not one (and is not read).
_MAX_INDEX_BYTES = 10_000_000
_RATING_BASE = 1000.0
_RATING_SCALE = 400.0
# Zermelo's iteration stops once no strength moves by more than this (relative) ...
_TOLERANCE = 1e-10
# ... or after this many steps (a class's data converge in a few hundred).
_MAX_STEPS = 20_000
_TIE = "tie"


class Refused(ValueError):
    """Why a saved file, or one round of it, cannot count."""


class _Vote(NamedTuple):
    """One vote: the models of its round (sorted) and the one voted for (``""``: a tie)."""

    models: tuple[str, ...]
    winner: str


# -- reading a class's files --------------------------------------------------------------------
def _index_files(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
) -> tuple[list[Path], list[tuple[str, str]]]:
    """The index files ``paths`` name (folders, index files, globs), and what named none."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found: dict[str, Path] = {}
    refused: list[tuple[str, str]] = []
    for given in paths:
        text = os.fspath(given)
        matches = sorted(glob.glob(text, recursive=True)) if glob.has_magic(text) else [text]
        if not matches:
            refused.append((text, "no file or folder matches this pattern"))
        for match in matches:
            path = Path(match)
            if path.is_dir():
                own = path / INDEX_NAME
                inside = [own] if own.is_file() else sorted(path.rglob(INDEX_NAME))
                if not inside:
                    refused.append(
                        (
                            match,
                            f"no {INDEX_NAME} in this folder: cw.save(folder) "
                            "writes one (a folder saved before votes were kept "
                            "has none, and its votes cannot count)",
                        )
                    )
                for index in inside:
                    found.setdefault(str(index.resolve()), index)
            elif path.exists():
                found.setdefault(str(path.resolve()), path)
            else:
                refused.append((match, "no such file or folder"))
    return sorted(found.values(), key=str), refused


def _load_index(path: Path) -> dict[str, Any]:
    """The index at ``path``, its format checked (raises :class:`Refused`)."""
    try:
        if path.stat().st_size > _MAX_INDEX_BYTES:
            raise Refused(f"{path.stat().st_size} bytes: too large for a saved compare's index")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise Refused(f"not readable ({type(exc).__name__}: {exc})") from None
    except json.JSONDecodeError as exc:
        raise Refused(f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise Refused("not a saved compare's index (not a JSON object)")
    kind = data.get("format")
    name, _, version = str(kind).rpartition("/")
    if name != _FORMAT_NAME:
        raise Refused(
            f"not a saved compare's index (format {kind!r:.60}): pass the folder "
            f"cw.save(folder) wrote, or its {INDEX_NAME}"
        )
    if not version.isdigit() or int(version) > int(_FORMAT_VERSION):
        raise Refused(f"written by a newer nbstream (format {kind!r:.60}): upgrade nbstream")
    rounds = data.get("rounds")
    if not isinstance(rounds, list):
        raise Refused("no list of rounds (the field 'rounds' is missing or not a list)")
    return data


def _field(entry: Mapping[str, Any], name: str, kind: type, where: str) -> Any:
    value = entry.get(name)
    # bool is an int in Python; a count or an index written as true is malformed.
    if value is None or not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        missing = "missing" if value is None else f"not a {kind.__name__} ({value!r:.40})"
        raise Refused(f"{where}: the field {name!r} is {missing}")
    return value


def _round_columns(entry: Mapping[str, Any], where: str) -> dict[str, str]:
    """A revealed round's label to model (raises :class:`Refused` when malformed)."""
    columns = _field(entry, "columns", list, where)
    if not 2 <= len(columns) <= 4:
        raise Refused(f"{where}: {len(columns)} columns (a compare has 2 to 4)")
    mapping: dict[str, str] = {}
    for column in columns:
        if not isinstance(column, dict):
            raise Refused(f"{where}: a column is not an object ({column!r:.40})")
        label = _field(column, "label", str, where)
        model = _field(column, "model", str, where)
        if _field(column, "model_index", int, where) < 0:
            raise Refused(f"{where}: a negative model_index for column {label!r:.20}")
        if not model.strip():
            raise Refused(f"{where}: column {label!r:.20} names no model")
        if label in mapping or label == _TIE:
            raise Refused(f"{where}: the label {label!r:.20} is given twice")
        if model in mapping.values():
            raise Refused(f"{where}: the model {model!r:.60} is named twice in one round")
        mapping[label] = model
    return mapping


def _round_votes(entry: Any, where: str) -> list[tuple[_Vote, int]]:
    """One round's votes, each kind with its count (raises :class:`Refused`).

    A round that cannot count but is well formed (not blind, not revealed) raises
    :class:`_Skipped` instead: the file's other rounds still count.
    """
    if not isinstance(entry, dict):
        raise Refused(f"{where} is not an object ({entry!r:.40})")
    votes = _field(entry, "votes", dict, where)
    for label, count in votes.items():
        if not isinstance(count, int) or isinstance(count, bool):
            raise Refused(f"{where}: the count for {label!r:.20} is not a whole number")
        if count < 0:
            raise Refused(f"{where}: a negative count ({count}) for {label!r:.20}")
    blind = _field(entry, "blind", bool, where)
    revealed = _field(entry, "revealed", bool, where)
    if not any(votes.values()):
        return []  # no vote: nothing to count, nothing wrong
    if not blind:
        raise _Skipped(f"{where} was not blind: its votes knew which model was which")
    if not revealed:
        raise _Skipped(
            f"{where} was never revealed: the file does not say which model was which "
            "(Reveal each round before the next Run all)"
        )
    mapping = _round_columns(entry, where)
    unknown = [label for label in votes if label not in mapping and label != _TIE]
    if unknown:
        raise Refused(f"{where}: votes for an unknown label {unknown[0]!r:.20}")
    models = tuple(sorted(mapping.values()))
    return [
        (_Vote(models, mapping.get(label, "")), count) for label, count in votes.items() if count
    ]


class _Skipped(Refused):
    """A well-formed round that does not count (the file's other rounds do)."""


def _read_file(path: Path) -> tuple[list[tuple[_Vote, int]], list[str]]:
    """A file's votes, and why any of its rounds did not count (raises :class:`Refused`)."""
    data = _load_index(path)
    votes: list[tuple[_Vote, int]] = []
    skipped: list[str] = []
    for i, entry in enumerate(data["rounds"]):
        number = entry.get("round") if isinstance(entry, dict) else None
        where = f"round {number}" if isinstance(number, int) else f"round entry {i + 1}"
        try:
            votes.extend(_round_votes(entry, where))
        except _Skipped as exc:
            skipped.append(str(exc))
    return votes, skipped


def _read_class(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
) -> tuple[Counter[_Vote], int, list[tuple[str, str]]]:
    """Every vote of the class's files, how many files counted, and what was refused."""
    files, refused = _index_files(paths)
    votes: Counter[_Vote] = Counter()
    counted = 0
    for path in files:
        try:
            found, skipped = _read_file(path)
        except Refused as exc:
            refused.append((str(path), f"{exc}; none of its votes count"))
            continue
        refused.extend((str(path), why) for why in skipped)
        for vote, count in found:
            votes[vote] += count
        counted += bool(found)
    return votes, counted, sorted(refused)


# -- the fit ------------------------------------------------------------------------------------
def bradley_terry(wins: Any, *, prior: float = 1.0) -> np.ndarray:
    """Bradley–Terry ratings from a matrix of wins, on the Elo scale (1000 ± 400·log10 odds).

    Zermelo's iteration (the MM algorithm) for the maximum-likelihood strengths, with
    ``prior`` votes per model tied against a reference rated 1000. Leading dimensions are
    fitted each on its own (the bootstrap fits its draws at once).

    Args:
        wins: ``wins[..., i, j]``: how often model ``i`` beat model ``j`` (a tie counts half
            to each); a square matrix, or a stack of them.
        prior: Ties per model against the reference; ``0`` fits the plain maximum
            likelihood, which exists only when no model (or group of models) won or lost
            every comparison, and is then centred on 1000.

    Returns:
        Each model's rating, in the matrix's order.

    Raises:
        ValueError: A matrix that is not square or has a negative count, a negative prior,
            or (``prior=0``) a maximum likelihood that does not exist.

    Example:
        >>> bradley_terry([[0, 3], [1, 0]], prior=0).round(1)   # 3 to 1: 400·log10(3) apart
        array([1095.4,  904.6])
    """
    import numpy as np

    w = np.asarray(wins, dtype=float)
    if w.ndim < 2 or w.shape[-1] != w.shape[-2]:
        raise ValueError(f"wins must be a square matrix (or a stack), got shape {w.shape}")
    if (w < 0).any() or not np.isfinite(w).all():
        raise ValueError("wins must be finite and not negative")
    if prior < 0:
        raise ValueError(f"prior must be 0 or more, got {prior}")
    if prior == 0:
        _check_estimable(w)
    strength = _zermelo(w, prior)
    ratings: np.ndarray = _RATING_BASE + _RATING_SCALE * np.log10(strength)
    return ratings


def _check_estimable(w: np.ndarray) -> None:
    """Refuse a plain fit whose maximum likelihood does not exist (Zermelo's condition)."""
    import numpy as np

    for matrix in w.reshape(-1, w.shape[-1], w.shape[-1]):
        # Every model must reach every other by a chain of "beat (or tied)": then none of
        # them, nor any group, won or lost all of its comparisons.
        reach = (matrix > 0) | np.eye(len(matrix), dtype=bool)
        for _ in range(len(matrix)):
            reach = reach | ((reach.astype(int) @ reach.astype(int)) > 0)
        if not reach.all():
            raise ValueError(
                "with prior=0 the ratings do not exist: a model (or a group) won, or lost, "
                "every comparison; give prior > 0"
            )


def _zermelo(w: np.ndarray, prior: float) -> np.ndarray:
    """The strengths, on every matrix of the stack at once.

    Zermelo's fixed point, reached by Newman's form of his iteration (Newman 2023, "Efficient
    computation of rankings from pairwise comparisons"), one model after the other: the same
    maximum, in tens of sweeps where the classic form takes thousands on a lopsided class
    (updated all at once instead, two models would swap their strengths forever).
    """
    import numpy as np

    models: int = w.shape[-1]
    p = np.ones(w.shape[:-1])
    for _ in range(_MAX_STEPS):
        before = p.copy()
        for i in range(models):
            own = p[..., i : i + 1]
            pair = own + p
            # The reference (strength 1) is tied `prior` times: half a win, half a loss.
            reference = prior / 2 / (own[..., 0] + 1.0)
            top = (w[..., i, :] * p / pair).sum(axis=-1) + reference
            bottom = (w[..., :, i] / pair).sum(axis=-1) + reference
            p[..., i] = top / bottom
        if prior == 0:
            # Without the reference, only ratios are fixed: centre the log strengths.
            p = p / np.exp(np.log(p).mean(axis=-1, keepdims=True))
        if not p.size or np.abs(p / before - 1.0).max() < _TOLERANCE:
            break
    return p


def _wins(kinds: Sequence[_Vote], models: Sequence[str]) -> np.ndarray:
    """``wins[k, i, j]``: what one vote of kind ``k`` adds to model ``i``'s wins over ``j``."""
    import numpy as np

    where = {model: i for i, model in enumerate(models)}
    wins = np.zeros((len(kinds), len(models), len(models)))
    for k, vote in enumerate(kinds):
        at = [where[model] for model in vote.models]
        for i in at:
            for j in at:
                if i == j:
                    continue
                if not vote.winner:
                    wins[k, i, j] = 0.5  # a tie: half a win each way
                elif models[i] == vote.winner:
                    wins[k, i, j] = 1.0
    return wins


def _redrawn(
    votes: Counter[_Vote], models: Sequence[str], ratings: np.ndarray, *, samples: int, seed: int
) -> np.ndarray:
    """``samples`` classes drawn again from the fit, each as its matrix of wins.

    Each group of models (a round's models) keeps its number of votes; each vote is drawn
    again: a tie at the group's tie rate, else a win for model ``i`` with probability
    ``p_i / (sum of the group's p)`` (Luce's choice: Bradley–Terry's for two). The tie rate
    is the group's ``(ties + 1/2) / (votes + 1)``: a group that tied every vote, or never,
    is not made certain of it (a rate of 1 would draw the same ties every time).
    """
    import numpy as np

    strength = 10 ** ((ratings - _RATING_BASE) / _RATING_SCALE)
    where = {model: i for i, model in enumerate(models)}
    groups: Counter[tuple[str, ...]] = Counter()
    ties: Counter[tuple[str, ...]] = Counter()
    for vote, count in votes.items():
        groups[vote.models] += count
        ties[vote.models] += 0 if vote.winner else count
    rng = np.random.default_rng(seed)
    wins = np.zeros((samples, len(models), len(models)))
    # Sorted: the same votes, from files read in any order, draw the same classes.
    for group, count in sorted(groups.items()):
        tie = (ties[group] + 0.5) / (count + 1)
        p = strength[[where[model] for model in group]]
        chances = np.append(tie, (1 - tie) * p / p.sum())
        outcomes = [_Vote(group, ""), *(_Vote(group, model) for model in group)]
        drawn = rng.multinomial(count, chances / chances.sum(), size=samples)
        wins += np.tensordot(drawn.astype(float), _wins(outcomes, models), axes=1)
    return wins


def _rate(
    votes: Counter[_Vote], *, samples: int, seed: int, prior: float, level: float
) -> list[dict[str, Any]]:
    """The leaderboard's rows: each model's rating, interval and counts, best first."""
    import numpy as np

    kinds = sorted(votes)  # a fixed order: the same files in any order draw the same votes
    models = sorted({model for vote in kinds for model in vote.models})
    if not kinds:
        return []
    per_kind = _wins(kinds, models)
    counts = np.array([votes[kind] for kind in kinds], dtype=float)
    ratings = bradley_terry(np.tensordot(counts, per_kind, axes=1), prior=prior)
    redrawn = _redrawn(votes, models, ratings, samples=samples, seed=seed)
    spread = bradley_terry(redrawn, prior=prior)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(spread, [tail, 100 - tail], axis=0)
    rows = []
    for i, model in enumerate(models):
        mine = [kind for kind in kinds if model in kind.models]
        rows.append(
            {
                "model": model,
                "rating": float(ratings[i]),
                "low": float(min(low[i], ratings[i])),
                "high": float(max(high[i], ratings[i])),
                "votes": sum(votes[kind] for kind in mine),
                "wins": sum(votes[kind] for kind in mine if kind.winner == model),
                "ties": sum(votes[kind] for kind in mine if not kind.winner),
            }
        )
    return sorted(rows, key=lambda row: (-row["rating"], row["model"]))


def arena(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    samples: int = 1000,
    seed: int = 0,
    prior: float = 1.0,
    level: float = 0.95,
) -> Leaderboard:
    """Add up a class's saved blind rounds into a leaderboard of the models.

    Reads every folder ``cw.save(folder)`` wrote (its ``index.json``), counts each revealed
    blind round's votes, and rates the models by Bradley–Terry with a parametric bootstrap's
    interval (the module's docstring says how, and why). A file that cannot count (not a saved
    compare, malformed votes: an unknown label, a negative count, a model named twice in
    one round, a missing field) is refused whole; a round that was not blind, or never
    revealed, is refused alone. Each refusal is kept in :attr:`Leaderboard.refused` with
    the file and the reason, and said in one warning: the other files still count.

    Args:
        paths: A folder, an ``index.json``, a glob (``"class/*"``, ``"uploads/**"``), or a
            list of them. A folder without its own index is searched for the indexes below.
        samples: Bootstrap draws for the intervals (1000: steady to about a rating point).
        seed: The draws' seed: the same files give the same board.
        prior: Ties per model against a reference rated 1000 (keeps a model that lost, or
            won, every vote finite); more than 0.
        level: The intervals' coverage (0.95: from the 2.5th to the 97.5th percentile).

    Returns:
        The :class:`Leaderboard`: ``board.table``, ``board.refused``; shown as a table.

    Raises:
        ValueError: ``samples``, ``prior`` or ``level`` out of range (nothing is read).

    Example:
        >>> board = nbstream.arena(["alice", "bob/index.json", "uploads/*"])
        >>> [(row["model"], round(row["rating"])) for row in board.table]
        [('SmolLM2-360M-Instruct', 1042), ('SmolLM2-135M-Instruct', 958)]
        >>> board.to_pandas()   # with pandas installed
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be a whole number of draws, 1 or more, got {samples!r}")
    if not (isinstance(prior, (int, float)) and prior > 0):
        raise ValueError(f"prior must be more than 0 (ties per model), got {prior!r}")
    if not (isinstance(level, float) and 0 < level < 1):
        raise ValueError(f"level must be between 0 and 1 (0.95: a 95% interval), got {level!r}")
    votes, counted, refused = _read_class(paths)
    rows = _rate(votes, samples=samples, seed=seed, prior=float(prior), level=level)
    if refused:
        listed = "; ".join(f"{path}: {why}" for path, why in refused[:3])
        more = f" (and {len(refused) - 3} more)" if len(refused) > 3 else ""
        warnings.warn(
            f"nbstream.arena: {len(refused)} refused, see board.refused: {listed}{more}",
            UserWarning,
            stacklevel=2,
        )
    return Leaderboard(
        rows, refused, files=counted, votes=sum(votes.values()), samples=samples, level=level
    )


class Leaderboard:
    """A class arena's ratings (what :func:`arena` returns); shown as a table to project.

    Attributes:
        table: One dict per model, best rated first, with :data:`COLUMNS`: ``model`` (as
            ``cw.reveal()`` named it), ``rating`` (Bradley–Terry on the Elo scale), ``low``
            and ``high`` (the bootstrap interval), ``votes`` (the votes it was in), ``wins``
            (those for it) and ``ties``.
        refused: ``(path, reason)`` for each file, or round, that did not count.
        files: How many files' votes counted.
        votes: How many votes counted.

    Example:
        >>> board = nbstream.arena("class/*")
        >>> board.table[0]
        {'model': 'm2', 'rating': 1042.1, 'low': 1001.3, 'high': 1090.0, 'votes': 30, ...}
        >>> print(board)          # a text table, for a terminal
    """

    def __init__(
        self,
        table: list[dict[str, Any]],
        refused: list[tuple[str, str]],
        *,
        files: int,
        votes: int,
        samples: int,
        level: float,
    ) -> None:
        self.table = table
        self.refused = refused
        self.files = files
        self.votes = votes
        self._samples = samples
        self._level = level

    def to_pandas(self) -> Any:
        """The table as a pandas DataFrame (columns :data:`COLUMNS`, best rated first).

        Raises:
            ImportError: pandas is not installed (``pip install pandas``).

        Example:
            >>> board.to_pandas().set_index("model")["rating"]
        """
        try:
            # Imported by name: pandas is optional, and ships no type information.
            pd = importlib.import_module("pandas")
        except ImportError:
            raise ImportError(
                "board.to_pandas() needs pandas: install it with  pip install pandas  "
                "(board.table is the same rows as a list of dicts)"
            ) from None
        return pd.DataFrame(self.table, columns=list(COLUMNS))

    def _caption(self) -> str:
        percent = f"{self._level * 100:g}%"
        return (
            f"{self.votes} vote{'s' * (self.votes != 1)} from {self.files} "
            f"file{'s' * (self.files != 1)} · Bradley–Terry rating, {percent} interval "
            f"({self._samples} bootstrap draws)"
        )

    def _cells(self) -> list[list[str]]:
        return [
            [
                str(rank),
                row["model"],
                f"{row['rating']:.0f}",
                f"{row['low']:.0f} – {row['high']:.0f}",
                str(row["votes"]),
                str(row["wins"]),
                str(row["ties"]),
            ]
            for rank, row in enumerate(self.table, 1)
        ]

    _HEAD = ("#", "model", "rating", "interval", "votes", "wins", "ties")

    def __str__(self) -> str:
        rows = [list(self._HEAD), *self._cells()]
        widths = [max(len(row[c]) for row in rows) for c in range(len(self._HEAD))]
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows
        ]
        lines.append(self._caption())
        lines.extend(f"refused: {path}: {why}" for path, why in self.refused)
        return "\n".join(line.rstrip() for line in lines)

    def __repr__(self) -> str:
        return f"<Leaderboard {len(self.table)} models, {self.votes} votes>\n{self}"

    def _repr_markdown_(self) -> str:
        def cell(text: str) -> str:
            # A name is text, never markup: escape what Markdown would act on.
            return "".join("\\" + ch if ch in "\\`*_[]<>|#" else ch for ch in text)

        lines = ["| " + " | ".join(self._HEAD) + " |", "|" + "---|" * len(self._HEAD)]
        lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in self._cells()]
        lines += ["", cell(self._caption())]
        lines += [f"- refused: {cell(path)}: {cell(why)}" for path, why in self.refused]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return _board_html(self._HEAD, self._cells(), self.table, self._caption(), self.refused)


def _board_html(
    head: Sequence[str],
    cells: Sequence[Sequence[str]],
    table: Sequence[Mapping[str, Any]],
    caption: str,
    refused: Sequence[tuple[str, str]],
) -> str:
    """The board as an HTML table, large enough to project; every name escaped."""
    if not table:
        rows = f'<tr><td colspan="{len(head) + 1}">No vote counted yet.</td></tr>'
    else:
        lo = min(row["low"] for row in table)
        span = max(max(row["high"] for row in table) - lo, 1e-9)
        rows = "".join(
            "<tr>"
            + "".join(f"<td>{html.escape(c)}</td>" for c in cell[:4])
            + f"<td>{_bar(row, lo, span)}</td>"
            + "".join(f'<td style="text-align:right">{html.escape(c)}</td>' for c in cell[4:])
            + "</tr>"
            for cell, row in zip(cells, table, strict=True)
        )
    th = "".join(f"<th>{html.escape(h)}</th>" for h in (*head[:4], "", *head[4:]))
    notes = "".join(
        f"<li><code>{html.escape(path)}</code>: {html.escape(why)}</li>" for path, why in refused
    )
    refusals = (
        f"<details><summary>{len(refused)} refused</summary><ul>{notes}</ul></details>"
        if refused
        else ""
    )
    return (
        '<div class="nbstream-arena" style="font-size:1.25em">'
        '<table style="border-collapse:collapse">'
        f'<caption style="caption-side:bottom;font-size:0.8em">{html.escape(caption)}</caption>'
        f"<thead><tr>{th}</tr></thead><tbody>{rows}</tbody></table>{refusals}</div>"
    )


def _bar(row: Mapping[str, Any], lo: float, span: float) -> str:
    """A model's interval as a bar and its rating as a mark, on the board's common scale."""
    left = (row["low"] - lo) / span * 100
    width = max((row["high"] - row["low"]) / span * 100, 0.5)
    mark = (row["rating"] - lo) / span * 100
    return (
        '<span aria-hidden="true" style="position:relative;display:inline-block;width:10em;'
        'height:0.8em">'
        f'<span style="position:absolute;left:{left:.1f}%;width:{width:.1f}%;top:0.3em;'
        'height:0.2em;background:currentColor;opacity:0.4"></span>'
        f'<span style="position:absolute;left:{mark:.1f}%;top:0;width:0.2em;height:0.8em;'
        'background:currentColor"></span></span>'
    )
