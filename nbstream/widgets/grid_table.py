"""A prompt grid as a table: one row per cell, with its prompt, fields, figures and record.

Example:
    >>> cell_row(0, "Hi", {}, "defaults", None, None, 0)["status"]
    'idle'
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from ..generation import Generation
from .divergence import TextDivergence, text_divergence_words

__all__ = [
    "PREVIEW_CHARS",
    "TABLE_KEYS",
    "cell_row",
    "check_pandas",
    "html_table",
    "markdown_table",
]

#: How much of each answer the notebook's table shows: its start, so that 10 x 4 stays
#: readable (the whole text is ``g.cell(row, col).partial_text``).
PREVIEW_CHARS = 160

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


def _prompt_words(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    # A message list: its last user message says what the row asks.
    users = [m.get("content", "") for m in prompt if m.get("role") == "user"]
    return str(users[-1] if users else prompt[-1].get("content", ""))


def _cell_html(run: Generation | None) -> str:
    if run is None:
        return '<td data-status="idle"><b>idle</b></td>'
    status, text = run.status, run.partial_text
    cut = text[:PREVIEW_CHARS] + ("\u2026" if len(text) > PREVIEW_CHARS else "")
    tokens = run.metrics.get("tokens")
    figures = f" \u00b7 {tokens} tokens" if tokens is not None else ""
    return (
        f'<td data-status="{status}"><b>{status}</b>{figures}<br>'
        f'<span style="white-space: pre-wrap">{html.escape(cut)}</span></td>'
    )


def html_table(
    prompts: Sequence[Any], columns: Sequence[str], runs: Sequence[Sequence[Generation | None]]
) -> str:
    """The grid as it is now, as an HTML table: a prompt per row, each cell's state and start.

    Args:
        prompts: The rows' prompts.
        columns: The columns' headings.
        runs: The cells' runs, row by row.

    Returns:
        The table's HTML (every text escaped).

    Example:
        >>> html_table(["Hi"], ["defaults"], [[None]]).startswith("<table")
        True
    """
    head = "".join(f'<th scope="col">{html.escape(name)}</th>' for name in columns)
    body = []
    for prompt, row in zip(prompts, runs, strict=True):
        words = _prompt_words(prompt)
        cells = "".join(_cell_html(run) for run in row)
        body.append(f'<tr><th scope="row">{html.escape(words[:PREVIEW_CHARS])}</th>{cells}</tr>')
    return (
        '<table class="nbstream-grid"><thead><tr><th scope="col">prompt</th>'
        f"{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def _markdown_cell(text: str) -> str:
    # Inside a pipe table: HTML escaped (a model's text is never markup here), one line.
    return html.escape(text).replace("|", "\\|").replace("\n", "<br>")


def markdown_table(
    prompts: Sequence[Any], columns: Sequence[str], runs: Sequence[Sequence[Generation | None]]
) -> str:
    """The grid as it is now, as a Markdown table: what a saved notebook shows without widgets.

    Args:
        prompts: The rows' prompts.
        columns: The columns' headings.
        runs: The cells' runs, row by row.

    Returns:
        A pipe table: a prompt per row, each cell's state, token count and start.

    Example:
        >>> markdown_table(["Hi"], ["defaults"], [[None]]).splitlines()[2]
        '| Hi | **idle** |'
    """
    lines = [
        "| prompt | " + " | ".join(_markdown_cell(name) for name in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for prompt, row in zip(prompts, runs, strict=True):
        cells = [_markdown_cell(_prompt_words(prompt)[:PREVIEW_CHARS])]
        for run in row:
            if run is None:
                cells.append("**idle**")
                continue
            status, text = run.status, run.partial_text
            cut = text[:PREVIEW_CHARS] + ("\u2026" if len(text) > PREVIEW_CHARS else "")
            tokens = run.metrics.get("tokens")
            figures = f" \u00b7 {tokens} tokens" if tokens is not None else ""
            cells.append(f"**{status}**{figures}<br>{_markdown_cell(cut)}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
