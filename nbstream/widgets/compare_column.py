"""A CompareWidget's column: a StreamWidget that takes the compare's seed, model and heading.

The compare hands each column its part through :meth:`CompareColumn.join`: the shared seed
of a Run all, its heading (a letter, a model's name, its settings in words), what a hidden
blind round shows of every column's capabilities, and its ``record["compare"]``. While a
blind round is hidden, every path from a column to a user (its synced state, its messages,
its record, error, repr and text copies) passes through :mod:`nbstream.widgets.blind`.

Example:
    >>> describe_settings({"temperature": 0.7}, seed=42)
    'temperature 0.7 · seed 42'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast, overload

import anywidget
import traitlets

from ..generation import QUEUED, RUNNING, Generation
from ..protocol import CompareRecord, LensReply, RunRecord, RunWidgetMessage
from ..settings import samples
from .base import error_summary
from .blind import (
    HIDDEN_BRANCH,
    HIDDEN_LENS,
    HIDDEN_RUN,
    MASKED_TRAITS,
    shown_error,
    shown_message,
    shown_metrics,
    shown_record,
    shown_state,
)
from .display import ShownMetrics, fallback_bundle
from .settings_panel import PANEL_SETTINGS, TRAIT_OF_SETTING
from .stream import StreamWidget

__all__ = [
    "WIDGET_KEYS",
    "CompareColumn",
    "EveryColumn",
    "HasColumns",
    "check_ready",
    "describe_settings",
    "has_ended",
]

# Labels: how each setting is named in a column's heading (in this order).
_LABELS = {
    "temperature": "temperature",
    "top_p": "top-p",
    "top_k": "top-k",
    "repetition_penalty": "repetition penalty",
    "max_new_tokens": "max new tokens",
    "do_sample": "sampling",
    "stop": "stop",
    "expect": "expect",
    "budget_s": "budget",
    "alternatives": "alternatives",
}


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def describe_settings(settings: Mapping[str, Any], seed: int | None = None) -> str:
    """A column's label: its settings in words, e.g. ``"temperature 0.7 · seed 42"``."""
    parts = []
    for name, word in _LABELS.items():
        value = settings.get(name)
        if value is None:
            continue
        if name == "do_sample":
            parts.append("sampled" if value else "greedy")
        elif name == "temperature" and value == 0:
            parts.append("temperature 0 (greedy)")
        elif name == "stop":
            parts.append(f"stop {', '.join(map(repr, value))}")
        elif name == "budget_s":
            parts.append(f"budget {_number(value)} s")
        else:
            parts.append(f"{word} {_number(value)}")
    steer = settings.get("steer")
    if isinstance(steer, Mapping):
        # A checked steer names its direction by digest: the strength and layer are what a
        # reader compares between columns.
        parts.append(f"steer {steer['strength']:+g} at layer {steer['layer']}")
    if seed is not None:
        parts.append(f"seed {seed}")
    return " · ".join(parts) or "model defaults"


# What a column's model brings to it, swapped between columns in a blind round (the
# columns stay where they are on the page, left to right: A, B, C).
_SLOT_STATE = (
    "_model",
    "_tokenizer",
    "_replaying",
    "_server_tokens",
    "_settings",
    "_own",
    # Whether (and why not) it can branch: a replay, a server and a local model differ.
    "_model_branches",
    "_endpoint",
    "_cannot_branch",
)
_SLOT_TRAITS = ("settings_defaults", "can_trace", "can_explain", "can_lens")
# The traits every anywidget has (its model's and view's names, its code, its layout): a
# hidden round sends them as they are.
WIDGET_KEYS = frozenset(anywidget.AnyWidget.class_trait_names(sync=True)) | {
    "_esm",
    "_css",
    "_anywidget_id",
}


class CompareColumn(StreamWidget):
    """A column of a CompareWidget: a StreamWidget whose runs take the compare's shared seed.

    Its own Run button (and ``generate``) reruns this column alone, with the seed the
    compare last shared while "same seed" is on. In a blind round the compare hands each
    column another model (:meth:`slot`, :meth:`serve`); while the round is hidden, the traits
    that would tell the models apart are covered (:meth:`relabel`).

    Args:
        model: The column's model, as for :class:`~nbstream.StreamWidget`.
        tokenizer: Its tokenizer.
        own: The settings this column varies (its dict of ``settings=``), named in its label.
        hidden: Whether the compare's round hides what the column runs now.
        **settings: All of the column's settings as created.

    Example:
        >>> column = CompareColumn(model, tokenizer, {"temperature": 0.7}, temperature=0.7)
        >>> column.describe()
        'temperature 0.7'
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        own: dict[str, Any],
        hidden: Callable[[], bool] = lambda: False,
        **settings: Any,
    ) -> None:
        # The settings this column varies (its dict), named in its label, and all of its
        # settings as created: a setting later changed in its panel is named too.
        self._own = own
        self._created = settings
        self._shared_seed: Callable[[], int | None] = lambda: None
        # The compare's heading for this column, from its settings in words (the model's
        # name, a letter in a vote); whether the round hides what the column runs (known
        # before the first state leaves for the page); what the hidden round shows of the
        # columns' capabilities; this column's record["compare"].
        self._dress: Callable[[CompareColumn, str], str] = lambda _column, words: words
        self._hides_template = hidden
        self._covered_caps: Callable[[], dict[str, bool]] = dict
        self._note: Callable[[CompareColumn], CompareRecord | None] = lambda _column: None
        self._words = ""
        # The model's own values of the covered traits (settings_defaults, can_*).
        self._real: dict[str, Any] = {}
        super().__init__(model, tokenizer, **settings)
        self._real = {name: getattr(self, name) for name in _SLOT_TRAITS}

    def join(
        self,
        *,
        shared_seed: Callable[[], int | None],
        dress: Callable[[CompareColumn, str], str],
        covered_caps: Callable[[], dict[str, bool]],
        note: Callable[[CompareColumn], CompareRecord | None],
    ) -> None:
        """Take the compare's part in this column (once, as the compare creates it).

        Args:
            shared_seed: The seed a sampled run gets (``None``: none shared).
            dress: The heading, from this column and its settings in words.
            covered_caps: What a hidden round shows of every column's capabilities.
            note: This column's ``record["compare"]``.
        """
        self._shared_seed = shared_seed
        self._dress = dress
        self._covered_caps = covered_caps
        self._note = note

    @property
    def own_settings(self) -> dict[str, Any]:
        """The settings this column varies (its dict of ``settings=``), as given (checked)."""
        return self._own

    @property
    def settings_words(self) -> str:
        """The settings of its last run in words, seed included ("" before a run)."""
        return self._words

    @property
    def model_capabilities(self) -> dict[str, Any]:
        """The model's own values of what a hidden round covers (its defaults, ``can_*``)."""
        return self._real

    @property
    def tokenizer(self) -> Any:
        """The tokenizer of the model this column runs now (``None``: a server's)."""
        return self._tokenizer

    #: Whether this column's current run was started by the compare's Run all (or
    #: ``cw.generate()``): the compare header then says the runs' start and end once, for
    #: every column, and this column's views say nothing of it (js/src/announce.js); False
    #: for a run of its own (its Run button, its ``generate()``, a branch), which its views
    #: say. Set before the run's first state (its own message, so a view has it when the
    #: run's status comes), and never while a run is queued or running.
    in_run_all = traitlets.Bool(False).tag(sync=True)

    # -- the model this column runs ---------------------------------------------------------
    def slot(self) -> dict[str, Any]:
        """What this column's model brings: model, tokenizer, settings and capabilities."""
        with self._lock:
            state = {name: getattr(self, name) for name in _SLOT_STATE}
            panel = {trait: getattr(self, trait) for trait in PANEL_SETTINGS}
            return {**state, "created": self._created, "panel": panel, "real": dict(self._real)}

    def serve(self, slot: dict[str, Any]) -> None:
        """Run another model from the next run on (never while a run is queued or running)."""
        with self._lock, self.hold_sync():
            for name in _SLOT_STATE:
                setattr(self, name, slot[name])
            self._created = slot["created"]
            self._real = dict(slot["real"])
            # The views' token pieces come from the model's own tokenizer.
            self._feed.use_tokenizer(self._tokenizer)
            self._explainer.close()
            self._explainer = self._make_explainer()
            for trait, value in slot["panel"].items():
                if getattr(self, trait) != value:
                    setattr(self, trait, value)

    def set_in_run_all(self, value: bool) -> None:
        """Say whether the next run is part of a Run all (never while a run is in progress)."""
        with self._lock:
            if not self._slot.busy() and self.in_run_all != value:
                self.in_run_all = value

    def _setting(self, name: str, call: Mapping[str, Any]) -> Any:
        """The value of setting ``name`` for a run given ``call``'s settings."""
        if name in call:
            return call[name]
        trait = TRAIT_OF_SETTING.get(name)
        return getattr(self, trait) if trait is not None else self._created.get(name)

    def samples(self, call: Mapping[str, Any] | None = None) -> bool:
        """Whether a run (given ``call``'s settings) samples; a greedy run ignores any seed.

        Unknown (a model without a generation config, such as an endpoint): True.
        """
        call = call or {}
        settings = {name: self._setting(name, call) for name in ("temperature", "do_sample")}
        default = (self._real.get("settings_defaults") or self.settings_defaults).get("do_sample")
        try:
            return bool(samples(settings, default if isinstance(default, bool) else True))
        except ValueError:  # contradicting settings: the run itself refuses them
            return False

    def describe(self, call: Mapping[str, Any] | None = None, seed: int | None = None) -> str:
        """This column's label for a run given ``call``'s settings and using ``seed``."""
        call = call or {}
        names = [*self._own]
        for trait, name in PANEL_SETTINGS.items():
            changed = getattr(self, trait) != self._created.get(name)
            if name != "seed" and name not in names and (changed or name in call):
                names.append(name)
        shown = {name: self._setting(name, call) for name in names if name != "seed"}
        return describe_settings(shown, seed)

    # No docstring of its own: StreamWidget.generate's is the one to read (inspect.getdoc).
    def generate(self, prompt: Any = None, **settings: Any) -> Generation:  # noqa: D102
        # A run of this column alone (its Run button, code): its views say it. Refused in a
        # hidden blind round: the round's answer would change without anyone seeing it.
        if self._hides_template():
            raise RuntimeError(HIDDEN_RUN)
        return self._generate(False, prompt, **settings)

    def generate_in_run_all(self, prompt: Any = None, **settings: Any) -> Generation:
        """Start this column's run of a Run all: the compare's header says its start and end."""
        return self._generate(True, prompt, **settings)

    def _generate(self, run_all: bool, prompt: Any = None, **settings: Any) -> Generation:
        # The lock across: no other run can start between the flag and this run.
        with self._lock:
            self.set_in_run_all(run_all)
            if self._setting("seed", settings) is None and self.samples(settings):
                shared = self._shared_seed()
                if shared is not None:
                    settings["seed"] = shared
            run = super().generate(prompt, **settings)
            # The seed the run uses: given, shared, or drawn by the engine.
            seed = run.seed
            self._words = self.describe(settings, seed)
            self.label = self._dress(self, self._words)
            return run

    # -- what a hidden blind round covers -----------------------------------------------------
    def _covered(self) -> dict[str, Any]:
        """The traits that tell the models apart: neutral while hidden, else the model's own."""
        run = self.run
        if self._hides_template():
            return {
                "settings_defaults": {},
                "prompt_text": None,
                "prompt_tokens": None,
                "can_lens": False,
                "metrics": shown_metrics(None if run is None else run.metrics),
                **self._covered_caps(),
            }
        return {
            **self._real,
            "prompt_text": None if run is None else run.prompt_text,
            "prompt_tokens": None if run is None else run.prompt_tokens,
            "metrics": {} if run is None else dict(run.metrics),
        }

    def _cover(self) -> bool:
        """Set the covered traits (inside ``hold_sync``); True if the tokens can show again."""
        traced = self.can_trace
        for name, value in self._covered().items():
            if getattr(self, name) != value:
                setattr(self, name, value)
        return self.can_trace and not traced

    def relabel(self) -> None:
        """Write the heading again (a reveal, a new round), and what the round covers."""
        with self.hold_sync():
            self.label = self._dress(self, self._words or self.describe())
            traced = self._cover()
            run = self.run
            if run is not None and run.done and self.status not in (QUEUED, RUNNING):
                error = self.error_words(run)
                if self.error_info != error:
                    self.error_info = error  # type: ignore[assignment]
            self.branch_unavailable = self._why_no_branch()
        # What the page holds of the masked traits changes with the hiding, not with their
        # values: sent again either way (under the lock, as every write of this widget).
        with self._lock:
            self.send_state(list(MASKED_TRAITS))
        if traced:
            # Held back while hidden (a server's column had none): the views get them now,
            # after the state that lets them show.
            self._send_all_tokens()

    def error_words(self, run: Generation) -> dict[str, str] | None:
        """``run``'s error as the views show it (while hidden, without its words)."""
        error = error_summary(run.error)
        if self._hides_template():
            # A message names a model, a server's URL or an architecture.
            hidden = shown_error(error)
            return (
                None if hidden is None else {"type": hidden["type"], "message": hidden["message"]}
            )
        return error

    # -- what a hidden round lets out: the page's state, messages, text copies, repr ---------
    def get_state(self, key: Any = None, drop_defaults: bool = False) -> dict[str, Any]:
        """The synced state; while hidden, as :func:`~nbstream.widgets.blind.shown_state` has it.

        Everything the page (and so a saved notebook) gets of this column passes here.
        """
        state: dict[str, Any] = super().get_state(key, drop_defaults)
        if self.__dict__.get("_hides_template", bool)():
            return shown_state(state, WIDGET_KEYS)
        return state

    def set_state(self, sync_data: Any) -> None:
        """State from the page; while hidden, never a masked trait (the page shows it blank)."""
        masked = []
        if isinstance(sync_data, dict) and self._hides_template():
            masked = [name for name in sync_data if name in MASKED_TRAITS]
            sync_data = {k: v for k, v in sync_data.items() if k not in MASKED_TRAITS}
        super().set_state(sync_data)
        if masked:
            self.send_state(masked)  # the page's field back to what it shows while hidden

    def _send_msg(self, content: RunWidgetMessage) -> None:
        if self._hides_template():
            content = cast("RunWidgetMessage", shown_message(content))
        super()._send_msg(content)

    # The base class's validator of the same name, extended: one validator per trait.
    @traitlets.validate("metrics")
    def _short_printout(self, proposal: dict[str, Any]) -> ShownMetrics:
        shown = ShownMetrics(super()._short_printout(proposal))
        if self.__dict__.get("_hides_template", bool)():
            return ShownMetrics(shown_metrics(shown))
        return shown

    def _why_no_branch(self) -> str:
        # Every column says the same while hidden: a recording's reason would name it.
        if self.__dict__.get("_hides_template", bool)():
            return HIDDEN_BRANCH
        return super()._why_no_branch()

    def _fallback(self) -> tuple[str, dict[str, str]]:
        run = self._slot.run
        if run is None or not self._hides_template():
            return super()._fallback()
        status = run.status  # read first: the text of an ended run is final
        text = run.partial_text
        figures = shown_metrics(run.metrics)
        error = self.error_words(run)
        return status, fallback_bundle(status, text, figures, error, thinking=run.thinking)

    def _shown_fallback(self) -> tuple[str, dict[str, str]]:
        # Not marked as a replay while hidden: that would say what the column runs.
        return self._fallback() if self._hides_template() else super()._shown_fallback()

    def __repr__(self) -> str:
        if self._hides_template():
            return f"<StreamWidget status={self.status!r} run_id={self.run_id}>"
        return super().__repr__()

    def _end_traits(self, run: Generation) -> dict[str, Any]:
        return {**super()._end_traits(run), "error_info": self.error_words(run)}

    def _on_start(self, run: Generation, run_id: int) -> None:
        super()._on_start(run, run_id)
        if self._server_tokens:  # a server's run decides can_trace (its logprobs asked for)
            self._real["can_trace"] = self.can_trace
        self._cover()

    def _handle_view_message(self, content: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "lens" and self._hides_template():
            self._refuse_lens(content)
            return
        super()._handle_view_message(content)

    def _refuse_lens(self, content: dict[str, Any]) -> None:
        """Answer a lens request while hidden: it shows the templated prompt and the layers."""
        view, request = content.get("view"), content.get("request")
        if not isinstance(view, str) or isinstance(request, bool) or not isinstance(request, int):
            return
        run_id, step = content.get("run_id"), content.get("step")
        reply: LensReply = {
            "type": "lens",
            "view": view,
            "request": request,
            "run_id": run_id if isinstance(run_id, int) else None,
            "step": step if isinstance(step, int) else None,
            "error": HIDDEN_LENS,
        }
        self._send_msg(reply)

    @property
    def compare_note(self) -> CompareRecord | None:
        """What this column's record says of the comparison (``record["compare"]``)."""
        return self._note(self)

    @property
    def record(self) -> RunRecord | None:
        """The run's record, with what it was in the comparison (``record["compare"]``)."""
        record = super().record
        note = self.compare_note
        if record is None:
            return None
        copy = record.copy()
        if note is not None:
            copy["compare"] = note
        return shown_record(copy) if self._hides_template() else copy

    def branch(self, step: int, token: Any, **settings: Any) -> Generation:  # noqa: D102
        # A branch is this column's own run (Continue in its popover): its views say it.
        if self._hides_template():
            raise RuntimeError(HIDDEN_RUN)
        with self._lock:
            self.set_in_run_all(False)
            return super().branch(step, token, **settings)


def has_ended(column: StreamWidget) -> bool:
    """Whether a column's run has ended (a column that never ran has not)."""
    run = column.run
    return run is not None and run.done and column.status not in (QUEUED, RUNNING)


def check_ready(text: str, columns: Sequence[StreamWidget]) -> None:
    """Refuse a Run all before anything starts, saying why.

    Refused: an empty prompt, a column still busy, or a column whose settings panel holds an
    invalid value.
    """
    if not text.strip():
        raise ValueError("the prompt is empty; type one in the box or pass it to generate()")
    busy = [i for i, c in enumerate(columns) if c.status in (QUEUED, RUNNING)]
    if busy:
        raise RuntimeError(
            f"column {busy[0] + 1} still has a run in progress; call stop() or wait() first"
        )
    for i, column in enumerate(columns):
        if column.settings_errors:
            problems = "; ".join(map(str, column.settings_errors.values()))
            raise ValueError(f"column {i + 1}: fix its settings first: {problems}")


class HasColumns(Protocol):
    """A comparison: what :class:`EveryColumn` reads and sets."""

    @property
    def columns(self) -> list[StreamWidget]:
        """The columns, left to right."""


class EveryColumn:
    """A view toggle of a whole comparison: on when every column's is; setting it sets all.

    Args:
        name: The columns' trait (``"show_tokens"``, ...).

    Example:
        >>> class Compare:
        ...     columns = [column_a, column_b]
        ...     show_tokens = EveryColumn("show_tokens")
        >>> Compare().show_tokens = True  # column_a and column_b show tokens
    """

    def __init__(self, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> EveryColumn: ...
    @overload
    def __get__(self, instance: HasColumns, owner: type | None = None) -> bool: ...
    def __get__(self, instance: HasColumns | None, owner: type | None = None) -> EveryColumn | bool:
        if instance is None:
            return self
        return all(bool(getattr(column, self.name)) for column in instance.columns)

    def __set__(self, instance: HasColumns, value: bool) -> None:
        for column in instance.columns:
            setattr(column, self.name, value)
