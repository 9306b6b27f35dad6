"""Backends: what produces a run's tokens. The lifecycle in ``generation.py`` is shared."""

from __future__ import annotations

import os
from typing import Any

from .base import Backend, Job, RunControl
from .local import LocalBackend

__all__ = ["Backend", "Job", "LocalBackend", "RunControl", "resolve_backend"]


def resolve_backend(model: Any, tokenizer: Any) -> Backend:
    """Pick the backend for what the caller passed as ``model``."""
    if hasattr(model, "prepare") and hasattr(model, "queue_key"):
        backend: Backend = model  # already a backend (e.g. a remote endpoint)
        return backend
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
    return LocalBackend(model, tokenizer)
