"""Backends: what produces a run's tokens. The lifecycle in ``generation.py`` is shared."""

from __future__ import annotations

import os
from typing import Any

from ..recording import ChatRecording, Recording
from .base import Backend, Job, RunControl, TraceSource
from .local import LocalBackend
from .replay import ReplayBackend

__all__ = ["Backend", "Job", "LocalBackend", "RunControl", "TraceSource", "resolve_backend"]


def resolve_backend(model: Any, tokenizer: Any) -> Backend:
    """Pick the backend for what the caller passed as ``model``.

    Args:
        model: A :class:`Backend` (e.g. an :class:`~nbstream.Endpoint`), used as it is; a
            loaded :class:`~nbstream.recording.Recording` (or a chat's), replayed at its
            recorded pace (:class:`~nbstream.backends.replay.ReplayBackend`); or a loaded
            transformers model, run in this process.
        tokenizer: The model's tokenizer (a backend ignores it).

    Returns:
        The backend that runs the prompts.

    Raises:
        TypeError: No model, a model's name instead of a loaded model, or something that
            is neither a backend nor a transformers model.

    Example::

        >>> backend = resolve_backend(model, tokenizer)
        >>> backend.supports_branching
        True
    """
    if isinstance(model, Backend):
        return model  # already a backend (e.g. a remote endpoint)
    if isinstance(model, (Recording, ChatRecording)):
        return ReplayBackend(model)  # a widget given nbstream.load(path): its recorded pace
    if model is None:
        raise TypeError(
            "no model given: pass a loaded transformers model and its tokenizer, "
            "or use nbstream.load_model() for the embedded default model"
        )
    if isinstance(model, (str, os.PathLike)):
        raise TypeError(
            f"model is a name ({os.fspath(model)!r}), not a loaded model: load it first with "
            f"model, tokenizer = nbstream.load_model({os.fspath(model)!r}), or pass the name to "
            f"a widget, which loads it"
        )
    kind = type(model)
    if hasattr(kind, "prepare") and not hasattr(kind, "generate"):
        # A class shaped like a backend but not declared as one: its capabilities would be
        # guessed, so it is refused, saying what to do.
        raise TypeError(
            f"{type(model).__name__} has prepare() but does not subclass "
            "nbstream.backends.Backend: subclass it (Backend declares each capability with "
            "its default) and its jobs nbstream.backends.Job"
        )
    return LocalBackend(model, tokenizer)
