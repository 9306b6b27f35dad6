"""Bad input reported from the public call the user made, not from deep inside nbstream.

A notebook shows every frame of a traceback, so an error from deep inside would bury the one
line that says what to do. The public entry points that check input are wrapped with
:func:`input_checked`: a ``ValueError`` or ``TypeError`` they raise (by the
Backend protocol, ``prepare`` and the settings checks raise only those for bad input, before
anything starts) leaves with its traceback cut to the caller's frame. The full traceback is
logged at debug level, so a real bug that happens to raise one of them is still traceable.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import ParamSpec, TypeVar

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["input_checked"]


def input_checked(func: Callable[P, R]) -> Callable[P, R]:
    """Wrap a public entry point: its input errors point at the caller's line."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except (TypeError, ValueError) as exc:
            logger.debug("%s refused its input", func.__qualname__, exc_info=True)
            # Re-raising the same object keeps its cause (and Python gives it no context of
            # itself); only its traceback is cut, to start here instead of at the check.
            exc.with_traceback(None)
            raise exc

    return wrapper
