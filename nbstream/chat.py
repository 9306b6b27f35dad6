"""Deprecated module path: import ``ChatWidget`` from ``nbstream`` (or ``nbstream.widgets``)."""

from __future__ import annotations

import warnings

from .widgets.chat import ChatWidget

warnings.warn(
    "nbstream.chat is deprecated: use 'from nbstream import ChatWidget'",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["ChatWidget"]
