"""Deprecated module path: import ``StreamWidget`` from ``nbstream`` (or ``nbstream.widgets``)."""

from __future__ import annotations

import warnings

from .widgets.stream import StreamWidget

warnings.warn(
    "nbstream.widget is deprecated: use 'from nbstream import StreamWidget'",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["StreamWidget"]
