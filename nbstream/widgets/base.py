"""The kernel side shared by the widgets (``StreamWidget``, ``ChatWidget``).

One widget shows one run at a time (the newest). The kernel is the source of truth:
synced traits carry only what is small and changes rarely (state, metrics, error, run id);
the run's text travels as custom messages: deltas with an offset, at most ``FRAME_RATE``
per second, from a follower thread, and a full ``reset`` when a view asks (a view created
mid-stream, a reloaded page, or a view that detected a gap). :class:`RunWidget` composes
the parts that do this: the state written under one lock (:mod:`.synced`), the settings
panel's traits (:mod:`.settings_traits`), the current run (:mod:`.run_slot`), its feed to
the views (:mod:`.feed`), the pages' views and pulls (:mod:`.page_views`), the cell's
widgets (:mod:`.cells`) and the display with its static fallback (:mod:`.display`); it
routes the views' messages to them, and the widgets add what they show and how a run
starts. The traits and messages are defined in PROTOCOL.md.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

import traitlets

from ..generation import TERMINAL, Generation
from ..protocol import RunRecord, RunWidgetMessage
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
from .route import answer_on_sending_subshell, send_unasked
from .run_slot import RunInProgress, RunSlot
from .sampling import Explainer
from .settings_panel import PANEL_SETTINGS, run_settings, widget_settings
from .settings_traits import SettingsWidget
from .synced import SyncedWidget
from .token_views import VIEW_TOGGLES, TokenViewsWidget
from .widget_model import widget_model

__all__ = ["VIEW_TOGGLES", "RunWidget", "error_summary"]

logger = logging.getLogger(__name__)

# In a kernel, a run shown as a cell's value (`w.generate(...)` on a cell's last line) shows
# nothing more than its widget does, or a view that follows it to its end (widgets/display.py).
register_run_display()


def error_summary(error: BaseException | None) -> dict[str, str] | None:
    """What the views show of a run's error: its type and message (``error_info``)."""
    if error is None:
        return None
    return {"type": type(error).__name__, "message": str(error)}


class RunWidget(SyncedWidget, SettingsWidget, TokenViewsWidget):
    """Base of the widgets: one current run, streamed to every view of the widget.

    Subclasses set ``_esm`` / ``_css``, start runs with :meth:`_launch`, and say what their
    views and saved outputs show (:meth:`_on_start`, :meth:`_end_traits`,
    :meth:`_on_view_message`, :meth:`_fallback`).
    """

    _PAGE_WRITES = frozenset({*PANEL_SETTINGS, *VIEW_TOGGLES, "prompt", "system", "steer_strength"})

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

    def __init__(self, model: Any = None, tokenizer: Any = None, **settings: Any) -> None:
        views, panel, self._settings = widget_settings(settings, VIEW_TOGGLES)
        resolved = widget_model(model, tokenizer, panel.get("alternatives"))
        # Replaying a recording (``StreamWidget(nbstream.load(path))``): no model; its
        # tokens decode to the texts they were recorded with.
        self._replaying = resolved.replaying
        self._init_state(resolved.model, resolved.tokenizer)
        # can_trace follows the shown run of a server (_on_start).
        self._server_tokens = resolved.is_server
        super().__init__(**panel, **views, **resolved.traits)
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
        self._pages.numbering = True

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
        self._init_sync()  # the lock, the page's subshell, the pages' views
        # The run's text and tokens to the views (the widget keeps the traits).
        self._feed = RunFeed(
            lock=self._lock,
            send=lambda content: self._send_msg(content),  # looked up per call
            is_open=lambda: self.comm is not None,
            tokenizer=tokenizer,
            token_options=self._token_options,
            on_state=lambda run, run_id, status: self._set_if_current(
                run_id, status=status, metrics=run.metrics
            ),
            on_end=self._run_ended,
            after_end=self._after_run,
        )
        # The current run, one at a time, and the callbacks of those that complete.
        self._slot = RunSlot(self._lock, self._feed)
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

    # -- Python API ---------------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> str:
        """As :meth:`Generation.wait` for the current run."""
        return self._slot.wait(timeout, self._publish_fallback)

    def stop(self, reason: str | None = None) -> bool:
        """Stop the current run; True if there was one to stop.

        ``reason``: as :meth:`Generation.stop`.
        """
        # close() runs from __del__ even when __init__ failed part-way.
        slot = self.__dict__.get("_slot")
        return slot.stop(reason) if slot is not None else False

    def on_complete(self, callback: Callable[[str], Any]) -> None:
        """Call ``callback(text)`` after each run that completes (never after others)."""
        self._slot.on_complete(callback)

    @property
    def run(self) -> Generation | None:
        """The current (or last) run."""
        return self._slot.run

    @property
    def result(self) -> str | None:
        """The last run's text, only if it completed; otherwise ``None``."""
        return self._slot.run.result if self._slot.run is not None else None

    @property
    def value(self) -> Any:
        """The last run's parsed JSON, only if it completed with ``expect="json"``."""
        return self._slot.run.value if self._slot.run is not None else None

    @property
    def record(self) -> RunRecord | None:
        """The last run's reproducibility record once it has ended (see ``Generation.record``)."""
        return self._slot.run.record if self._slot.run is not None else None

    @property
    def partial_text(self) -> str:
        """The current run's text so far (partial unless ``status == "complete"``)."""
        return self._slot.run.partial_text if self._slot.run is not None else ""

    @property
    def error(self) -> BaseException | None:
        """The exception that ended the last run, if it failed."""
        return self._slot.run.error if self._slot.run is not None else None

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

    def _run_settings(self, per_call: dict[str, Any]) -> dict[str, Any]:
        """The settings of the next run: the widget's, then those given to the call.

        Raises ``ValueError`` (nothing started) while a setting of the widget that the call
        does not override is invalid, with the message shown next to its field.
        """
        return run_settings(
            # The Steering slider, while on, over a steer the widget was made with.
            fixed={**self._settings, **self._steer_settings()},
            panel={trait: getattr(self, trait) for trait in PANEL_SETTINGS},
            errors=self.settings_errors,
            call=per_call,
            # A local model only: a server may send no logprobs (asked: alternatives=k).
            views_need_trace=self._views_need_trace(),
        )

    # -- for subclasses -----------------------------------------------------------------------
    def _forget_run(self) -> None:
        """Back to no run (a cleared chat): idle traits, and a new run id.

        The new run id makes the views drop the text they were showing. Lock held, inside
        ``hold_sync``.
        """
        self._slot.run = None
        self.status = "idle"
        self.metrics = {}
        self.error_info = None  # type: ignore[assignment]
        self.input_error = ""
        self.prompt_text = None
        self.prompt_tokens = None
        self.run_id += 1
        self._feed.forget(self.run_id)

    def _launch(self, make_run: Callable[[], Generation], **traits: Any) -> Generation:
        """Start the run ``make_run()`` returns (called with the widget's lock held) and follow it.

        ``traits`` are set with the run's first state, in the same message to the views.
        Raises ``RuntimeError`` if a run is queued or running, and whatever ``make_run``
        raises (bad input: then nothing changed).
        """
        with self._lock:
            run = self._slot.take(make_run)
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
            self._slot.follow(run, run_id, status, self._run_ended)
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
        except RunInProgress:
            # Another click (or a call on another thread) started a run in the meantime:
            # this click is ignored like the others, not shown to the user as an input error.
            logger.debug("ignored: a run started concurrently")
        except (TypeError, ValueError, RuntimeError) as exc:
            self.input_error = str(exc)

    # -- what the feed reports (see _feed.RunFeed) -------------------------------------------
    def _run_ended(self, run: Generation, run_id: int) -> None:
        self._set_if_current(run_id, **self._end_traits(run))
        self._publish_fallback()

    def _after_run(self, run: Generation) -> None:
        self._slot.completed(run)  # the on_complete callbacks

    # -- tokens, for the teaching views (widgets/token_views.py) ----------------------------
    def _token_runs(self) -> list[tuple[int, Generation]]:
        """The runs whose tokens the views show, with their run ids (lock held)."""
        run = self._slot.run
        return [(self.run_id, run)] if run is not None else []

    def _send_all_tokens(self) -> None:
        """Every shown run's tokens in full (a toggle turned on, or a view synced)."""
        with self._lock:
            self._feed.send_all_tokens(self._token_runs())

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
        page, view = content.get("page"), content.get("view")
        if kind == "sync":
            self._pages.shown(page, view)
            with self._lock:
                self._feed.reset(view)
                self._send_all_tokens()
            if isinstance(view, str):
                # Whether what the kernel sends unasked reaches this view: a view that never
                # gets the probe pulls instead (PROTOCOL.md, Pulling; widgets/page_views.py).
                send_unasked(self.comm, lambda: self._send_msg({"type": "probe", "view": view}))
        elif kind == "pull":
            # Answered inside this handler: a host that shows a view only the answers to its
            # own messages (Colab) never shows a push.
            with self._lock:
                answer = self._pages.answer(
                    content,
                    lambda view, offsets: self._feed.pull(view, offsets, self._token_runs()),
                    self.get_state,
                )
            if answer is not None:  # a malformed pull: never raise into the comm handler
                self._send_msg(answer)
        elif kind == "stop":
            self.stop()
        elif kind == "removed":
            # The page's last view of this widget left a notebook that stays open (its output
            # cleared, its cell deleted): its run stops rather than streaming on unseen.
            if self._pages.removed(page, view):
                logger.info("nbstream: the widget's output was removed; closing it")
                self.stop(cells.CLOSED_BY_CLEARING)
                self.close()
        elif kind == "distribution":
            self._explainer.request(content)  # answered on its own thread (widgets/sampling.py)
        elif kind == "lens":
            self._lens.request(content)  # answered on its own thread (widgets/lens_view.py)
        elif kind == "attention":
            self._attention_request(content)  # its own thread (widgets/attention_view.py)
        else:
            self._take_panel_values(content.get("settings"))  # a Run / Send carries them
            self._on_view_message(kind, content)

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
