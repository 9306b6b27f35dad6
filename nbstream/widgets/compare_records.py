"""What a CompareWidget's runs leave: the list a Run all returns, saved files, its text copy.

:class:`Runs` is what ``cw.generate()`` returns; :func:`save_runs` writes each column's
last run as a recording, and the folder's index (:func:`compare_index`: the prompt, the
models and every round's votes, read back by ``nbstream.arena``); :func:`fallback` is
the comparison as text, for everything that cannot run widgets (nbconvert, GitHub). While a
blind round is hidden, none of them names a model, a figure or a replay.

Example:
    >>> paths = save_runs([run_a, run_b], "lesson")
    >>> [p.name for p in paths]
    ['column-1.json', 'column-2.json']
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from .._version import __version__
from ..arena import INDEX_FORMAT, INDEX_NAME
from ..generation import Generation
from .blind import shown_metrics
from .compare_column import CompareColumn
from .display import compare_fallback_bundle, show

__all__ = ["Runs", "compare_index", "fallback", "save_runs"]


class Runs(list[Generation]):
    """The runs one :meth:`CompareWidget.generate` started, one per column (a plain list).

    As a cell's last value it shows each run as a run is shown
    (``nbstream.widgets.display.show_run``): nothing where the CompareWidget is on the page,
    which follows them; never a snapshot of their states that would go stale. Its repr
    names no figure and no replay while the round is hidden.

    Example:
        >>> runs = cw.generate("Name two colors.")
        >>> [run.status for run in runs]  # doctest: +SKIP
        ['running', 'queued']
    """

    def __init__(self, runs: list[Generation], hidden: Callable[[], bool] = lambda: False) -> None:
        super().__init__(runs)
        self._hidden = hidden

    def __repr__(self) -> str:
        if not self._hidden():
            return super().__repr__()
        return repr([_HiddenRun(run) for run in self])

    def _ipython_display_(self) -> None:
        for run in self:
            show(run)


class _HiddenRun(NamedTuple):
    run: Generation

    def __repr__(self) -> str:
        text = self.run.partial_text
        preview = text[:40] + ("…" if len(text) > 40 else "")
        return f"<Generation {self.run.status} text={preview!r}>"


def compare_index(
    prompt: str, models: Sequence[str], rounds: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """A saved folder's ``index.json``: the prompt, the models, the recordings, every round.

    Args:
        prompt: The shared prompt.
        models: Each model in words, in the order given to ``models=`` (``column-1.json``
            is the first's).
        rounds: Every round of the widget, as ``BlindRound.saved`` gives each: its votes
            and, when the round showed it, who was which.

    Returns:
        The index (format :data:`nbstream.arena.INDEX_FORMAT`).

    Example:
        >>> compare_index("Hi", ["m1", "m2"], [])["files"]
        ['column-1.json', 'column-2.json']
    """
    return {
        "format": INDEX_FORMAT,
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": {"nbstream": __version__},
        "prompt": prompt,
        "models": list(models),
        "files": [f"column-{i + 1}.json" for i in range(len(models))],
        "rounds": [dict(entry) for entry in rounds],
    }


def save_runs(
    runs: Sequence[Generation | None],
    path: str | os.PathLike[str],
    *,
    index: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Save each run as a recording in folder ``path``: ``column-1.json``, ... in this order.

    Args:
        runs: One run per column, in the order given to ``models=``.
        path: The folder (created if missing).
        index: The folder's index (:func:`compare_index`), written as ``index.json`` after
            the recordings; ``None`` writes none.

    Returns:
        The recordings written, in that order.

    Raises:
        RuntimeError: A column has no run, or one still running.
    """
    missing = [i + 1 for i, run in enumerate(runs) if run is None or not run.done]
    if missing:
        raise RuntimeError(
            f"column {missing[0]} has no ended run to save: run every column, and wait() "
            "for them, before saving"
        )
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [
        run.save(folder / f"column-{i + 1}.json") for i, run in enumerate(runs) if run is not None
    ]
    if index is not None:
        # Last: an index names recordings that are all there.
        text = json.dumps(index, indent=1, ensure_ascii=False)
        (folder / INDEX_NAME).write_text(text + "\n", encoding="utf-8")
    return paths


def fallback(
    prompt: str, columns: Sequence[CompareColumn], hidden: Callable[[], bool], votes: str
) -> dict[str, str]:
    """The text/plain and text/markdown fallbacks: each column's label, state and text.

    Args:
        prompt: The shared prompt.
        columns: The columns, left to right.
        hidden: Whether the round hides what the columns run (their figures are left out).
        votes: The round's votes and what was revealed, in one line ("" for none).

    Returns:
        Each MIME type's text.
    """
    entries: list[tuple[str, str, str, Mapping[str, Any] | None, dict[str, str] | None]] = []
    for column in columns:
        run = column.run
        if run is None:
            entries.append((column.label, "idle", "", {}, None))
            continue
        # Read once, state first: the text of an ended run is final.
        status = run.status
        error = column.error_words(run)
        metrics = shown_metrics(run.metrics) if hidden() else run.metrics
        entries.append((column.label, status, run.partial_text, metrics, error))
    bundle = compare_fallback_bundle(prompt, entries)
    if votes:
        bundle = {kind: f"{text}\n\n{votes}" for kind, text in bundle.items()}
    return bundle
