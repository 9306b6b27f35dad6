"""A prompt grid as a table: one row per cell, with its prompt, fields, figures and record.

Example:
    >>> cell_row(0, "Hi", {}, "defaults", None, None, 0)["status"]
    'idle'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..generation import Generation
from .divergence import TextDivergence, text_divergence_words

__all__ = ["TABLE_KEYS", "cell_row", "check_pandas"]

#: The table's own columns; a template field of one of these names is ``field_<name>``.
TABLE_KEYS = (
    "row",
    "prompt",
    "column",
    "status",
    "result",
    "text",
    "tokens",
    "elapsed_s",
    "finish_reason",
    "differs_at",
    "divergence",
    "record",
)


def check_pandas() -> Any:
    """The pandas module, or an ImportError that says how to install it.

    Example:
        >>> check_pandas().__name__
        'pandas'
    """
    try:
        # Optional, and untyped here: the grid works without it.
        import pandas  # type: ignore[import-untyped,unused-ignore]
    except ImportError as exc:
        raise ImportError(
            "Grid.to_pandas() needs pandas, which is not installed: install it with "
            "pip install pandas (Grid.table() gives the same rows as dicts without it)"
        ) from exc
    return pandas


def cell_row(
    row: int,
    prompt: Any,
    fields: Mapping[str, Any],
    column: str,
    run: Generation | None,
    found: TextDivergence | None,
    col: int,
) -> dict[str, Any]:
    """One cell as a table row (see ``Grid.table``).

    Args:
        row: The cell's row.
        prompt: The row's prompt.
        fields: The row's template fields (empty without a template).
        column: The column's heading.
        run: The cell's run (``None`` before it started).
        found: Where the row's answers part, if they do.
        col: The cell's column (its place in ``found``).

    Returns:
        The row, keyed as ``Grid.table`` says.

    Example:
        >>> cell_row(0, "Hi", {"text": "Hi"}, "defaults", None, None, 0)["field_text"]
        'Hi'
    """
    metrics: Mapping[str, Any] = run.metrics if run is not None else {}
    entry: dict[str, Any] = {"row": row, "prompt": prompt}
    for name, value in fields.items():
        entry[f"field_{name}" if name in TABLE_KEYS else name] = value
    entry.update(
        column=column,
        status="idle" if run is None else run.status,
        result=None if run is None else run.result,
        text="" if run is None else run.partial_text,
        tokens=metrics.get("tokens"),
        elapsed_s=metrics.get("elapsed_s"),
        finish_reason=metrics.get("finish_reason"),
        differs_at=None if found is None else found.char,
        divergence=None if found is None else text_divergence_words(found)[col],
        record=None if run is None else run.record,
    )
    return entry
