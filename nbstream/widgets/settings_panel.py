"""The settings panel's kernel side.

Which settings it shows, their traits and defaults, checking a value, and merging the panel's values
with a call's into a run's settings.

The rules themselves live in :mod:`nbstream.settings` (``validate_settings``, one place);
this module maps them onto the widgets' traits (see ``PROTOCOL.md``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import traitlets

from ..settings import DEFAULT_MAX_NEW_TOKENS, samples, settings_schema, validate_settings

__all__ = [
    "PANEL_SETTINGS",
    "TRAIT_OF_SETTING",
    "VIEW_ALTERNATIVES",
    "model_defaults",
    "next_run_samples",
    "over_context",
    "panel_schema",
    "run_settings",
    "setting_error",
    "setting_trait",
    "widget_settings",
]

#: How many candidates a run captures when a view shows probabilities or alternatives and
#: the widget's ``alternatives`` setting asks for none.
VIEW_ALTERNATIVES = 5
#: The settings the panel shows, each a synced trait of the widgets (in the panel's order):
#: trait name -> setting name. ``stop`` is the trait ``stop_sequences``, since ``stop()``
#: stops the run.
PANEL_SETTINGS = {
    "max_new_tokens": "max_new_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "repetition_penalty": "repetition_penalty",
    "do_sample": "do_sample",
    "seed": "seed",
    "stop_sequences": "stop",
    "alternatives": "alternatives",
}
TRAIT_OF_SETTING = {setting: trait for trait, setting in PANEL_SETTINGS.items()}


def panel_schema() -> dict[str, dict[str, Any]]:
    """The panel's settings' types and ranges (``settings_schema()``), keyed by trait."""
    schema = settings_schema()
    return {trait: {**schema[name], "setting": name} for trait, name in PANEL_SETTINGS.items()}


#: The largest integer a JavaScript number holds exactly (2**53 - 1): past it, an integer
#: travels between the kernel and the page as its decimal digits (a seed up to 2**64 - 1).
JS_SAFE_INTEGER = 2**53 - 1
_DIGITS = re.compile(r"[+-]?[0-9]+")


def exact_integer(value: Any) -> Any:
    """``value``, or the integer whose digits it is when past ``JS_SAFE_INTEGER``.

    The page sends such digits for a whole number too large for a JavaScript number; other text
    stays text, for validate_settings to refuse with its usual message.
    """
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        number = int(value)
        if abs(number) > JS_SAFE_INTEGER:
            return number
    return value


def setting_to_json(value: Any, _widget: Any) -> Any:
    """A setting as the page gets it: an integer past ``JS_SAFE_INTEGER`` as its digits.

    JSON would hand the page a rounded number, which a Run would then send back.
    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > JS_SAFE_INTEGER:
        return str(value)
    return value


class _Setting(traitlets.Any):
    """Any value (validate_settings decides); a big integer's digits become the integer."""

    def validate(self, obj: Any, value: Any) -> Any:
        return exact_integer(value)


def setting_trait() -> Any:
    """A synced trait for one panel setting: any value, checked by validate_settings."""
    # Any value is taken in, then checked by validate_settings (the one place that knows
    # what is allowed): a bad value from the page or from code is shown next to its field
    # (settings_errors) and refused when a run starts, never raised inside a comm handler.
    # Whichever way it comes (a state update, a run message, code), a big integer the page
    # wrote as digits is held as the integer.
    return _Setting(None, allow_none=True).tag(sync=True, to_json=setting_to_json)


def model_defaults(model: Any) -> dict[str, Any]:
    """What the panel's settings default to for ``model``, and ``context_length``.

    The defaults come from its ``generation_config``; ``context_length`` is the model's context in
    tokens, when its config says it.

    Cheap: read from the config, nothing run. ``{}`` for a model without one (an endpoint).
    """
    config = getattr(model, "generation_config", None)
    if config is None:
        return {}
    from ..backends.local import config_value

    defaults: dict[str, Any] = {
        "max_new_tokens": getattr(config, "max_new_tokens", None) or DEFAULT_MAX_NEW_TOKENS,
        "do_sample": bool(getattr(config, "do_sample", False)),
    }
    for name in ("temperature", "top_p", "top_k", "repetition_penalty"):
        value = config_value(config, name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            defaults[name] = value
    defaults["alternatives"] = 0
    context = context_length(model)
    if context is not None:
        # Not a setting: the limit the panel's max_new_tokens field refuses to pass.
        defaults["context_length"] = context
    return defaults


def context_length(model: Any) -> int | None:
    """The model's context in tokens, read from its config; None when the config does not say.

    Read as the local backend reads it (``LocalBackend.context_length``).
    """
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_seq_len"):
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def next_run_samples(panel: Mapping[str, Any], defaults: Mapping[str, Any]) -> bool | None:
    """Whether the next run with the panel's values (by trait) samples.

    By the one rule (:func:`nbstream.settings.samples`) and the model's default
    (``settings_defaults``).

    None when it cannot be said: the endpoint decides, or ``temperature`` / ``do_sample``
    is invalid or the two contradict (the run is refused).
    """
    default = defaults.get("do_sample")
    try:
        values = validate_settings(
            {"temperature": panel.get("temperature"), "do_sample": panel.get("do_sample")}
        )
        return samples(values, default if isinstance(default, bool) else None)
    except (TypeError, ValueError):
        return None


def setting_error(trait: str, value: Any) -> str | None:
    """Why ``value`` is not allowed for the panel setting ``trait``, or None."""
    try:
        validate_settings({PANEL_SETTINGS[trait]: value})
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def widget_settings(
    settings: Mapping[str, Any], toggles: tuple[str, ...]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A widget's keywords, checked: (the views' ``toggles``, the panel's by trait, the others).

    The panel's settings live in traits; the others (budget_s, expect, ...) in the widget.
    """
    rest = dict(settings)
    views = {name: rest.pop(name) for name in toggles if name in rest}
    for name, value in views.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r:.80}")
    clean = validate_settings(rest)
    panel = {TRAIT_OF_SETTING[k]: v for k, v in clean.items() if k in TRAIT_OF_SETTING}
    return views, panel, {k: v for k, v in clean.items() if k not in TRAIT_OF_SETTING}


def over_context(value: Any, defaults: Mapping[str, Any] | None) -> str | None:
    """Why ``value`` cannot be a max_new_tokens: more than the model's whole context, or None.

    The page refuses it at the field in the same words (js/src/settings_panel.js limitOf).
    """
    context = (defaults or {}).get("context_length")
    if not isinstance(value, int) or not isinstance(context, int) or value <= context:
        return None
    return (
        f"max_new_tokens={value} is more than the model's whole context ({context} tokens, "
        f"the prompt included); use less than {context}"
    )


def run_settings(
    *,
    fixed: Mapping[str, Any],
    panel: Mapping[str, Any],
    errors: Mapping[str, Any],
    call: Mapping[str, Any],
    views_need_trace: bool,
) -> dict[str, Any]:
    """A run's settings: the widget's ``fixed`` ones, its ``panel`` values, then the ``call``'s.

    ``fixed``: budget_s, expect, ...; ``panel``: by trait. The ``call``'s win.

    Raises ``ValueError`` (nothing started) while a panel setting the call does not
    override is in ``errors`` (its message is shown next to its field). While a teaching
    view needs probabilities, a run given no ``alternatives`` captures ``VIEW_ALTERNATIVES``.
    """
    given = validate_settings(dict(call))
    bad = [msg for name, msg in errors.items() if PANEL_SETTINGS.get(name, name) not in given]
    if bad:
        raise ValueError(
            "fix the settings first (nothing was started): " + "; ".join(map(str, bad))
        )
    values = validate_settings(
        {setting: panel[trait] for trait, setting in PANEL_SETTINGS.items() if setting not in given}
    )
    merged = {**fixed, **values, **given}
    if merged.get("alternatives") is None and views_need_trace:
        # Unset (an explicit 0 means no capture): the views need the model's probabilities.
        merged["alternatives"] = VIEW_ALTERNATIVES
    return merged
