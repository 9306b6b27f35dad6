"""Deprecated module path: import ``CompareWidget`` from ``nbstream`` (or ``nbstream.widgets``)."""

from __future__ import annotations

import warnings

from .widgets.compare import (
    DEFAULT_SETTINGS,
    CompareWidget,
    Runs,
    describe_settings,
    divergence_words,
)

warnings.warn(
    "nbstream.compare is deprecated: use 'from nbstream import CompareWidget'",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [
    "DEFAULT_SETTINGS",
    "CompareWidget",
    "Runs",
    "describe_settings",
    "divergence_words",
]
