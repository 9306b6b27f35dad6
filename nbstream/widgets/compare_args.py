"""A CompareWidget's arguments, each checked before any widget, thread or model exists.

The columns' settings (two to four dicts), the settings every column shares, the view
toggles, the shared seed and ``models=``: a mistake is refused here with words that say what
to pass instead.

Example:
    >>> check_column_settings([{"temperature": 0}, {"temperature": 0.7}])
    [{'temperature': 0.0}, {'temperature': 0.7}]
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..backends.base import Backend
from ..recording import Recording
from ..settings import samples, validate_settings
from .base import VIEW_TOGGLES

__all__ = [
    "DEFAULT_SETTINGS",
    "MAX_COLUMNS",
    "MIN_COLUMNS",
    "check_arguments",
    "check_column_settings",
    "check_models",
    "check_spec",
    "named_settings",
]

#: How many settings (columns) a CompareWidget compares.
MIN_COLUMNS, MAX_COLUMNS = 2, 4
#: The settings compared when none are given: greedy, a moderate and a high temperature.
DEFAULT_SETTINGS: tuple[dict[str, Any], ...] = (
    {"temperature": 0},
    {"temperature": 0.7},
    {"temperature": 1.3},
)


def check_column_settings(settings: Any) -> list[dict[str, Any]]:
    """The columns' settings as plain dicts, or a TypeError / ValueError saying what to do."""
    example = "settings=[{'temperature': 0}, {'temperature': 0.7}]"
    if isinstance(settings, (str, bytes, Mapping)) or not isinstance(settings, Sequence):
        raise TypeError(
            f"settings must be a list of {MIN_COLUMNS} to {MAX_COLUMNS} dicts, one per column, "
            f"e.g. {example}; got {type(settings).__name__}"
        )
    if not MIN_COLUMNS <= len(settings) <= MAX_COLUMNS:
        hint = (
            "for one setting use nbstream.StreamWidget"
            if len(settings) < MIN_COLUMNS
            else "split them over several CompareWidgets"
        )
        raise ValueError(
            f"CompareWidget compares {MIN_COLUMNS} to {MAX_COLUMNS} settings, got "
            f"{len(settings)}; {hint}"
        )
    columns = []
    for i, column in enumerate(settings):
        if not isinstance(column, Mapping):
            raise TypeError(
                f"settings[{i}] must be a dict of settings such as {{'temperature': 0.7}}, "
                f"got {type(column).__name__}"
            )
        columns.append(named_settings(f"settings[{i}]", dict(column)))
    return columns


def named_settings(where: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """validate_settings, its message prefixed with which settings it is about."""
    try:
        clean = validate_settings(settings)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{where}: {exc}") from None
    try:
        samples(clean)  # contradicting settings, refused before any column runs
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return clean


def check_spec(spec: Any) -> None:
    """Refuse an entry of ``models=`` that is no model, before anything loads."""
    if isinstance(spec, tuple):
        if len(spec) != 2:
            raise TypeError(
                f"a (model, tokenizer) pair has two items, got {len(spec)}; e.g. "
                "models=[nbstream.load_model(), 'HuggingFaceTB/SmolLM2-360M-Instruct']"
            )
        return
    if spec is None or isinstance(spec, (str, os.PathLike, Backend, Recording)):
        return
    raise TypeError(
        f"models entries are a hub id or folder, None (the default model), a (model, "
        f"tokenizer) pair, an nbstream.Endpoint or a loaded recording; got "
        f"{type(spec).__name__} (a loaded model goes with its tokenizer: (model, tokenizer))"
    )


def check_models(
    model: Any, tokenizer: Any, models: Any, settings: Any, blind: Any
) -> tuple[list[Any] | None, Any]:
    """``models=`` as a list (None: one model for every column), and the settings.

    The settings are one empty dict per model when not given.
    """
    if not isinstance(blind, bool):
        raise TypeError(f"blind must be True or False, got {blind!r:.80}")
    if models is None:
        return None, settings
    if model is not None or tokenizer is not None:
        raise TypeError(
            "pass the models as models=[...] (one per column), or one model (and its "
            "tokenizer) for every column, not both"
        )
    if isinstance(models, (str, bytes, Mapping)) or not isinstance(models, Sequence):
        raise TypeError(
            f"models must be a list of {MIN_COLUMNS} to {MAX_COLUMNS} models, one per column, "
            f"e.g. models=[None, 'HuggingFaceTB/SmolLM2-360M-Instruct']; got "
            f"{type(models).__name__}"
        )
    if not MIN_COLUMNS <= len(models) <= MAX_COLUMNS:
        raise ValueError(
            f"CompareWidget compares {MIN_COLUMNS} to {MAX_COLUMNS} models, got {len(models)}"
        )
    for spec in models:
        check_spec(spec)
    if settings is DEFAULT_SETTINGS:
        return list(models), [{} for _ in models]
    sized = isinstance(settings, Sequence) and not isinstance(settings, (str, bytes))
    if sized and len(settings) != len(models):
        raise ValueError(
            f"settings has {len(settings)} dicts for {len(models)} models: give one per "
            "model (an empty dict for its defaults), or none"
        )
    return list(models), settings


def check_arguments(
    prompt: Any,
    settings: Sequence[Mapping[str, Any]],
    same_seed: bool | None,
    seed: int | None,
    common: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, bool], bool]:
    """Check a CompareWidget's arguments.

    Returns (columns' own settings, merged settings, view toggles, same_seed). Pops the view toggles
    out of ``common``.
    """
    if not isinstance(prompt, str):
        raise TypeError(
            f"prompt must be a string (one prompt for every column), got {type(prompt).__name__}"
        )
    columns = check_column_settings(settings)
    # The teaching views' toggles (show_tokens=True, ...) are not settings: every column
    # gets them.
    views = {name: common.pop(name) for name in VIEW_TOGGLES if name in common}
    for name, value in views.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r:.80}")
    shared = named_settings("keyword settings", common)
    merged = [named_settings(f"settings[{i}]", {**shared, **own}) for i, own in enumerate(columns)]
    if seed is not None:
        validate_settings({"seed": seed})
    if same_seed is None:
        same_seed = seed is not None
    if not isinstance(same_seed, bool):
        raise TypeError(f"same_seed must be True or False, got {same_seed!r}")
    if seed is not None and not same_seed:
        raise ValueError(
            f"seed={seed} is the seed shared by same_seed=True; pass same_seed=True too, "
            "or give a column its own seed in its settings dict"
        )
    return columns, merged, views, same_seed
