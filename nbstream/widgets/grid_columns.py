"""A prompt grid's rows and columns, each checked before any model loads or any cell runs.

Rows are prompts (strings or message lists, or :func:`nbstream.template`'s result);
columns take what a :class:`~nbstream.CompareWidget` takes: ``models=``, ``settings=``, or
both (one column each), checked and loaded by the compare's own functions
(:mod:`.compare_args`, :mod:`.compare_models`).

Example:
    >>> check_prompts(["Hi", [{"role": "user", "content": "Hello"}]])
    ['Hi', [{'role': 'user', 'content': 'Hello'}]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backends import resolve_backend
from ..backends.base import Backend, Job, RunControl
from ..streaming import TokenBuffer
from .compare_args import check_spec, named_settings
from .compare_models import column_model, distinct_names

__all__ = [
    "MAX_GRID_COLUMNS",
    "CellRefused",
    "GridColumn",
    "check_prompts",
    "grid_columns",
    "refused_backend",
]

#: How many columns a grid takes: more would not stay readable side by side.
MAX_GRID_COLUMNS = 8


class CellRefused(ValueError):
    """A cell's prompt was refused as its run started (e.g. too long for the model)."""


@dataclass
class GridColumn:
    """One column of a grid: what runs its cells, its settings, and its name in words."""

    #: The heading: the model's name, the column's own settings, or both.
    name: str
    #: What runs the column's cells (a backend: a local model, a server); ``None`` in a
    #: saved grid, whose cells replay their own recordings.
    backend: Backend | None
    #: The column's own settings, as given (before the shared ones).
    own: dict[str, Any]
    #: Every setting its cells run with (the shared ones under its own).
    settings: dict[str, Any]
    #: The model's tokenizer (``None`` for a server): where the row's answers part.
    tokenizer: Any = None
    #: The model's name in words (``""`` when every column runs one model).
    model: str = ""
    #: Extra per-column facts a saved grid keeps (none for a live one).
    extra: dict[str, Any] = field(default_factory=dict)
    #: ``(model, tokenizer)`` as loaded, for a cell's full view (a StreamWidget on them);
    #: ``(None, None)`` in a saved grid, whose cells' views replay their recordings.
    pair: tuple[Any, Any] = (None, None)


def check_prompts(prompts: Any) -> list[Any]:
    """The grid's rows as a list, or a TypeError / ValueError saying what to pass.

    Args:
        prompts: A list of prompts: each a string or a list of ``{"role", "content"}`` dicts.

    Returns:
        The prompts, in order.

    Example:
        >>> check_prompts(("a", "b"))
        ['a', 'b']
    """
    if isinstance(prompts, (str, bytes, Mapping)) or not isinstance(prompts, Sequence):
        raise TypeError(
            "prompts must be a list of prompts, one per row (strings or message lists), or "
            f"nbstream.template(...)'s result; got {type(prompts).__name__}"
        )
    if not prompts:
        raise ValueError("a grid needs at least one prompt (one row per prompt)")
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, str):
            continue
        if (
            isinstance(prompt, Sequence)
            and prompt
            and all(isinstance(m, Mapping) and isinstance(m.get("content"), str) for m in prompt)
        ):
            continue
        raise TypeError(
            f"prompts[{i}] must be a string or a list of messages such as "
            f'[{{"role": "user", "content": "Hi"}}], got {type(prompt).__name__}'
        )
    return list(prompts)


def _sized(value: Any, what: str, example: str) -> list[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise TypeError(
            f"{what} must be a list, one entry per column, e.g. {example}; got "
            f"{type(value).__name__}"
        )
    if not 1 <= len(value) <= MAX_GRID_COLUMNS:
        raise ValueError(
            f"a grid has 1 to {MAX_GRID_COLUMNS} columns, got {len(value)} {what}; split "
            "them over several grids"
        )
    return list(value)


def _specs_and_settings(
    model: Any, tokenizer: Any, models: Any, settings: Any
) -> tuple[list[Any] | None, list[Any]]:
    """``models=`` (None: one model for every column) and one settings dict per column."""
    example = "settings=[{'temperature': 0}, {'temperature': 0.7}]"
    columns = None if settings is None else _sized(settings, "settings", example)
    if models is None:
        return None, columns if columns is not None else [{}]
    if model is not None or tokenizer is not None:
        raise TypeError(
            "pass the models as models=[...] (one per column), or one model (and its "
            "tokenizer) for every column, not both"
        )
    specs = _sized(models, "models", "models=[None, 'HuggingFaceTB/SmolLM2-360M-Instruct']")
    for spec in specs:
        check_spec(spec)
    if columns is None:
        return specs, [{} for _ in specs]
    if len(columns) != len(specs):
        raise ValueError(
            f"settings has {len(columns)} dicts for {len(specs)} models: give one per "
            "model (an empty dict for its defaults), or none"
        )
    return specs, columns


def _settings_words(own: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={value!r}" for name, value in own.items()) or "defaults"


def grid_columns(
    model: Any, tokenizer: Any, models: Any, settings: Any, common: Mapping[str, Any]
) -> list[GridColumn]:
    """Check a grid's columns, then load each model: every mistake is refused before a load.

    Args:
        model: One model for every column (``None``: the default model), as for
            :class:`~nbstream.CompareWidget`.
        tokenizer: Its tokenizer (only with a loaded model).
        models: One model per column (or ``None``), instead of ``model``.
        settings: One dict of settings per column (or ``None``).
        common: Settings every column shares (under each column's own).

    Returns:
        The columns, left to right.

    Example:
        >>> [c.name for c in grid_columns(*tiny_model(), None, [{}, {"top_k": 5}], {})]
        ['defaults', 'top_k=5']
    """
    specs, columns = _specs_and_settings(model, tokenizer, models, settings)
    for i, own in enumerate(columns):
        if not isinstance(own, Mapping):
            raise TypeError(
                f"settings[{i}] must be a dict of settings such as {{'temperature': 0.7}}, "
                f"got {type(own).__name__}"
            )
    shared = named_settings("keyword settings", common)
    merged = [named_settings(f"settings[{i}]", {**shared, **own}) for i, own in enumerate(columns)]
    own_clean = [named_settings(f"settings[{i}]", own) for i, own in enumerate(columns)]
    if specs is None:
        from ..models import model_and_tokenizer

        pairs = [model_and_tokenizer(model, tokenizer)] * len(columns)
        names = [""] * len(columns)
    else:
        pairs = [column_model(spec) for spec in specs]
        names = distinct_names(pairs)
    made = []
    for (m, t), name, own, clean in zip(pairs, names, own_clean, merged, strict=True):
        backend = resolve_backend(m, t)
        if clean.get("alternatives"):
            backend.check_alternatives(clean["alternatives"])  # before any cell runs
        heading = name if not own else f"{name} · {_settings_words(own)}" if name else ""
        made.append(
            GridColumn(heading or _settings_words(own), backend, own, clean, t, name, pair=(m, t))
        )
    return made


class _RefusedJob(Job):
    def __init__(self, prompt: Any, settings: dict[str, Any], error: CellRefused) -> None:
        super().__init__(prompt, settings)
        self._error = error

    def run(self, buffer: TokenBuffer, control: RunControl) -> str:
        raise self._error


class _Refused(Backend):
    """A cell whose prompt its model refused: its run fails at once, saying why."""

    supports_alternatives = True

    def __init__(self, error: BaseException) -> None:
        self.error = CellRefused(f"{type(error).__name__}: {error}")

    def describe(self) -> dict[str, Any]:
        """Nothing ran: the reason."""
        return {"name": "refused", "class": None, "load_error": str(self.error)}

    def prepare(self, prompt: Any, settings: dict[str, Any], **_branch: Any) -> Job:
        """A job that fails at once with the reason."""
        return _RefusedJob(prompt, settings, self.error)


def refused_backend(error: BaseException) -> Backend:
    """A backend whose one run fails with ``error``: a cell refused, the others still run.

    Args:
        error: Why the cell's run could not start.

    Returns:
        The backend (its run's error is a :class:`CellRefused` carrying the reason).

    Example:
        >>> nbstream.stream(refused_backend(ValueError("too long")), None, "x").status
    """
    return _Refused(error)
