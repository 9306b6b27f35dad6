"""The settings panel's traits on a widget, and their checks as they change.

The panel's settings are synced traits (the page edits them), so they live on the widget
itself; :class:`SettingsWidget` declares them with the traits that describe them to the
page (the model's defaults, each setting's schema, whether the next run samples) and keeps
``settings_errors`` up to date as they change. The rules are :mod:`.settings_panel`'s.

The panel's **Steering** slider (js/src/steer_control.js) shows once the widget has a
direction (``w.steer = direction``, from Python: a Direction cannot come from the page); its
strength (``steer_strength``, None: off) is the one state the page and the kernel share, and
each run the widget starts takes ``steer=(w.steer, w.steer_strength)`` while it is on.
"""

from __future__ import annotations

import math
from typing import Any

import anywidget
import traitlets

from ..backends import resolve_backend
from ..settings import steer_setting
from ..steering import Direction, check_steering
from .settings_panel import (
    PANEL_SETTINGS,
    next_run_samples,
    over_context,
    panel_schema,
    setting_error,
    setting_trait,
)

__all__ = ["SettingsWidget"]

#: The settings whose change may change whether the next run samples.
_SAMPLING = frozenset({"temperature", "do_sample", "settings_defaults"})
#: The slider's reach either way when the strength set from Python is not beyond it.
STEER_LIMIT = 10.0


class SettingsWidget(anywidget.AnyWidget):
    """A widget with the settings panel: its settings as traits, each checked as it changes."""

    # -- generation settings (synced both ways: the settings panel edits them) -------------
    # The next run uses them, merged under the settings given to generate().
    # None means the model's default (settings_defaults).
    max_new_tokens = setting_trait()
    temperature = setting_trait()
    top_p = setting_trait()
    top_k = setting_trait()
    repetition_penalty = setting_trait()
    do_sample = setting_trait()
    seed = setting_trait()
    #: The ``stop`` setting: a list of strings.
    stop_sequences = setting_trait()
    #: ``{name: message}`` for every setting whose value is not allowed (from
    #: validate_settings); while one is there, no run starts.
    settings_errors = traitlets.Dict().tag(sync=True)
    #: The model's defaults of the settings, shown for unset fields (may be incomplete).
    settings_defaults = traitlets.Dict().tag(sync=True)
    #: Kernel to page, never changes: each panel setting's type, range and messages
    #: (panel_schema), from which the page checks a value as it is typed.
    settings_schema = traitlets.Dict(panel_schema(), read_only=True).tag(sync=True)
    #: Kernel to page: whether the next run from the panel samples (True) or is greedy
    #: (False), from the panel's values and the model's default; None when unknown.
    next_run_samples = traitlets.Bool(None, allow_none=True).tag(sync=True)
    #: How many top candidates per token a run captures (``run.trace``); None or 0: none,
    #: unless a view shows probabilities or alternatives (then ``VIEW_ALTERNATIVES``).
    alternatives = setting_trait()

    # -- steering (the Settings panel's slider) ---------------------------------------------
    #: Python only: the direction the slider steers along (an :class:`nbstream.Direction`,
    #: checked against the widget's model when set); None: no slider.
    steer = traitlets.Any(None, allow_none=True)
    #: Both ways: the slider's strength (a finite number), or None: off.
    steer_strength = setting_trait()
    #: Kernel to page: what the slider shows of ``steer`` (``layer``, ``size``, ``norm``,
    #: ``digest``, ``limit``: the slider's reach), or None: no direction, no slider.
    steer_direction = traitlets.Dict(allow_none=True, default_value=None).tag(sync=True)

    @traitlets.validate("steer")
    def _steer_fits_the_model(self, proposal: dict[str, Any]) -> Any:
        direction = proposal["value"]
        if direction is None:
            return None
        if not isinstance(direction, Direction):
            raise TypeError(
                "steer must be an nbstream.Direction (Direction.from_examples or "
                f"Direction.load), or None for no slider; got {type(direction).__name__}"
            )
        # Refused now, in words, rather than at the next run: the host widget's model, as
        # its runs resolve it (RunWidget keeps it as _model, a server's or a recording too).
        model = self.__dict__.get("_model")
        if model is not None:
            backend = resolve_backend(model, self.__dict__.get("_tokenizer"))
            backend.check_steer(steer_setting(direction, 0.0))
            check_steering(backend.model, direction, 0.0)
        return direction

    @traitlets.observe("steer", "steer_strength")
    def _steer_changed(self, change: dict[str, Any]) -> None:
        direction, strength = self.steer, self.steer_strength
        with self.hold_sync():
            if direction is None:
                self.steer_direction = None  # type: ignore[assignment]
                if strength is not None:
                    self.steer_strength = None  # no direction: nothing to be strong along
            else:
                reach = abs(strength) if _finite(strength) else 0.0
                self.steer_direction = {
                    "layer": int(direction.layer),
                    "size": int(direction.size),
                    "norm": float(direction.vector.norm()),
                    "digest": direction.digest,
                    "limit": max(STEER_LIMIT, math.ceil(reach)),
                }
            self._check_setting("steer_strength")

    def _steer_settings(self) -> dict[str, Any]:
        """``{"steer": (direction, strength)}`` while the slider is on, else ``{}``."""
        if self.steer is None or self.steer_strength is None:
            return {}
        return {"steer": (self.steer, self.steer_strength)}

    @traitlets.observe(*PANEL_SETTINGS, "settings_defaults")
    def _settings_changed(self, change: dict[str, Any]) -> None:
        name = change["name"]
        # New defaults: the context max_new_tokens must fit in is known now.
        self._check_setting("max_new_tokens" if name == "settings_defaults" else name)
        if name in _SAMPLING:
            panel = {"temperature": self.temperature, "do_sample": self.do_sample}
            self.next_run_samples = next_run_samples(panel, self.settings_defaults)

    def _setting_error(self, name: str, value: Any) -> str | None:
        """Why ``value`` is not allowed for the setting trait ``name``, or None."""
        if name == "steer_strength":
            if value is None or _finite(value):
                return None
            return f"the steering strength must be a finite number, or off; got {value!r:.40}"
        return setting_error(name, value)

    def _check_setting(self, name: str) -> None:
        """Put the setting's problem, if any, in ``settings_errors`` (shown next to its field)."""
        errors = dict(self.settings_errors)
        message = self._setting_error(name, getattr(self, name))
        if message is None and name == "max_new_tokens":
            message = over_context(getattr(self, name), self.settings_defaults)
        if message is None:
            errors.pop(name, None)
        else:
            errors[name] = message
        if errors != self.settings_errors:
            self.settings_errors = errors

    def _take_panel_values(self, values: Any) -> None:
        """The panel's values a Run / Send carries, where they differ from the traits'.

        ipywidgets holds back state updates until the kernel has answered the previous one,
        but not custom messages, so an edit made just before the click may not have arrived.
        """
        if not isinstance(values, dict):
            return
        with self.hold_sync():
            for name, value in values.items():
                known = name in PANEL_SETTINGS or (
                    name == "steer_strength" and self.steer is not None
                )
                if known and getattr(self, name) != value:
                    setattr(self, name, value)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
