"""One prompt template filled from many rows: the rows of a prompt grid.

``template("Translate to French: {text}", rows)`` checks every row against the template's
fields before anything runs, and returns the prompts as a list that keeps each row's fields
(:class:`Prompts`), so that a grid's table can show them beside the answers.

Example:
    >>> prompts = template("Translate to French: {text}", [{"text": "cat"}, {"text": "dog"}])
    >>> list(prompts), prompts.fields
    (['Translate to French: cat', 'Translate to French: dog'], [{'text': 'cat'}, {'text': 'dog'}])
"""

from __future__ import annotations

import math
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["MissingField", "Prompts", "template", "template_fields"]


class MissingField(KeyError):
    """A row lacks a field its template uses (a ``KeyError`` whose message reads plainly)."""

    def __str__(self) -> str:
        # KeyError's own str() is the repr of its key: a sentence would show in quotes.
        return str(self.args[0]) if self.args else ""


class Prompts(list[Any]):
    """The prompts a template made, one per row, with each row's fields kept.

    A list of prompts (strings, or message lists for a message-list template) like any
    other; ``fields`` holds each row's values (every field of the row, used or not) and
    ``template`` the template they filled.

    Example:
        >>> prompts = template("Say {word}.", [{"word": "hi", "id": 7}])
        >>> prompts[0], prompts.fields[0]["id"], prompts.template
        ('Say hi.', 7, 'Say {word}.')
    """

    def __init__(
        self, prompts: Iterable[Any], fields: Sequence[Mapping[str, Any]], template: Any
    ) -> None:
        super().__init__(prompts)
        #: Each row's fields, in row order.
        self.fields: list[dict[str, Any]] = [dict(row) for row in fields]
        #: The template the rows filled (a string, or a list of messages).
        self.template = template


def template_fields(text: str) -> list[str]:
    """The names of a template's fields, in order of first use.

    Args:
        text: A ``str.format`` template with named fields (``"{text}"``, ``"{n:.2f}"``).

    Returns:
        The top-level field names (``"{user.name}"`` is ``user``).

    Raises:
        ValueError: A positional field (``{}`` or ``{0}``), or a malformed template.

    Example:
        >>> template_fields("From {lang} to French: {text} ({lang})")
        ['lang', 'text']
    """
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"the template {text!r:.80} is not a valid format string: {exc}") from None
    for _literal, field, _spec, _conversion in parsed:
        if field is None:
            continue
        name = field.split(".", 1)[0].split("[", 1)[0]
        if not name or name.isdigit():
            raise ValueError(
                f"the template's fields must be named, e.g. {{text}}; {{{field}}} in "
                f"{text!r:.80} is positional (write a literal brace as {{{{ or }}}})"
            )
        if name not in names:
            names.append(name)
    return names


def _texts(pattern: Any) -> list[str]:
    """The format strings of a template: itself, or each message's content."""
    if isinstance(pattern, str):
        return [pattern]
    example = 'e.g. [{"role": "user", "content": "Translate to French: {text}"}]'
    if not isinstance(pattern, Sequence) or not pattern:
        raise TypeError(
            f"a template is a string or a list of messages ({example}), got "
            f"{type(pattern).__name__}"
        )
    texts = []
    for i, message in enumerate(pattern):
        if not isinstance(message, Mapping) or not isinstance(message.get("content"), str):
            raise TypeError(
                f"template message {i} must be a dict with a string 'content', {example}"
            )
        texts.append(message["content"])
    return texts


def _as_rows(rows: Any) -> list[Mapping[str, Any]]:
    """A list of dicts, or a DataFrame's rows as dicts (read through its own ``to_dict``)."""
    to_dict = getattr(rows, "to_dict", None)
    if callable(to_dict) and hasattr(rows, "columns"):  # a pandas DataFrame, not imported here
        rows = to_dict("records")
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Iterable):
        raise TypeError(
            "rows must be a list of dicts (one per prompt) or a pandas DataFrame, got "
            f"{type(rows).__name__}"
        )
    listed = list(rows)
    for i, row in enumerate(listed):
        if not isinstance(row, Mapping):
            raise TypeError(f"row {i} must be a dict of fields, got {type(row).__name__}")
    return listed


def _missing(value: Any) -> bool:
    # A DataFrame's empty cell is NaN (or None): "Translate: nan" is never what was meant.
    return value is None or (isinstance(value, float) and math.isnan(value))


def _fill(pattern: Any, row: Mapping[str, Any]) -> Any:
    if isinstance(pattern, str):
        return pattern.format_map(row)
    return [{**message, "content": message["content"].format_map(row)} for message in pattern]


def template(pattern: Any, rows: Any) -> Prompts:
    """Fill a template once per row: the prompts of a grid's rows, each row's fields kept.

    Every row is checked before any prompt is made: a row missing a field (or holding
    ``None`` or NaN there) is refused with its number and the field's name.

    Args:
        pattern: A ``str.format`` string with named fields (``"Translate to French:
            {text}"``), or a list of chat messages whose ``content`` has them.
        rows: A list of dicts, or a pandas DataFrame (its columns are the fields).

    Returns:
        The prompts, a :class:`Prompts` (a list) whose ``fields`` are each row's values.

    Raises:
        MissingField: A row lacks a field the template uses (a ``KeyError``).
        TypeError: ``pattern`` or ``rows`` is of the wrong kind.
        ValueError: The template has a positional field or is malformed.

    Example:
        >>> import nbstream
        >>> prompts = nbstream.template("Translate to French: {text}", [{"text": "a cat"}])
        >>> prompts[0]
        'Translate to French: a cat'
    """
    names = [name for text in _texts(pattern) for name in template_fields(text)]
    listed = _as_rows(rows)
    for i, row in enumerate(listed):
        for name in names:
            if name not in row or _missing(row[name]):
                have = ", ".join(repr(key) for key in row) or "none"
                raise MissingField(
                    f"row {i} has no value for the field {name!r} the template uses "
                    f"(its fields: {have}); give every row a {name!r}"
                )
    prompts = []
    for i, row in enumerate(listed):
        try:
            prompts.append(_fill(pattern, row))
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"row {i} does not fit the template: {exc!r}") from None
    return Prompts(prompts, listed, pattern)
