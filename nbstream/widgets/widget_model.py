"""The model a widget runs on, and what its views can show of it.

A widget is given a loaded model, a hub id, an :class:`~nbstream.Endpoint`, a recording
or nothing (the default model); :func:`widget_model` resolves it once, as the widget is
built, into the model and tokenizer its runs use and the traits that say what its views
may offer (tokens, the sampling panel, the lens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .settings_panel import model_defaults

__all__ = ["WidgetModel", "widget_model"]


@dataclass(frozen=True)
class WidgetModel:
    """A widget's model, resolved."""

    model: Any
    tokenizer: Any
    #: The recording a widget replays (no model: its tokens decode to the recorded texts).
    replaying: Any
    #: A server's (an Endpoint's) run has tokens to show only when it asked for logprobs.
    is_server: bool
    #: The synced traits that follow from the model (``settings_defaults``, ``can_*``).
    traits: dict[str, Any]


def widget_model(model: Any, tokenizer: Any, alternatives: Any) -> WidgetModel:
    """Resolve what a widget was given; ``alternatives``: the widget's own setting."""
    # Imported here: `import nbstream` leaves the backends' heavy imports for first use.
    from ..backends import resolve_backend
    from ..backends.replay import ReplayBackend
    from ..models import model_and_tokenizer

    model, tokenizer = model_and_tokenizer(model, tokenizer)
    backend = resolve_backend(model, tokenizer)
    replay = backend if isinstance(backend, ReplayBackend) else None
    if replay is not None and tokenizer is None:
        tokenizer = replay.tokenizer
    # A server (nbstream.Endpoint) has tokens to show only for a run that asked for its
    # logprobs (alternatives=k): can_trace then follows the shown run.
    can_trace = backend.supports_alternatives and (not backend.is_server or bool(alternatives))
    return WidgetModel(
        model=model,
        tokenizer=tokenizer,
        replaying=replay.recording if replay is not None else None,
        is_server=backend.is_server,
        traits={
            "settings_defaults": model_defaults(model),
            "can_trace": can_trace,
            "can_explain": backend.supports_step_logits,
            "can_lens": backend.supports_lens,
        },
    )
