"""The settings panel's traits on a widget, and their checks as they change.

The panel's settings are synced traits (the page edits them), so they live on the widget
itself; :class:`SettingsWidget` declares them with the traits that describe them to the
page (the model's defaults, each setting's schema, whether the next run samples) and keeps
``settings_errors`` up to date as they change. The rules are :mod:`.settings_panel`'s.
"""

from __future__ import annotations

from typing import Any

import anywidget
import traitlets

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
                if name in PANEL_SETTINGS and getattr(self, name) != value:
                    setattr(self, name, value)
