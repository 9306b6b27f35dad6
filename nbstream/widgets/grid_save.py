"""A prompt grid kept in a folder: every cell's recording, and an index that ties them.

``g.save(folder)`` writes ``grid.json`` (the index: the template, each row's prompt and
fields, the columns' names and settings, every cell's state and its file) and one recording
per cell that ran (``cells/r{row}c{col}.json``, nbstream's usual recording, which
``nbstream.load`` reads alone too). ``nbstream.load(folder)`` reads it back as a grid.

Example:
    >>> index, recordings = read_index(Path("my-grid"))
    >>> index["columns"][0]["name"]
    'temperature=0.0'
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._version import __version__
from ..generation import Generation
from ..recording import Recording, load

__all__ = ["GRID_FORMAT", "INDEX_NAME", "is_grid_folder", "read_index", "write_grid"]

#: The index's format name and major version.
GRID_FORMAT = "nbstream.grid/1"
#: The index's file name inside a grid's folder.
INDEX_NAME = "grid.json"


def _plain(value: Any) -> Any:
    # A DataFrame's fields may be numpy scalars or timestamps: their value, else their text.
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)


def write_grid(
    folder: str | Path, index: dict[str, Any], runs: Sequence[Sequence[Generation | None]]
) -> Path:
    """Write every ended cell's recording and the index; refuse before writing if one runs.

    Args:
        folder: Where (created if missing; a grid saved there before is overwritten).
        index: The grid's own facts (template, prompts, fields, columns).
        runs: The cells' runs, row by row (``None``: never started, no file).

    Returns:
        The folder.

    Raises:
        RuntimeError: A cell is still queued or running (nothing is written).

    Example:
        >>> write_grid("my-grid", {"prompts": ["Hi"], "columns": []}, [[run]])
    """
    going = [
        f"({i}, {j})"
        for i, row in enumerate(runs)
        for j, run in enumerate(row)
        if run is not None and not run.done
    ]
    if going:
        raise RuntimeError(
            f"cells {', '.join(going)} have not ended: wait() for the grid, or stop() it, "
            "before saving (nothing was written)"
        )
    target = Path(folder)
    (target / "cells").mkdir(parents=True, exist_ok=True)
    files: list[list[str | None]] = []
    for i, row in enumerate(runs):
        files.append([])
        for j, run in enumerate(row):
            if run is None:
                files[-1].append(None)
                continue
            name = f"cells/r{i}c{j}.json"
            run.save(target / name)
            files[-1].append(name)
    document = {
        "format": GRID_FORMAT,
        "nbstream": __version__,
        **index,
        "statuses": [["idle" if r is None else r.status for r in row] for row in runs],
        "files": files,
    }
    text = json.dumps(document, ensure_ascii=False, indent=1, default=_plain)
    (target / INDEX_NAME).write_text(text, encoding="utf-8")
    return target


def is_grid_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a saved grid (its index)."""
    return (folder / INDEX_NAME).is_file()


def _refuse(folder: Path, what: str) -> ValueError:
    return ValueError(
        f"cannot load the grid in {folder}: {what}; save it again with g.save(folder)"
    )


def read_index(folder: Path) -> tuple[dict[str, Any], list[list[Recording | None]]]:
    """The index of a saved grid and each cell's recording (``None``: the cell never ran).

    Args:
        folder: The grid's folder.

    Returns:
        The index (checked) and the recordings, row by row.

    Raises:
        ValueError: The index is missing, damaged, of another format, or names a cell's
            file that is not a recording.

    Example:
        >>> index, recordings = read_index(Path("my-grid"))
    """
    try:
        index = json.loads((folder / INDEX_NAME).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _refuse(folder, f"its {INDEX_NAME} cannot be read ({exc})") from None
    if not isinstance(index, dict) or index.get("format") != GRID_FORMAT:
        raise _refuse(folder, f"its {INDEX_NAME} is not a grid's index ({GRID_FORMAT})")
    prompts, columns, files = index.get("prompts"), index.get("columns"), index.get("files")
    if not (isinstance(prompts, list) and isinstance(columns, list) and isinstance(files, list)):
        raise _refuse(folder, "its index lacks prompts, columns or files")
    if len(files) != len(prompts) or any(
        not isinstance(row, list) or len(row) != len(columns) for row in files
    ):
        raise _refuse(folder, "its files do not match its rows and columns")
    recordings: list[list[Recording | None]] = []
    for row in files:
        recordings.append([])
        for name in row:
            if name is None:
                recordings[-1].append(None)
                continue
            where = Path(str(name))
            if where.is_absolute() or ".." in where.parts:
                raise _refuse(folder, f"a cell's file {str(name)!r:.80} is outside the folder")
            loaded = load(folder / where)
            if not isinstance(loaded, Recording):
                raise _refuse(folder, f"{name} is not one run's recording")
            recordings[-1].append(loaded)
    return index, recordings
