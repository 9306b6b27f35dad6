"""The kernel side shared by the widgets (``StreamWidget``, ``ChatWidget``).

One widget shows one run at a time (the newest). The kernel is the source of truth:
synced traits carry only what is small and changes rarely (state, metrics, error, run id);
the run's text travels as custom messages: deltas with an offset, at most ``FRAME_RATE``
per second, from a follower thread, and a full ``reset`` when a view asks (a view created
mid-stream, a reloaded page, or a view that detected a gap). This module owns that
follower, the sync/reset handling, closing the widgets of a re-run cell, and the display
with its static fallback; the widgets add what they show and how a run starts.
The traits and messages are defined in PROTOCOL.md.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import anywidget
import traitlets

from ..generation import TERMINAL, Generation
from ..protocol import PulledMessage, PullOffsets, RunRecord, RunWidgetMessage
from ..settings import validate_settings
from . import cells as cells
from .display import (
    FallbackDisplay,
    ShownMetrics,
    register_run_display,
    replay_bundle,
    shown_by_widget,
)
from .feed import RunFeed
from .lens_view import LensViewer
from .route import PageRoute, answer_on_sending_subshell, send_unasked
from .sampling import Explainer
from .settings_panel import (
    PANEL_SETTINGS,
    TRAIT_OF_SETTING,
    model_defaults,
    next_run_samples,
    panel_schema,
    run_settings,
    setting_error,
    setting_trait,
)

__all__ = ["VIEW_TOGGLES", "RunWidget", "error_summary"]

logger = logging.getLogger(__name__)

# In a kernel, a run shown as a cell's value (`w.generate(...)` on a cell's last line) shows
# nothing more than its widget does, or a view that follows it to its end (widgets/display.py).
register_run_display()

# How long wait() gives the view thread to publish a finished run's end state.
_JOIN_S = 5.0
#: The teaching views' toggles (traits; also keywords of the widgets).
VIEW_TOGGLES = ("show_tokens", "show_probabilities", "show_alternatives")


#: The traits a page writes (both ways, PROTOCOL.md); it only reads the others.
_PAGE_WRITES = frozenset({*PANEL_SETTINGS, *VIEW_TOGGLES, "prompt", "system"})
#: Synced traits a pull never carries: they never change after construction.
_NEVER_PULLED = frozenset({"settings_schema", "_esm", "_css", "_anywidget_id"})


def _pull_offsets(content: dict[str, Any]) -> PullOffsets | None:
    """A ``pull``'s offsets, or None unless each is a whole number of at least 0."""
    values: list[int] = []
    for name in ("run_id", "text", "tokens", "thinking", "version"):
        value = content.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return None
        values.append(value)
    run_id, text, tokens, thinking, version = values
    return {
        "run_id": run_id,
        "text": text,
        "tokens": tokens,
        "thinking": thinking,
        "version": version,
    }


class _RunInProgress(RuntimeError):
    """A new run while this widget's run is queued or running (a plain RuntimeError to callers)."""


def error_summary(error: BaseException | None) -> dict[str, str] | None:
    """What the views show of a run's error: its type and message (``error_info``)."""
    if error is None:
        return None
    return {"type": type(error).__name__, "message": str(error)}


class RunWidget(anywidget.AnyWidget):
    """Base of the widgets: one current run, streamed to every view of the widget.

    Subclasses set ``_esm`` / ``_css``, start runs with :meth:`_launch`, and say what their
    views and saved outputs show (:meth:`_on_start`, :meth:`_end_traits`,
    :meth:`_on_view_message`, :meth:`_fallback`).
    """

    # -- public synced state ----------------------------------------------------------------
    #: idle, queued, running, complete, failed or cancelled (of the current run).
    status = traitlets.Unicode("idle").tag(sync=True)
    #: The current run's metrics, set when it starts and when it ends.
    metrics = traitlets.Dict().tag(sync=True)
    #: ``{"type", "message"}`` of the current run's error, or None.
    error_info = traitlets.Dict(allow_none=True, default_value=None).tag(sync=True)
    #: A problem with the input of the last click in a view (nothing started), or "".
    input_error = traitlets.Unicode("").tag(sync=True)
    #: Incremented for every run, so views know when a new run's text begins.
    run_id = traitlets.Int(0).tag(sync=True)
    #: The exact text the model got for the current (or last) run: its chat template's
    #: output, special tokens included (``run.prompt_text``); None before the first run.
    prompt_text = traitlets.Unicode(None, allow_none=True).tag(sync=True)
    #: How many tokens ``prompt_text`` is (``run.prompt_tokens``).
    prompt_tokens = traitlets.Int(None, allow_none=True).tag(sync=True)

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

    # -- teaching views (synced both ways: toggles in the views) ---------------------------
    # Any of them on: the views show the answer as its tokens, and the kernel sends them
    # ("tokens" messages); all off: nothing about tokens crosses the wire.
    #: Show the answer as its real tokens (boundaries, id and text on hover).
    show_tokens = traitlets.Bool(False).tag(sync=True)
    #: Shade each token by the model's probability for it (needs a trace: captured for the
    #: next run while this is on).
    show_probabilities = traitlets.Bool(False).tag(sync=True)
    #: A click on (or focus of) a token shows the model's top candidates at that step.
    show_alternatives = traitlets.Bool(False).tag(sync=True)
    #: Whether this widget's run can show tokens and probabilities: a local model, or a
    #: server's run that asked for its logprobs (``alternatives=k``).
    can_trace = traitlets.Bool(False).tag(sync=True)
    #: Whether this widget's model gives its logits for the sampling panel ("How was this
    #: picked?"): a local model. A server's run shows its tokens (can_trace, given
    #: alternatives=k) but sends only its top few candidates, never the whole distribution.
    can_explain = traitlets.Bool(False).tag(sync=True)
    #: Whether this widget's model's layers can be read (the popover's "Inside the model"):
    #: a local model; a run the lens cannot read is refused in words when asked.
    can_lens = traitlets.Bool(False).tag(sync=True)

    def __init__(self, model: Any = None, tokenizer: Any = None, **settings: Any) -> None:
        views = {name: settings.pop(name) for name in VIEW_TOGGLES if name in settings}
        for name, value in views.items():
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, got {value!r:.80}")
        clean = validate_settings(settings)
        # The panel's settings live in traits; the others (budget_s, expect, ...) here.
        self._settings = {k: v for k, v in clean.items() if k not in TRAIT_OF_SETTING}
        panel = {TRAIT_OF_SETTING[k]: v for k, v in clean.items() if k in TRAIT_OF_SETTING}
        from ..models import model_and_tokenizer

        model, tokenizer = model_and_tokenizer(model, tokenizer)
        from ..backends import resolve_backend
        from ..backends.replay import ReplayBackend

        backend = resolve_backend(model, tokenizer)
        # Replaying a recording (``StreamWidget(nbstream.load(path))``): no model; its
        # tokens decode to the texts they were recorded with.
        self._replaying = backend.recording if isinstance(backend, ReplayBackend) else None
        if isinstance(backend, ReplayBackend) and tokenizer is None:
            tokenizer = backend.tokenizer
        self._init_state(model, tokenizer)
        # A server (nbstream.Endpoint) has tokens to show only for a run that asked for its
        # logprobs (alternatives=k): can_trace follows the shown run (_on_start).
        self._server_tokens = backend.is_server
        can_trace = backend.supports_alternatives and (
            not backend.is_server or bool(clean.get("alternatives"))
        )
        super().__init__(
            **panel,
            **views,
            settings_defaults=model_defaults(model),
            can_trace=can_trace,
            can_explain=backend.supports_step_logits,
            can_lens=backend.supports_lens,
        )
        if self._replaying is not None:
            self._show_replay(self._replaying.prompt)
        # The sampling panel's `distribution` requests (widgets/sampling.py). Made here, not
        # at the first request: two first requests at once (main shell and subshell) would
        # make two, and close() would close one. It starts no thread until a request.
        self._explainer = self._make_explainer()
        # The popover's "Inside the model" (widgets/lens_view.py): its own worker thread.
        self._lens = LensViewer(self._explainer_runs, lambda content: self._send_msg(content))
        self.on_msg(self._handle_message)
        # A Stop is handled on the page's subshell even while the cell that drives this
        # widget blocks (see widgets/route.py).
        answer_on_sending_subshell(self.comm)
        cells.register(self)
        # From here on a change of a synced trait is numbered, for views that pull.
        self._versions: dict[str, int] = {}

    def _show_replay(self, prompt: Any) -> None:
        """A widget on a recording says "replay" in its label; its box holds the recorded prompt."""
        if self.has_trait("label") and not self.label:
            self.set_trait("label", "replay")
        if self.has_trait("prompt") and isinstance(prompt, str) and not self.prompt:
            self.set_trait("prompt", prompt)

    def _init_state(self, model: Any, tokenizer: Any) -> None:
        """The widget's own state, before its traits exist."""
        self._model = model
        self._tokenizer = tokenizer
        self._run: Generation | None = None
        self._callbacks: list[Callable[[str], Any]] = []
        # Reentrant: what a subclass shows (its fallback, its transcript) may take it too.
        self._lock = threading.RLock()
        # The run's text and tokens to the views (the widget keeps the traits).
        self._feed = RunFeed(
            lock=self._lock,
            send=lambda content: self._send_msg(content),  # looked up per call
            is_open=lambda: self.comm is not None,
            tokenizer=tokenizer,
            token_options=self._token_options,
            on_state=self._run_state_changed,
            on_end=self._run_ended,
            after_end=self._after_run,
        )
        # The views each page has shown (page id -> view ids), from their sync messages:
        # when a page removes its last one (the cell's output cleared), the widget closes.
        self._views: dict[str, set[str]] = {}
        # The page's subshell: a Stop is handled while a cell keeps the main shell busy.
        self._route = PageRoute()
        # For views that pull (PROTOCOL.md, Pulling): the number of the last change of each
        # synced trait the kernel made, and whether the page's own state is being applied.
        self._version = 0
        self._from_page = False
        # Set once the widget is displayed in a kernel: its outputs' static fallbacks are
        # rewritten (update_display) when a run ends, since they were captured before it did.
        self._output = FallbackDisplay(self._lock, "nbstream")

    def _explainer_runs(self) -> dict[int, Generation]:
        """The shown runs by id (what the sampling panel and the lens may be asked about)."""
        with self._lock:
            return dict(self._token_runs())

    def _make_explainer(self) -> Explainer:
        return Explainer(
            self._explainer_runs, lambda content: self._send_msg(content), self._tokenizer
        )

    # -- one state, whatever thread writes it -------------------------------------------------
    # ipywidgets keeps what a hold_sync() holds back per widget, not per thread: a trait
    # written on one thread while another thread's hold_sync ends can be dropped between its
    # send_state() and the clear of its pending keys, and the page then keeps a stale state
    # ("running" after the end). The view thread, the comm handler and the caller's thread
    # all write this widget's traits, so every write, and every state from the page, is
    # serialized on the widget's lock.
    @contextlib.contextmanager
    def hold_sync(self) -> Iterator[None]:
        """Batch trait changes into one message, holding the widget's lock meanwhile."""
        with self._lock, super().hold_sync():
            yield

    def notify_change(self, change: Any) -> None:
        """Notify observers under the widget's lock, so threads see changes in one order."""
        lock = self.__dict__.get("_lock")
        if lock is None:  # traits set while the object is being built: one thread only
            super().notify_change(change)
            return
        with lock:
            super().notify_change(change)
            self._number_change(change.get("name"))

    def _number_change(self, name: Any) -> None:
        """Number a change the kernel made to a synced trait (lock held): a pull carries it."""
        versions = self.__dict__.get("_versions")
        if versions is None or self._from_page or name in _NEVER_PULLED:
            return
        if self.trait_metadata(name, "sync"):
            self._version += 1
            versions[name] = self._version

    def set_state(self, sync_data: Any) -> None:
        """Apply state from the page under the widget's lock.

        A trait the page only reads is never taken from it: a page that pulls sets such
        traits in its own copy, which a later save may send back.
        """
        if isinstance(sync_data, dict):
            sync_data = {k: v for k, v in sync_data.items() if k in _PAGE_WRITES}
        with self._lock:
            self._from_page = True
            try:
                super().set_state(sync_data)
            finally:
                self._from_page = False

    # -- comm messages go out under the page's subshell (see widgets/route.py) ---------------------
    def send_state(self, key: Any = None) -> None:
        """Send state to the page under the subshell the page is using."""
        route = self.__dict__.get("_route")
        if route is None:  # while the object is being built
            super().send_state(key)
            return
        with route.publishing(self.comm):
            super().send_state(key)

    def send(self, content: Any, buffers: Any = None) -> None:
        """Send a custom message under the subshell the page is using."""
        with self._route.publishing(self.comm):
            super().send(content, buffers)

    # -- Python API ---------------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> str:
        """As :meth:`Generation.wait` for the current run."""
        with self._lock:  # this run and its own view thread, taken together
            run, follower = self._run, self._feed.thread
        if run is None:
            raise RuntimeError("nothing to wait for: call generate() first")
        try:
            return run.wait(timeout)
        finally:
            # Once the run is over, let its view thread publish the end state, so that
            # status, metrics and the views agree when wait() returns. Never the view thread
            # itself (an on_complete callback calling wait()), nor a later run's (one an
            # on_complete callback started meanwhile).
            if run.done and follower is not None and follower is not threading.current_thread():
                follower.join(_JOIN_S)
                # Again from this thread: the view thread's rewrite of the saved output
                # carries the parent of the cell that started the run, and a headless
                # runner (nbclient, nbconvert) that has moved on to a later cell drops it.
                # Sent from here it belongs to the cell that waits, and is kept.
                self._publish_fallback()

    def stop(self, reason: str | None = None) -> bool:
        """Stop the current run; True if there was one to stop.

        ``reason``: as :meth:`Generation.stop`.
        """
        # getattr: close() runs from __del__ even when __init__ failed part-way.
        run = getattr(self, "_run", None)
        return run.stop(reason) if run is not None else False

    def on_complete(self, callback: Callable[[str], Any]) -> None:
        """Call ``callback(text)`` after each run that completes (never after others)."""
        self._callbacks.append(callback)

    @property
    def run(self) -> Generation | None:
        """The current (or last) run."""
        return self._run

    @property
    def result(self) -> str | None:
        """The last run's text, only if it completed; otherwise ``None``."""
        return self._run.result if self._run is not None else None

    @property
    def value(self) -> Any:
        """The last run's parsed JSON, only if it completed with ``expect="json"``."""
        return self._run.value if self._run is not None else None

    @property
    def record(self) -> RunRecord | None:
        """The last run's reproducibility record once it has ended (see ``Generation.record``)."""
        return self._run.record if self._run is not None else None

    @property
    def partial_text(self) -> str:
        """The current run's text so far (partial unless ``status == "complete"``)."""
        return self._run.partial_text if self._run is not None else ""

    @property
    def error(self) -> BaseException | None:
        """The exception that ended the last run, if it failed."""
        return self._run.error if self._run is not None else None

    @property
    def traceback(self) -> str | None:
        """The full traceback of the last run's error, if it failed."""
        error = self.error
        if error is None:
            return None
        return "".join(traceback.format_exception(type(error), error, error.__traceback__))

    def close(self) -> None:
        """Stop any run and close the widget (and its views).

        The run ends ``cancelled`` "because the widget was closed"; ``status``, ``metrics``
        and ``error_info`` still follow it to its end (nothing shows them any more, but
        code reads them).
        """
        self.stop(cells.CLOSED)
        explainer = self.__dict__.get("_explainer")  # close() also runs when __init__ failed
        if explainer is not None:
            explainer.close()
        lens = self.__dict__.get("_lens")
        if lens is not None:
            lens.close()
        super().close()

    @traitlets.validate("metrics")
    def _short_printout(self, proposal: dict[str, Any]) -> ShownMetrics:
        # The same values, printed short: print(w.metrics) is a beginner's first look.
        return ShownMetrics(proposal["value"])

    # -- settings -----------------------------------------------------------------------------
    @traitlets.observe(*PANEL_SETTINGS)
    def _setting_changed(self, change: dict[str, Any]) -> None:
        self._check_setting(change["name"])

    @traitlets.observe("settings_defaults")
    def _defaults_changed(self, _change: dict[str, Any]) -> None:
        self._check_setting("max_new_tokens")  # the context it must fit in is known now

    @traitlets.observe("temperature", "do_sample", "settings_defaults")
    def _sampling_changed(self, _change: dict[str, Any]) -> None:
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
            message = self._over_context(getattr(self, name))
        if message is None:
            errors.pop(name, None)
        else:
            errors[name] = message
        if errors != self.settings_errors:
            self.settings_errors = errors

    def _over_context(self, value: Any) -> str | None:
        """A max_new_tokens no run could use: more than the model's whole context.

        The page refuses it at the field in the same words (js/src/settings_panel.js limitOf).
        """
        context = (self.settings_defaults or {}).get("context_length")
        if not isinstance(value, int) or not isinstance(context, int) or value <= context:
            return None
        return (
            f"max_new_tokens={value} is more than the model's whole context ({context} tokens, "
            f"the prompt included); use less than {context}"
        )

    def _run_settings(self, per_call: dict[str, Any]) -> dict[str, Any]:
        """The settings of the next run: the widget's, then those given to the call.

        Raises ``ValueError`` (nothing started) while a setting of the widget that the call
        does not override is invalid, with the message shown next to its field.
        """
        return run_settings(
            fixed=self._settings,
            panel={trait: getattr(self, trait) for trait in PANEL_SETTINGS},
            errors=self.settings_errors,
            call=per_call,
            # A local model only: a server may send no logprobs (asked: alternatives=k).
            views_need_trace=(self.show_probabilities or self.show_alternatives)
            and self.can_explain,
        )

    # -- for subclasses -----------------------------------------------------------------------
    def _forget_run(self) -> None:
        """Back to no run (a cleared chat): idle traits, and a new run id.

        The new run id makes the views drop the text they were showing. Lock held, inside
        ``hold_sync``.
        """
        self._run = None
        self.status = "idle"
        self.metrics = {}
        self.error_info = None  # type: ignore[assignment]
        self.input_error = ""
        self.prompt_text = None
        self.prompt_tokens = None
        self.run_id += 1
        self._feed.forget(self.run_id)

    def _busy(self) -> bool:
        return self._run is not None and self._run.status not in TERMINAL

    def _launch(self, make_run: Callable[[], Generation], **traits: Any) -> Generation:
        """Start the run ``make_run()`` returns (called with the widget's lock held) and follow it.

        ``traits`` are set with the run's first state, in the same message to the views.
        Raises ``RuntimeError`` if a run is queued or running, and whatever ``make_run``
        raises (bad input: then nothing changed).
        """
        with self._lock:
            if self._busy():
                raise _RunInProgress(
                    "this widget already has a run in progress; call stop() or wait() first"
                )
            run = make_run()
            self._run = run
            shown_by_widget(run, self._output)
            with self.hold_sync():
                for name, value in traits.items():
                    setattr(self, name, value)
                self.input_error = ""
                # traitlets types Dict as never None, whatever allow_none says
                self.error_info = None  # type: ignore[assignment]
                self.metrics = dict(run.metrics)
                self.prompt_text = run.prompt_text
                self.prompt_tokens = run.prompt_tokens
                self.run_id += 1
                # A run quick enough to have ended already shows "running" here: its end
                # state is published by the view thread once the run is done, never before.
                status = run.status if run.status not in TERMINAL else "running"
                self.status = status
                self._on_start(run, self.run_id)
            run_id = self.run_id
            # A saved output must not go on claiming the previous run's end state while
            # this one streams. Published before the view thread exists, so its end-of-run
            # update always comes after this one.
            if self._output.published_status in TERMINAL:
                self._publish_fallback()
            try:
                self._feed.follow(run, run_id, status)
            except BaseException:
                # No view thread (the process is out of threads): the run must not stream on
                # unseen, and the views must still get its end, from the run's own thread.
                run.stop()
                run.add_done_callback(lambda ended: self._run_ended(ended, run_id))
                raise
        return run

    def _on_start(self, run: Generation, run_id: int) -> None:
        """More traits to set as a run starts (inside the launch's ``hold_sync``)."""
        if self.__dict__.get("_server_tokens"):
            # A server's run shows its tokens when it has a trace (alternatives=k); a chat's
            # token view lists every answer, so every one of them needs one (an answer
            # without would show no tokens, and no text, in the token view).
            runs = [shown for _, shown in self._token_runs()] or [run]
            self.can_trace = all(shown.trace is not None for shown in runs)

    def _end_traits(self, run: Generation) -> dict[str, Any]:
        """The traits to set when ``run`` has ended (one state message to the views)."""
        error = error_summary(run.error)
        return {"status": run.status, "metrics": run.metrics, "error_info": error}

    def _on_view_message(self, kind: Any, content: dict[str, Any]) -> None:
        """A custom message from a view other than ``sync`` and ``stop``."""

    def _fallback(self) -> tuple[str, dict[str, str]]:
        """(the state it shows, the text/plain and text/markdown fallbacks)."""
        raise NotImplementedError

    def _report_input_error(self, action: Callable[[], Any]) -> None:
        """Run a view's request; bad input becomes ``input_error``, a concurrent run is ignored."""
        try:
            action()
        except _RunInProgress:
            # Another click (or a call on another thread) started a run in the meantime:
            # this click is ignored like the others, not shown to the user as an input error.
            logger.debug("ignored: a run started concurrently")
        except (TypeError, ValueError, RuntimeError) as exc:
            self.input_error = str(exc)

    # -- what the feed reports (see _feed.RunFeed) -------------------------------------------
    def _run_state_changed(self, run: Generation, run_id: int, status: str) -> None:
        self._set_if_current(run_id, status=status, metrics=run.metrics)

    def _run_ended(self, run: Generation, run_id: int) -> None:
        self._set_if_current(run_id, **self._end_traits(run))
        self._publish_fallback()

    def _after_run(self, run: Generation) -> None:
        if run.status != "complete":
            return
        text = run.result or ""
        for callback in list(self._callbacks):
            try:
                callback(text)
            except Exception:
                logger.exception("an on_complete callback raised; the run stays complete")

    # -- tokens, for the teaching views ---------------------------------------------------
    def _token_views_on(self) -> bool:
        return self.show_tokens or self.show_probabilities or self.show_alternatives

    def _token_options(self) -> bool | None:
        """Whether the views show each token's candidates; None while no token view is on.

        None also when the model has no tokens to show.
        """
        if not (self.can_trace and self._token_views_on()):
            return None
        return self.show_alternatives

    def _token_runs(self) -> list[tuple[int, Generation]]:
        """The runs whose tokens the views show, with their run ids (lock held)."""
        return [(self.run_id, self._run)] if self._run is not None else []

    def _send_all_tokens(self) -> None:
        """Every shown run's tokens in full (a toggle changed, or a view synced)."""
        with self._lock:
            self._feed.send_all_tokens(self._token_runs())

    @traitlets.observe(*VIEW_TOGGLES)
    def _token_view_changed(self, change: dict[str, Any]) -> None:
        if not change["new"]:
            return  # the views drop what they no longer show; nothing to send
        try:
            self._send_all_tokens()
        except Exception:  # a view toggle must never raise into the comm handler
            logger.exception("nbstream: sending the tokens to the views failed")

    def _send_msg(self, content: RunWidgetMessage) -> None:
        """A custom message to every view (ipywidgets' ``send``).

        The one place the feed and the widgets send through, so a test or a wrapper can watch every
        message.
        """
        self.send(content)

    def _set_if_current(self, run_id: int, **traits: Any) -> None:
        # Checked and written under the lock: a newer run launched in between must never
        # get an older run's state.
        with self._lock:
            # A closed widget's traits still follow its run (nothing is sent: no comm).
            if run_id != self.run_id:
                return
            with self.hold_sync():
                for name, value in traits.items():
                    setattr(self, name, value)

    def _handle_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        # Possibly on a subshell's thread, while a cell runs on the main one: every branch
        # below only takes the widget's lock (a stop not even that) and sends comm messages.
        self._route.note(self.comm)
        try:
            self._handle_view_message(content)
        finally:
            self._route.handled(self.comm)

    def _handle_view_message(self, content: Any) -> None:
        if not isinstance(content, dict):
            return
        kind = content.get("type")
        if kind == "sync":
            page, view = content.get("page"), content.get("view")
            if isinstance(page, str) and isinstance(view, str):
                self._views.setdefault(page, set()).add(view)
            with self._lock:
                self._feed.reset(content.get("view"))
                self._send_all_tokens()
            if isinstance(view, str):
                # Whether what the kernel sends unasked reaches this view (see _answer_pull).
                send_unasked(self.comm, lambda: self._send_msg({"type": "probe", "view": view}))
        elif kind == "pull":
            self._answer_pull(content)
        elif kind == "stop":
            self.stop()
        elif kind == "removed":
            self._view_removed(content.get("page"), content.get("view"))
        elif kind == "distribution":
            self._explainer.request(content)  # answered on its own thread (widgets/sampling.py)
        elif kind == "lens":
            self._lens.request(content)  # answered on its own thread (widgets/lens_view.py)
        else:
            # A Run / Send carries the panel's values: ipywidgets holds back state updates
            # until the kernel has answered the previous one, but not custom messages, so
            # an edit made just before the click may not have arrived yet.
            values = content.get("settings")
            if isinstance(values, dict):
                with self.hold_sync():
                    for name, value in values.items():
                        if name in PANEL_SETTINGS and getattr(self, name) != value:
                            setattr(self, name, value)
            self._on_view_message(kind, content)

    def _answer_pull(self, content: dict[str, Any]) -> None:
        """Answer a view that pulls, inside this handler: what it lacks, by its offsets.

        A host that delivers a kernel message to a view only as an answer to that view's own
        message (Colab, by its parent header) never shows a push; the view finds out (it never
        gets the probe sent after its ``sync``) and asks instead. The answer carries the
        synced traits changed since the version the view holds (applied by the page as a
        synced change would be) and the feed's messages after its offsets.
        """
        view = content.get("view")
        offsets = _pull_offsets(content)
        if not isinstance(view, str) or offsets is None:
            return  # a malformed pull: never raise into the comm handler
        with self._lock:
            answer: PulledMessage = {
                "type": "pulled",
                "view": view,
                "version": self._version,
                "messages": self._feed.pull(view, offsets, self._token_runs()),
            }
            changed = [name for name, v in self._versions.items() if v > offsets["version"]]
            if changed:
                answer["state"] = self.get_state(changed)
        self._send_msg(answer)

    def _view_removed(self, page: Any, view: Any) -> None:
        """A view left a notebook that stays open (its output was cleared, its cell deleted).

        With no view of this widget left in that page, close the widget: its run stops rather than
        streaming on where nobody can see it or press Stop. Views of other pages (another browser
        window) are not counted: the front end only knows its own page, and a page that was reloaded
        never says its views are gone.
        """
        views = self._views.get(page) if isinstance(page, str) else None
        if views is None or not isinstance(view, str) or view not in views:
            return  # not a view this widget knows: never close on a stray message
        views.discard(view)
        if not views:
            logger.info("nbstream: the widget's output was removed; closing it")
            self.stop(cells.CLOSED_BY_CLEARING)
            self.close()

    # -- display ------------------------------------------------------------------------------
    def _bundle(self) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
        if self.comm is None:  # closed: anywidget's bundle would need the comm's id
            return None
        bundle = super()._repr_mimebundle_()
        if bundle is None:
            return None
        data, metadata = bundle
        status, fallback = self._shown_fallback()
        return status, {**data, **fallback}, metadata

    def _shown_fallback(self) -> tuple[str, dict[str, str]]:
        """:meth:`_fallback`, marked as a replay when the widget replays a recording."""
        status, fallback = self._fallback()
        if self.__dict__.get("_replaying") is not None:
            fallback = replay_bundle(fallback)
        return status, fallback

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
        # The widget view for live front ends, plus text/plain and text/markdown with the
        # text and its state for everything that cannot run widgets (nbconvert, GitHub).
        bundle = self._bundle()
        return None if bundle is None else bundle[1:]

    def _ipython_display_(self) -> None:
        self._output.display(lambda: self.model_id, self._bundle, lambda: self._shown_fallback()[1])

    def _publish_fallback(self) -> None:
        """Rewrite the static fallback of every output showing this widget (any thread)."""
        if self.comm is not None:
            self._output.republish(self._bundle)
